"""Trial outcomes: a closed set of failure kinds, shared by every layer."""

from __future__ import annotations

import enum


class FailureKind(enum.StrEnum):
    """Why a trial did not complete. Stored as the string value in ``user_attrs['failure_kind']``."""

    PREDICTED_OOM = "predicted_oom"  # the memory model condemned it before launch (PRUNED)
    INFEASIBLE = "infeasible"  # implied infeasible by an earlier failure (PRUNED)
    KV_OOM = "kv_oom"  # "Not enough memory" / negative KV budget at startup
    GRAPH_CAPTURE_OOM = "graph_capture_oom"  # "Capture cuda graph failed: CUDA out of memory"
    CUDA_OOM = "cuda_oom"  # any other CUDA out of memory at startup
    RUNTIME_OOM = "runtime_oom"  # out of memory under load
    MEMORY_IMBALANCE = "memory_imbalance"  # "The memory capacity is unbalanced"
    STARTUP_TIMEOUT = "startup_timeout"
    PORT_IN_USE = "port_in_use"
    INVALID_ARGS = "invalid_args"  # the server's argument parser refused the launch
    CRASHED = "crashed"  # exited with no recognised reason
    LOAD_FAILED = "load_failed"  # the server ran but the load point failed
    SLO_VIOLATED = "slo_violated"
    EARLY_STOPPED = "early_stopped"  # the pruner stopped a clearly worse trial (PRUNED)
    INTERRUPTED = "interrupted"  # the orchestrator died or was stopped during the trial
    WORKER_DIED = "worker_died"  # the Ray worker running the trial body died

