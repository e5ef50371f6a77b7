"""Service-level objectives: which load point of a launch counts, and by how much it misses.

An SLO is a ceiling on a latency metric of bench_serving's names (``p99_ttft_ms``,
``p90_itl_ms``, ``median_tpot_ms``, ``p99_e2e_latency_ms``...). A load point meets
the SLO when every such metric is at or under its ceiling. The trial's value is its
best point that meets the SLO; when no point does, the best point is still reported
with a positive violation, which goes to optuna as a constraint so the sampler
learns from it instead of the trial being thrown away.
"""

from __future__ import annotations

import re
from typing import Any

_SLO_KEY = re.compile(r"^(mean|median|p50|p90|p95|p99)_(ttft|itl|tpot|e2e_latency)_ms$")


def check_slo_key(key: str) -> None:
    if not _SLO_KEY.match(key):
        raise ValueError(f"unknown SLO metric {key!r}: use <mean|median|p50|p90|p95|p99>_<ttft|itl|tpot|e2e_latency>_ms")


def _metric(metrics: dict[str, Any], key: str) -> float | None:
    if key in metrics and metrics[key] is not None:
        return float(metrics[key])
    if key.startswith("p50_"):
        alt = "median_" + key[4:]
        return float(metrics[alt]) if metrics.get(alt) is not None else None
    return None


def violation(metrics: dict[str, Any], slo: dict[str, float]) -> float:
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


def pick_point(
    metrics_by_point: dict[str, dict[str, Any]], metric: str, direction: str, slo: dict[str, float] | None
) -> tuple[str, float, float] | None:
    """(point, value, violation) of the best point that meets the SLO, else of the least-violating one."""
    sign = 1.0 if direction == "maximize" else -1.0
    scored = []
    for point, m in metrics_by_point.items():
        if m.get(metric) is None:
            continue
        v = violation(m, slo) if slo else -1.0
        scored.append((point, float(m[metric]), v))
    if not scored:
        return None
    meeting = [s for s in scored if s[2] <= 0]
    if meeting:
        return max(meeting, key=lambda s: sign * s[1])
    return min(scored, key=lambda s: s[2])
