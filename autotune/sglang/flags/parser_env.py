"""Parser-only environments: one SGLang release's REAL argument parser, importable on a CPU-only machine.

``ensure(version)`` (or ``ensure(version, wheel=path)``) lays out, under
``~/.cache/autotune/parsers/`` (``AUTOTUNE_PARSER_CACHE`` overrides)::

    _deps-py3.11/      a venv with the small pure-Python packages SGLang's server_args imports
    <version>/site/    the release's wheel, installed --no-deps
    <version>/python   a launcher: that venv's python with site/ on its path and the heavy modules stubbed

and returns the launcher, which runs ``_real_parser_script.py`` like any
SGLang-capable python. The heavy modules (torch, triton, transformers, ...)
are replaced by placeholders (``_parser_stubs.py``); SGLang's own parser code
is unchanged. Found by importing every release from 0.5.9 to 0.5.23: the
real packages below are needed because SGLang uses them at import time in
ways a placeholder cannot stand in for (pydantic models whose fields are
openai types, ``dill.dumps(...).hex()``, msgspec structs...).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import AutotuneError
from autotune.sglang.versions import as_version

__all__ = ["DEPS", "STUBS", "ParserEnv", "ParserEnvError", "cache_dir", "ensure"]

#: Real packages (small, mostly pure Python) in the shared venv.
DEPS = (
    "pydantic", "openai", "orjson", "numpy", "requests", "psutil", "packaging", "pyyaml", "tqdm", "aiohttp",
    "fastapi", "uvicorn", "starlette", "msgspec", "pybase64", "pyzmq", "pillow", "safetensors", "dill", "regex",
    "partial_json_parser",
)
#: Top-level modules replaced by placeholders (GPU runtimes and multi-GB or native-heavy packages).
STUBS = ("torch", "triton", "torchvision", "transformers", "huggingface_hub", "IPython", "sentencepiece", "xgrammar")
_PIP_TIMEOUT_S = 900


class ParserEnvError(AutotuneError):
    """A parser-only environment could not be built (no registry, a wheel that does not install...)."""


@dataclass(frozen=True)
class ParserEnv:
    version: str
    python: Path  # the launcher: pass it wherever an SGLang-capable python is expected
    site: Path


def cache_dir() -> Path:
    return Path(os.environ.get("AUTOTUNE_PARSER_CACHE", "~/.cache/autotune/parsers")).expanduser()


def _run(argv: list[str], what: str) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ParserEnvError(f"{what}: {exc}") from exc
    if proc.returncode != 0:
        tail = [ln for ln in proc.stderr.splitlines() if "WARNING" not in ln][-3:]
        raise ParserEnvError(f"{what} failed (rc {proc.returncode}): {' | '.join(tail)}")


def _deps_python() -> Path:
    """The shared venv's python, created (once) with :data:`DEPS`."""
    venv = cache_dir() / f"_deps-py{sys.version_info.major}.{sys.version_info.minor}"
    python = venv / "bin" / "python"
    marker = venv / "autotune-deps.txt"
    wanted = "\n".join(DEPS) + "\n"
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "venv", str(venv)], f"creating the venv {venv}")
    _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *DEPS],
         f"pip install into {venv}")
    marker.write_text(wanted)
    return python


def ensure(version: str, *, wheel: Path | None = None) -> ParserEnv:
    """The parser-only environment of SGLang ``version`` (built on first use; ``wheel`` instead of the registry)."""
    v = str(as_version(version))
    root = cache_dir() / v
    site, launcher = root / "site", root / "python"
    python = _deps_python()
    if not (site / "sglang" / "srt" / "server_args.py").exists():
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="site-", dir=root))
        source = str(wheel) if wheel is not None else f"sglang=={v}"
        _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
              "--no-compile", "--target", str(tmp), source], f"pip install --no-deps {source}")
        shutil.rmtree(site, ignore_errors=True)
        tmp.rename(site)
    launcher.write_text(
        "#!/bin/sh\n"
        "# autotune parser-only environment for SGLang " + v + " (autotune/sglang/flags/parser_env.py)\n"
        f"PYTHONPATH='{site}' AUTOTUNE_PARSER_STUBS='{','.join(STUBS)}' exec '{python}' \"$@\"\n"
    )
    launcher.chmod(0o755)
    return ParserEnv(version=v, python=launcher, site=site)


def main(argv: list[str] | None = None) -> int:
    """``python -m autotune.sglang.flags.parser_env 0.5.9 0.5.23``: build (or find) those environments, print each launcher."""
    import time

    versions = sys.argv[1:] if argv is None else argv
    for version in versions:
        start = time.monotonic()
        try:
            env = ensure(version)
        except (ParserEnvError, AutotuneError) as exc:
            print(f"error: SGLang {version}: {exc}", file=sys.stderr)
            return 1
        print(f"{env.version}: {env.python} ({time.monotonic() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
