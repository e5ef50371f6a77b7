"""Build (or reuse) a venv that runs real SGLang: ``autotune sglang-env install``.

A venv is good when its marker file names the same version, device and package
list, and its python imports ``sglang`` (with the CPU engine on, for CPU) and
reports that version. A good venv is reused in seconds; a stale or broken one
is rebuilt from scratch. On CPU autotune's pure-PyTorch ``sgl_kernel``
stand-in is copied into site-packages (and refreshed whenever the repo's copy
changes, without a rebuild).

Default location: ``$AUTOTUNE_CACHE/sglang/<version>-<device>`` (``AUTOTUNE_CACHE``
defaults to ``~/.cache/autotune``), outside any checkout, so a CI machine reuses
it between runs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import AutotuneError
from autotune.sglang_env.packages import check_release, install_steps

log = logging.getLogger(__name__)

MARKER = "autotune-sglang-env.json"
STAND_IN = Path(__file__).with_name("sgl_kernel_cpu") / "sgl_kernel"
CPU_ENV = {"SGLANG_USE_CPU_ENGINE": "1"}
# Deep: SGLang's server args import (torch, transformers, the CPU engine's sgl_kernel import).
_CHECK = (
    "import json, sglang, importlib.metadata as m; from sglang.srt.server_args import ServerArgs; "
    "print(json.dumps({'version': m.version('sglang')}))"
)
# Quick (reuse of a venv whose marker matches): the packages are there, nothing heavy is imported.
_QUICK_CHECK = (
    "import json, importlib.metadata as m, importlib.util as u; "
    "missing = [n for n in ('sglang', 'torch', 'sgl_kernel') if u.find_spec(n) is None]; "
    "print(json.dumps({'version': m.version('sglang') if not missing else None, 'missing': missing}))"
)


class EnvBuildError(AutotuneError):
    """A real-SGLang venv could not be built or does not work."""


@dataclass(frozen=True)
class SglangEnv:
    prefix: Path
    version: str
    device: str

    @property
    def python(self) -> Path:
        return self.prefix / "bin" / "python"

    @property
    def env(self) -> dict[str, str]:
        """Environment variables a server launched from this venv needs."""
        return dict(CPU_ENV) if self.device == "cpu" else {}


def cache_root() -> Path:
    return Path(os.environ.get("AUTOTUNE_CACHE") or Path.home() / ".cache" / "autotune")


def default_prefix(version: str, device: str) -> Path:
    """``$AUTOTUNE_CACHE/sglang/<version>-<device>``; the version must name a release (never ``../..``)."""
    return cache_root() / "sglang" / f"{check_release(version)}-{device}"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def stand_in_digest() -> str:
    return _digest(b"".join(p.read_bytes() for p in sorted(STAND_IN.glob("*.py"))))


def _steps_digest(version: str, device: str) -> str:
    return _digest(json.dumps(install_steps(version, device)).encode())


def _site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True, timeout=60)
    return Path(out.stdout.strip())


def install_stand_in(python: Path) -> Path:
    """Copy the ``sgl_kernel`` stand-in into the venv's site-packages (replacing any older copy)."""
    dest = _site_packages(python) / "sgl_kernel"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(STAND_IN, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def check(env: SglangEnv, *, timeout_s: float = 300.0, deep: bool = True) -> str | None:
    """None when the venv's python imports SGLang at ``env.version``; else why not (one line).

    ``deep=False`` only looks the packages up (well under a second; used to reuse a venv
    whose marker matches); the deep check imports SGLang's server arguments (10-40 s).
    """
    if not env.python.exists():
        return f"{env.python} does not exist"
    try:
        proc = subprocess.run([str(env.python), "-c", _CHECK if deep else _QUICK_CHECK], capture_output=True,
                              text=True, timeout=timeout_s, env={**os.environ, **env.env}, check=False)
    except subprocess.TimeoutExpired:
        return f"importing sglang took longer than {timeout_s:.0f} s"
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"importing sglang failed: {tail}"
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
        got = answer["version"]
    except (IndexError, KeyError, json.JSONDecodeError):
        return f"no version from {env.python}: {proc.stdout[-200:]!r}"
    if answer.get("missing"):
        return f"{env.python} lacks {', '.join(answer['missing'])}"
    if got != env.version:
        return f"{env.python} has SGLang {got}, not {env.version}"
    return None


def _marker(env: SglangEnv) -> dict[str, str]:
    return {"version": env.version, "device": env.device, "packages": _steps_digest(env.version, env.device),
            "python": f"{sys.version_info.major}.{sys.version_info.minor}"}


def _read_marker(prefix: Path) -> dict[str, str] | None:
    try:
        data = json.loads((prefix / MARKER).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _run(argv: list[str], log_path: Path, timeout_s: float) -> None:
    with log_path.open("a") as fh:
        fh.write(f"$ {' '.join(argv)}\n")
        fh.flush()
        try:
            proc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise EnvBuildError(f"{argv[0]} {' '.join(argv[1:4])} ... took over {timeout_s:.0f} s "
                                f"(log: {log_path})") from exc
    if proc.returncode != 0:
        tail = log_path.read_text().strip().splitlines()[-1:] or ["no output"]
        raise EnvBuildError(f"{' '.join(argv[1:5])} ... failed (rc {proc.returncode}): {tail[0]} (log: {log_path})")


def ensure(version: str, device: str = "cpu", prefix: Path | None = None, *, force: bool = False,
           timeout_s: float = 1800.0) -> tuple[SglangEnv, bool]:
    """The venv for ``version``/``device``, built only when missing, stale or broken.

    Returns the env and whether it was (re)built now.
    """
    env = SglangEnv(Path(prefix or default_prefix(version, device)).expanduser().absolute(), version, device)
    steps = install_steps(version, device)  # validates version and device first
    if not force and _read_marker(env.prefix) == _marker(env):
        if device == "cpu" and _read_marker(env.prefix / "lib") != {"stand_in": stand_in_digest()}:
            _refresh_stand_in(env)
        why = check(env, deep=False)
        if why is None:
            log.info("reusing SGLang %s (%s) at %s", version, device, env.prefix)
            return env, False
        log.warning("rebuilding %s: %s", env.prefix, why)
    if env.prefix.exists():
        if not (env.prefix / "pyvenv.cfg").exists():
            raise EnvBuildError(f"--prefix: {env.prefix} exists and is not a venv; refusing to replace it")
        shutil.rmtree(env.prefix)
    env.prefix.parent.mkdir(parents=True, exist_ok=True)
    build_log = env.prefix.parent / f"{env.prefix.name}.build.log"
    build_log.write_text("")
    t0 = time.monotonic()
    log.info("building SGLang %s (%s) at %s (log: %s)", version, device, env.prefix, build_log)
    _run([sys.executable, "-m", "venv", str(env.prefix)], build_log, 300)
    pip = [str(env.python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    for step in steps:
        _run([*pip, *step], build_log, timeout_s)
    if device == "cpu":
        _refresh_stand_in(env)
    why = check(env)
    if why is not None:
        raise EnvBuildError(f"the new venv at {env.prefix} does not work: {why} (log: {build_log})")
    (env.prefix / MARKER).write_text(json.dumps(_marker(env)) + "\n")
    log.info("built %s in %.0f s", env.prefix, time.monotonic() - t0)
    return env, True


def _refresh_stand_in(env: SglangEnv) -> None:
    install_stand_in(env.python)
    (env.prefix / "lib" / MARKER).write_text(json.dumps({"stand_in": stand_in_digest()}) + "\n")
