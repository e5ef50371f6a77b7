"""Which python launches a study's real SGLang, and with which environment.

``server.python`` wins. Otherwise a study with ``server.device: cpu`` launches
the venv that ``autotune sglang-env install --version V --device cpu`` builds
(its default location), so a study file names no machine-specific path.
"""

from __future__ import annotations

import sys

from autotune.sglang.hardware.cpu import CPU_ENV
from autotune.sglang_env.install import SglangEnv, default_prefix
from autotune.spec import StudySpec


def cache_env(spec: StudySpec) -> SglangEnv:
    srv = spec.server
    return SglangEnv(default_prefix(srv.sglang_version, srv.device), srv.sglang_version, srv.device)


def launch_python(spec: StudySpec) -> str:
    """The interpreter that runs ``sglang.launch_server`` for this study."""
    if spec.server.python:
        return spec.server.python
    if spec.server.backend == "sglang" and spec.server.device == "cpu":
        return str(cache_env(spec).python)
    return sys.executable


def launch_env(spec: StudySpec) -> dict[str, str]:
    """Environment variables every launch of this study carries (the study's own win)."""
    base = dict(CPU_ENV) if spec.server.backend == "sglang" and spec.server.device == "cpu" else {}
    return {**base, **spec.server.env}


def install_hint(spec: StudySpec) -> str:
    srv = spec.server
    return f"autotune sglang-env install --version {srv.sglang_version} --device {srv.device}"
