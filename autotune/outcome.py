"""Trial outcomes: a closed set of failure kinds, shared by every layer."""

from __future__ import annotations

import enum
import re


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


_OOM = re.compile(r"out of memory|OutOfMemoryError", re.IGNORECASE)


def load_failure_kind(error: str) -> FailureKind:
    """A load point that failed while the server kept running: ``runtime_oom`` when the server's
    errors say it ran out of memory (the candidate's own limit: running it again cannot help, and
    a lower f is what can), else ``load_failed`` (the node or the network may be to blame)."""
    return FailureKind.RUNTIME_OOM if _OOM.search(error or "") else FailureKind.LOAD_FAILED
