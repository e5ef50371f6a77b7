"""The launch argv of a trial: real SGLang, or the simulated server with the same flags plus ``--sim-*``."""

from __future__ import annotations

import sys

from autotune.sglang.config import ServerConfig
from autotune.sglang.flags import render_argv
from autotune.trial.contract import TrialRequest

__all__ = ["build_argv"]


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
