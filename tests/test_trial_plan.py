"""The one load-point plan (concurrency levels x rate bisection) and the value pick."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from autotune.objective import Direction, Objective
from autotune.spec import RateSearchSpec, WorkloadSpec
from autotune.trial.load_points import LoadPoint, load_spec, run_plan

SLO = Objective(slo={"p99_itl_ms": 50.0})


def _latency_wall(limit: float) -> Any:
    """A fake server: ITL under the SLO up to ``limit`` req/s, far over it above; throughput ~ rate."""
    seen: list[str] = []

    def measure(point: LoadPoint) -> Mapping[str, Any]:
        seen.append(point.name)
        rate = point.request_rate or 100.0
        return {"output_throughput": rate * 10 * point.concurrency, "p99_itl_ms": 10.0 if rate <= limit else 200.0}

    return measure, seen


def test_rate_bisection_finds_the_highest_rate_that_meets_the_slo() -> None:
    wl = WorkloadSpec(concurrency=[8], rate_search=RateSearchSpec(low=1, high=9, steps=4))
    measure, seen = _latency_wall(3.2)
    out = run_plan(wl, SLO, measure)
    assert seen == ["c8_r9", "c8_r5", "c8_r3", "c8_r4"]  # high first, then halves
    assert out.picked is not None and out.picked.point == "c8_r3" and out.picked.violation <= 0
    assert out.ended_at is None and list(out.metrics_by_point) == seen


def test_a_level_whose_highest_rate_meets_the_slo_stops_there() -> None:
    wl = WorkloadSpec(concurrency=[4, 8], rate_search=RateSearchSpec(low=1, high=2, steps=5))
    measure, seen = _latency_wall(10.0)
    out = run_plan(wl, SLO, measure)
    assert seen == ["c4_r2", "c8_r2"]
    assert out.picked is not None and out.picked.point == "c8_r2"


def test_no_point_meets_the_slo_the_least_violating_is_reported() -> None:
    wl = WorkloadSpec(concurrency=[8], rate_search=RateSearchSpec(low=1, high=9, steps=3))
    measure, _ = _latency_wall(0.1)
    out = run_plan(wl, SLO, measure)
    assert out.picked is not None and out.picked.violation > 0


def test_concurrency_levels_without_a_search_and_the_direction() -> None:
    wl = WorkloadSpec(concurrency=[4, 16, 8])
    measure, seen = _latency_wall(1000.0)
    assert run_plan(wl, Objective(), measure).picked.point == "c16"  # type: ignore[union-attr]
    low = Objective(metric="output_throughput", direction=Direction.MINIMIZE)
    assert run_plan(wl, low, measure).picked.point == "c4"  # type: ignore[union-attr]
    assert seen[:3] == ["c4", "c16", "c8"]


def test_a_point_that_ends_the_trial_ends_the_plan() -> None:
    wl = WorkloadSpec(concurrency=[4, 8, 16])

    def measure(point: LoadPoint) -> Mapping[str, Any] | None:
        return None if point.concurrency == 8 else {"output_throughput": 1.0}

    out = run_plan(wl, Objective(), measure)
    assert out.ended_at == LoadPoint(8) and out.picked is None and list(out.metrics_by_point) == ["c4"]


def test_load_spec_takes_the_points_rate_over_the_workloads() -> None:
    wl = WorkloadSpec(concurrency=[8], request_rate=3.0, input_len=100, output_len=7, num_prompts=10, seed=4)
    assert load_spec(wl, LoadPoint(8)).request_rate == 3.0
    spec = load_spec(wl, LoadPoint(8, 1.5), base_url="http://127.0.0.1:1")
    assert (spec.request_rate, spec.concurrency, spec.input_len, spec.output_len, spec.seed) == (1.5, 8, 100, 7, 4)
    assert spec.base_url == "http://127.0.0.1:1"


def test_a_rate_search_below_a_thousandth_never_sends_at_rate_zero() -> None:
    """The bisection rounded its rates to 3 decimals: between 0.0001 and 0.0004 req/s that is 0, which the
    load generator refuses (a traceback at the second point, the trial left RUNNING)."""
    wl = WorkloadSpec(concurrency=[8], num_prompts=8, rate_search=RateSearchSpec(low=0.0001, high=0.0004, steps=3))
    measure, seen = _latency_wall(0.0)
    run_plan(wl, SLO, measure)
    rates = [load_spec(wl, LoadPoint(8, float(name.split("_r")[1]))).request_rate for name in seen]
    assert len(rates) == 3 and all(0.0001 <= r <= 0.0004 for r in rates), seen


@settings(max_examples=200, deadline=None)
@given(num_prompts=st.one_of(st.none(), st.integers(1, 2_000_000)), warmup=st.integers(0, 2_000_000),
       input_len=st.integers(1, 10_000_000), rate=st.one_of(st.none(), st.floats(1e-300, 1e6)),
       duration=st.one_of(st.none(), st.floats(1.0, 1e7)), random_kind=st.booleans())
def test_a_workload_the_study_accepts_is_one_the_load_generator_accepts(
        num_prompts: int | None, warmup: int, input_len: int, rate: float | None, duration: float | None,
        random_kind: bool) -> None:
    """One rule (autotune.load.spec.load_problem) for both: ``warmup_requests: 2000000`` passed ``plan`` and
    the load point's own check refused it mid-run (a pydantic traceback, the trial left RUNNING)."""
    fields: dict[str, Any] = {"num_prompts": num_prompts, "warmup_requests": warmup, "request_rate": rate,
                              "duration_s": duration, "concurrency": [8]}
    if random_kind:
        fields["dataset"] = {"kind": "random", "input_len": input_len}
    else:
        fields["input_len"] = input_len
    try:
        wl = WorkloadSpec.model_validate(fields)
    except ValidationError:
        return
    assert load_spec(wl, LoadPoint(8)).warmup_requests == warmup  # builds, and so does every point
