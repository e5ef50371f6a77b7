"""What a trial is: the request the driver hands an evaluator, and the result it gets back.

Both are plain picklable data (they cross Ray). Nothing here touches optuna: the
study layer turns a :class:`TrialResult` into ``tell`` and user attributes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from autotune.objective import Objective
from autotune.outcome import FailureKind
from autotune.sglang.knobs.config import ServerConfig
from autotune.sglang.memory.predictor import Prediction
from autotune.spec import MixWorkloadSpec, SimSpec, WorkloadSpec

__all__ = ["Reporter", "TrialRequest", "TrialResult", "TrialState"]

#: ``report(step, value)``: True to continue, False to stop the load early (the trial is pruned).
Reporter = Callable[[int, float], bool]


class TrialState(enum.StrEnum):
    """How a trial body ended; the driver maps it onto optuna's COMPLETE / PRUNED / FAIL."""

    COMPLETE = "complete"
    FAILED = "failed"
    PRUNED = "pruned"



@dataclass
class TrialRequest:
    """One launch to evaluate: the candidate, where it runs, and what it is measured with."""

    study_name: str
    trial_number: int
    config: ServerConfig
    backend: str  # "sim" | "sglang"
    sglang_version: str
    gpu: str
    num_gpus: int
    interconnect: str
    workload: WorkloadSpec
    objective: Objective
    artifact_dir: str
    run_dir: str
    startup_timeout_s: float = 900.0
    env: dict[str, str] = field(default_factory=dict)
    python: str | None = None
    sim: SimSpec = field(default_factory=SimSpec)
    prediction: Prediction | None = None  # its P and f let the live kill act at the weights-loaded line
    gpu_ids: list[int] | None = None
    workloads: list[MixWorkloadSpec] | None = None  # a mix, measured instead of ``workload``

    @property
    def has_slo(self) -> bool:
        """An SLO bounds the value: the objective's, or a mix workload's own."""
        return bool(self.objective.slo) or any(w.slo for w in self.workloads or ())


@dataclass
class TrialResult:
    """What one evaluation measured (or why it could not)."""

    state: TrialState
    failure_kind: FailureKind | None = None
    evidence: str = ""
    value: float | None = None
    metrics_by_point: dict[str, dict[str, Any]] = field(default_factory=dict)
    best_point: str | None = None
    observed: dict[str, Any] = field(default_factory=dict)  # the startup log's summary (P, A, KV tokens...)
    command: list[str] = field(default_factory=list)
    artifacts: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    gpu_seconds: float = 0.0  # modelled GPU time this trial held (startup + load) x GPUs
    time_scale: float = 1.0
    slo_violation: float | None = None  # at the chosen point; <= 0 meets the SLO, None without one
    # a workload mix: {name: {weight, point, value, violation}}; the value is their weighted mean
    mix: dict[str, dict[str, Any]] = field(default_factory=dict)

    def fail(self, kind: FailureKind | str, evidence: str) -> TrialResult:
        """Mark this result FAILED with ``kind`` and its evidence; returns self."""
        self.state = TrialState.FAILED
        self.failure_kind = FailureKind(str(kind))
        self.evidence = evidence
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
