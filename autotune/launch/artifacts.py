"""Per-trial launch artifacts: the exact command, argv, environment and hardware facts.

Every trial leaves what is needed to rerun its server by hand: ``command.sh`` (one
copy-pasteable line with the environment assignments), ``argv.json``,
``env.json`` and ``launch.json`` (SGLang version, GPU kind, driver). Secrets
never reach these files: ``env.json`` shows ``***`` and ``command.sh`` refers to
the user's own environment (``HF_TOKEN="$HF_TOKEN"``) so the line still works
when pasted into a shell that has the token.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shlex
import socket
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.redact import is_secret_name, redact_argv, redact_env

logger = logging.getLogger(__name__)


def nvidia_driver_version() -> str | None:
    """The NVIDIA driver version through nvidia-ml-py, or None when unknown."""
    try:
        import pynvml  # noqa: PLC0415 - optional, only on GPU nodes
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no driver, no GPU: the version is simply unknown
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


def secret_variables(env: Mapping[str, str] | None) -> list[str]:
    """The names of ``env`` whose value holds a secret: a secret name (``HF_TOKEN``), or a value
    the rule hides anything of (a URL's password, a token shape, a pair in a JSON text)."""
    env = dict(env or {})
    shown = redact_env(env)
    return [name for name, value in env.items() if is_secret_name(name) or shown[name] != str(value)]


def shell_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """One shell line: ``NAME=value ... argv``, shlex-quoted, every variable that holds a secret
    taken from ``$NAME`` (:func:`secret_variables`), the argv's secrets hidden."""
    parts: list[str] = []
    secret = set(secret_variables(env))
    for name, value in (env or {}).items():
        if name in secret:
            parts.append(f'{name}="${name}"')
        else:
            parts.append(f"{name}={shlex.quote(str(value))}")
    parts.extend(shlex.quote(a) for a in redact_argv(list(argv)))
    return " ".join(parts)


def _write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_launch_artifacts(
    dir: str | os.PathLike[str],  # noqa: A002 - the documented contract name
    argv: Sequence[str],
    env: Mapping[str, str] | None,
    *,
    sglang_version: str,
    gpu: str,
    driver: str | None = None,
) -> dict[str, str]:
    """Write command.sh, argv.json, env.json and launch.json into ``dir``.

    ``env`` is what autotune adds to the inherited environment (the study's env
    and ``CUDA_VISIBLE_DEVICES``), not the whole ``os.environ``. Returns
    ``{artifact name: path}``.
    """
    out = Path(dir)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(env or {})
    if driver is None:
        driver = nvidia_driver_version()
    paths = {
        "command.sh": out / "command.sh",
        "argv.json": out / "argv.json",
        "env.json": out / "env.json",
        "launch.json": out / "launch.json",
    }
    secrets = sorted(secret_variables(env))
    lines = ["#!/bin/sh", "# The exact launch of this trial's server (autotune)."]
    if secrets:
        lines.append(f"# Secrets are read from your environment: {', '.join(secrets)}")
    lines.append(shell_command(argv, env))
    _write_atomic(paths["command.sh"], "\n".join(lines) + "\n", mode=0o755)
    _write_atomic(paths["argv.json"], json.dumps(redact_argv(list(argv)), indent=2) + "\n")
    _write_atomic(paths["env.json"], json.dumps(redact_env(env), indent=2, sort_keys=True) + "\n")
    meta: dict[str, Any] = {
        "sglang_version": sglang_version,
        "gpu": gpu,
        "driver": driver,
        "host": socket.gethostname(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _write_atomic(paths["launch.json"], json.dumps(meta, indent=2) + "\n")
    logger.debug("launch artifacts written to %s", out)
    return {name: str(p) for name, p in paths.items()}
