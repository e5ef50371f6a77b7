"""The launch argv of a trial: real SGLang, or the simulated server with the same flags plus ``--sim-*``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from autotune.sglang.config import ServerConfig
from autotune.sglang.flags import render_argv
from autotune.trial.contract import TrialRequest

__all__ = ["api_key", "build_argv"]


def build_argv(req: TrialRequest, cfg: ServerConfig | None = None) -> list[str]:
    """The argv for ``req`` (``cfg``: its config with the port chosen, default ``req.config``)."""
    cfg = req.config if cfg is None else cfg
    python = req.python or sys.executable
    if req.backend == "sglang":
        return render_argv(cfg, req.sglang_version, python=python, module="sglang.launch_server")
    argv = render_argv(cfg, req.sglang_version, python=python, module="autotune.sim")
    argv += [
        "--sim-sglang-version", req.sglang_version,
        "--sim-gpu", req.gpu,
        "--sim-num-gpus", str(req.num_gpus),
        "--sim-interconnect", req.interconnect,
        "--sim-time-scale", str(req.sim.time_scale),
        "--sim-seed", str(req.sim.seed + req.trial_number),
    ]
    for fault in req.sim.faults:
        argv += ["--sim-fault", fault]
    return argv


def api_key(argv: Sequence[str]) -> str | None:
    """The ``--api-key`` a launch argv gives the server (the last one, as argparse keeps it):
    the load generator must send it (``Authorization: Bearer KEY``) or every request is
    refused with 401. It is read from the argv in memory, never from a record."""
    key: str | None = None
    for i, arg in enumerate(argv):
        if arg == "--api-key" and i + 1 < len(argv):
            key = argv[i + 1]
        elif arg.startswith("--api-key="):
            key = arg.partition("=")[2]
    return key or None
