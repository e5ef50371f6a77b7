"""What a trial is measured against: the objective metric, its direction and the SLO.

A leaf module (it imports nothing of autotune) so that the study file's model
(:mod:`autotune.spec`) and the trial's evaluators share one definition.

An SLO is a ceiling on a latency metric of bench_serving's names (``p99_ttft_ms``,
``p90_itl_ms``, ``median_tpot_ms``, ``p99_e2e_latency_ms``...). A load point meets
the SLO when every such metric is at or under its ceiling. The trial's value is its
best point that meets the SLO; when no point does, the best point is still reported
with a positive violation, which goes to optuna as a constraint so the sampler
learns from it instead of the trial being thrown away.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Direction", "Objective", "Picked", "check_slo_key", "violation"]

_SLO_KEY = re.compile(r"^(mean|median|p50|p90|p95|p99)_(ttft|itl|tpot|e2e_latency)_ms$")

Metrics = Mapping[str, Any]


class Direction(enum.StrEnum):
    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"



def check_slo_key(key: str) -> None:
    """ValueError unless ``key`` names a latency metric an SLO can bound."""
    if not _SLO_KEY.match(key):
        raise ValueError(f"unknown SLO metric {key[:60]!r}: "  # (a leaf: limits.shown sits beside it)
                         "use <mean|median|p50|p90|p95|p99>_<ttft|itl|tpot|e2e_latency>_ms")


def _metric(metrics: Metrics, key: str) -> float | None:
    if metrics.get(key) is not None:
        return float(metrics[key])
    if key.startswith("p50_"):
        alt = "median_" + key[4:]
        return float(metrics[alt]) if metrics.get(alt) is not None else None
    return None


def violation(metrics: Metrics, slo: Mapping[str, float]) -> float:
    """Largest relative excess over a ceiling (<= 0 means the SLO is met). A metric the load
    point did not report counts as a miss (1.0): an SLO cannot be met by silence."""
    worst = -1.0
    for key, ceiling in slo.items():
        value = _metric(metrics, key)
        if value is None:
            worst = max(worst, 1.0)
            continue
        worst = max(worst, (value - ceiling) / ceiling)
    return worst


@dataclass(frozen=True)
class Picked:
    """The load point that gives a trial its value."""

    point: str
    value: float
    violation: float  # <= 0 meets the SLO (-1.0 without one)


@dataclass(frozen=True)
class Objective:
    """The metric a trial's value is read from, which way is better, and the SLO ceilings."""

    metric: str = "output_throughput"
    direction: Direction = Direction.MAXIMIZE
    slo: Mapping[str, float] = field(default_factory=dict)

    def violation(self, metrics: Metrics) -> float:
        """How far ``metrics`` miss the SLO (<= 0: met; -1.0 without an SLO)."""
        return violation(metrics, self.slo) if self.slo else -1.0

    def meets(self, metrics: Metrics) -> bool:
        return self.violation(metrics) <= 0

    def pick(self, metrics_by_point: Mapping[str, Metrics]) -> Picked | None:
        """The best point that meets the SLO, else the least-violating one; None when no
        point reported the metric."""
        sign = 1.0 if self.direction == Direction.MAXIMIZE else -1.0
        scored = [Picked(point, float(m[self.metric]), self.violation(m))
                  for point, m in metrics_by_point.items() if m.get(self.metric) is not None]
        if not scored:
            return None
        meeting = [s for s in scored if s.violation <= 0]
        if meeting:
            return max(meeting, key=lambda s: sign * s.value)
        return min(scored, key=lambda s: s.violation)
