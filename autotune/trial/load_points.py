"""The load-point plan of one launch and the value it yields: ONE function for every evaluator.

A launch is measured at each concurrency level of the workload; with
``workload.rate_search``, at each level the request rate is bisected between
``low`` and ``high`` for the highest rate whose point meets the SLO (the first
point tries ``high``: when it meets, the level is done). The trial's value is then
its best point that meets the SLO (:meth:`autotune.objective.Objective.pick`).

How a point is measured is the caller's: the live evaluator runs the load
generator against a launched server, the offline one steps the simulator's engine
in modelled time. Both pass ``measure(point)``, which returns the point's
bench_serving metrics, or None when the trial ends at that point (the evaluator
has recorded why).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from autotune.load.spec import LoadSpec
from autotune.objective import Objective, Picked
from autotune.spec import MixWorkloadSpec, WorkloadSpec

__all__ = ["LoadPoint", "Measure", "PlanOutcome", "load_spec", "run_mix", "run_plan", "run_trial_plan",
           "workload_of"]


@dataclass(frozen=True)
class LoadPoint:
    """One load point: a concurrency level and, within a rate search, a request rate."""

    concurrency: int
    request_rate: float | None = None  # None: the workload's own request_rate
    workload: str | None = None  # the mix workload it belongs to (None: the study's one workload)

    @property
    def name(self) -> str:
        """``c64``, or ``c64_r2.5`` within a rate search (the key of metrics_by_point and artifacts);
        ``chat.c64`` for workload ``chat`` of a mix."""
        base = f"c{self.concurrency}" if self.request_rate is None else f"c{self.concurrency}_r{self.request_rate:g}"
        return base if self.workload is None else f"{self.workload}.{base}"


Measure = Callable[[LoadPoint], Mapping[str, Any] | None]


@dataclass
class PlanOutcome:
    """Every measured point's metrics, the picked one, and where the trial ended early (if it did)."""

    metrics_by_point: dict[str, dict[str, Any]] = field(default_factory=dict)
    picked: Picked | None = None
    ended_at: LoadPoint | None = None
    # a mix: each workload's weight, picked point, value and SLO violation
    mix: dict[str, dict[str, Any]] = field(default_factory=dict)


def run_plan(workload: WorkloadSpec, objective: Objective, measure: Measure, *,
             name: str | None = None) -> PlanOutcome:
    """Measure the workload's points in order (module docstring) and pick the trial's value.
    ``name``: the mix workload the points belong to (their names become ``<name>.c<N>``)."""
    out = PlanOutcome()

    def point(p: LoadPoint) -> Mapping[str, Any] | None:
        metrics = measure(p)
        if metrics is None:
            out.ended_at = p
            return None
        out.metrics_by_point[p.name] = dict(metrics)
        return metrics

    search = workload.rate_search
    for conc in workload.concurrency:
        if search is None:
            if point(LoadPoint(conc, workload=name)) is None:
                return out
            continue
        low, high = search.low, search.high
        for i in range(search.steps):
            rate = high if i == 0 else round((low + high) / 2, 3)  # 3 decimals: the point's name
            if not low <= rate <= high:  # never outside the bounds the study was checked at (0 below 0.0005 req/s)
                rate = (low + high) / 2
            metrics = point(LoadPoint(conc, rate, workload=name))
            if metrics is None:
                return out
            if objective.meets(metrics):
                low = rate
                if rate == high:
                    break  # even the highest rate meets it
            else:
                high = rate
    out.picked = objective.pick(out.metrics_by_point)
    return out


def run_mix(mix: Sequence[MixWorkloadSpec], objective: Objective, measure: Measure) -> PlanOutcome:
    """Each workload of a mix in turn on the same launch (its own points, picked under its own
    SLO, default the objective's); the trial's value is the weighted mean of their values and
    its violation the worst one: the SLO must hold for each workload."""
    out = PlanOutcome()
    parts: list[tuple[MixWorkloadSpec, Picked]] = []
    for wl in mix:
        own = replace(objective, slo=dict(wl.slo) or dict(objective.slo))
        sub = run_plan(wl, own, measure, name=wl.name)
        out.metrics_by_point.update(sub.metrics_by_point)
        if sub.ended_at is not None:
            out.ended_at = sub.ended_at
            return out
        if sub.picked is None:
            return out  # that workload reported no value: the trial has none
        parts.append((wl, sub.picked))
        out.mix[wl.name] = {"weight": wl.weight, "point": sub.picked.point, "value": sub.picked.value,
                            "violation": sub.picked.violation if own.slo else None}
    total = sum(wl.weight for wl, _ in parts)
    value = sum(wl.weight * p.value for wl, p in parts) / total
    heaviest = max(parts, key=lambda wp: wp[0].weight)[1]
    out.picked = Picked(heaviest.point, value, max(p.violation for _, p in parts))
    return out


def run_trial_plan(workload: WorkloadSpec, mix: Sequence[MixWorkloadSpec] | None, objective: Objective,
                   measure: Measure) -> PlanOutcome:
    """The study's one workload (:func:`run_plan`), or its mix (:func:`run_mix`)."""
    return run_mix(mix, objective, measure) if mix else run_plan(workload, objective, measure)


def workload_of(workload: WorkloadSpec, mix: Sequence[MixWorkloadSpec] | None, point: LoadPoint) -> WorkloadSpec:
    """The workload ``point`` measures: the named one of the mix, else the study's."""
    if point.workload is None or not mix:
        return workload
    return next(w for w in mix if w.name == point.workload)


def load_spec(workload: WorkloadSpec, point: LoadPoint, **extra: Any) -> LoadSpec:
    """The load generator's spec for ``point`` of ``workload`` (``extra``: base_url, snapshot interval)."""
    fields: dict[str, Any] = {
        "backend": workload.backend, "input_len": workload.input_len, "output_len": workload.output_len,
        "range_ratio": workload.range_ratio, "num_prompts": workload.num_prompts,
        "duration_s": workload.duration_s, "warmup_requests": workload.warmup_requests,
        "flush_cache": workload.flush_cache, "dataset_path": workload.dataset_path, "seed": workload.seed,
        "dataset": workload.dataset, "tokenizer": workload.tokenizer, "goodput_slo": workload.goodput_slo,
        "timeouts": workload.timeouts,
        "request_rate": point.request_rate if point.request_rate is not None else workload.request_rate,
    }
    return LoadSpec(concurrency=point.concurrency, **{k: v for k, v in fields.items() if v is not None}, **extra)
