"""Offline evaluation without processes: determinism, failure phases, accounting, and a whole study."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from autotune import space
from autotune.objective import Objective
from autotune.spec import SimSpec, load_study_spec
from autotune.study import attrs
from autotune.study.driver import run_study
from autotune.study.execution.offline import OfflineExecutor
from autotune.study.storage.opening import open_study
from autotune.trial import offline
from autotune.trial.contract import TrialRequest
from autotune.trial.offline import evaluate

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "studies" / "demo.yaml"
PLAIN = {"mem_fraction_static": 0.9, "cuda_graph_max_bs": 256, "custom_allreduce": False,
         "speculative_algorithm": "none"}
EAGLE3 = {**PLAIN, "speculative_algorithm": "EAGLE3", "speculative_num_steps": 2, "speculative_eagle_topk": 1,
          "speculative_num_draft_tokens": 3}
SMALL = {"num_prompts": 48, "concurrency": [8, 24], "output_len": 32, "warmup_requests": 2}


def _request(params: dict, *, trial: int = 0, seed: int = 0, **workload: object) -> TrialRequest:
    spec = load_study_spec(DEMO)
    wl = spec.workload.model_copy(update=workload or SMALL)
    return TrialRequest(
        study_name="offline", trial_number=trial, config=space.to_config(spec, params), backend="sim",
        sglang_version="0.5.9", gpu="rtx-pro-6000", num_gpus=8, interconnect="pcie", workload=wl,
        objective=Objective(), artifact_dir="/nonexistent/a",
        run_dir="/nonexistent/r", sim=SimSpec(time_scale=20.0, seed=seed),
    )


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    offline.clear_cache()


def test_same_request_same_result_and_the_memo_is_exact() -> None:
    first = evaluate(_request(EAGLE3))
    offline.clear_cache()
    again = evaluate(_request(EAGLE3))
    assert first.state == "complete"
    assert again.to_dict() == first.to_dict()
    # custom_allreduce changes nothing SGLang runs on 8 PCIe GPUs (it turns it off): one measurement
    evaluate(_request({**EAGLE3, "custom_allreduce": True}))
    assert offline.cache_info()["hits"] == 1


def test_speculative_acceptance_follows_the_seed_like_the_server() -> None:
    # the trial body seeds the server with sim.seed + trial number; acceptance is sampled
    values = {evaluate(_request(EAGLE3, trial=n)).value for n in range(3)}
    assert len(values) == 3
    plain = {evaluate(_request(PLAIN, trial=n)).value for n in range(3)}
    assert len(plain) == 1  # without speculative decoding the seed only picks token ids


def test_every_point_is_measured_and_the_value_is_the_best_point() -> None:
    res = evaluate(_request(PLAIN))
    assert set(res.metrics_by_point) == {"c8", "c24"}
    best = max(res.metrics_by_point, key=lambda p: res.metrics_by_point[p]["output_throughput"])
    assert res.best_point == best
    assert res.value == res.metrics_by_point[best]["output_throughput"]
    for m in res.metrics_by_point.values():
        assert m["completed"] == 48 and m["failed"] == 0
        assert m["total_output_tokens"] == 48 * 32
        assert m["output_throughput"] == pytest.approx(m["total_output_tokens"] / m["duration"])
        assert 0 < m["mean_ttft_ms"] <= m["p99_ttft_ms"]
    # more concurrency, more throughput, more latency per token on this engine
    assert res.metrics_by_point["c24"]["output_throughput"] > res.metrics_by_point["c8"]["output_throughput"]
    assert res.metrics_by_point["c24"]["mean_tpot_ms"] > res.metrics_by_point["c8"]["mean_tpot_ms"]


def test_gpu_seconds_are_modelled_startup_plus_load_times_gpus() -> None:
    res = evaluate(_request(PLAIN))
    t = res.timings
    assert t["startup_s"] > 0 and t["load_s"] > 0
    assert res.gpu_seconds == pytest.approx((t["startup_s"] + t["load_s"]) * 8)
    # the load time covers both points' measured spans (plus their warm-ups)
    assert t["load_s"] >= sum(m["duration"] for m in res.metrics_by_point.values())
    assert res.time_scale == 1.0


def test_kv_oom_fails_at_startup_and_costs_only_the_startup() -> None:
    res = evaluate(_request({**PLAIN, "mem_fraction_static": 0.55}))
    assert (res.state, res.failure_kind) == ("failed", "kv_oom")
    # the live kill at the weights-loaded line (or, without one, the pool's own failure)
    assert "rest = 21.71 - 94.00 x (1 - 0.550)" in res.evidence or "Not enough memory" in res.evidence
    assert "load_s" not in res.timings
    assert res.gpu_seconds == pytest.approx(res.timings["startup_s"] * 8)
    # the log parser saw P and A before the failure
    assert res.observed["p_gib"] > res.observed["a_gib"] > 0


def test_prefill_over_the_activation_headroom_dies_under_load() -> None:
    res = evaluate(_request({**PLAIN, "mem_fraction_static": 0.90, "cuda_graph_max_bs": 512},
                            num_prompts=64, concurrency=[32], output_len=16, warmup_requests=1))
    assert (res.state, res.failure_kind) == ("failed", "runtime_oom")
    assert "Prefill out of memory" in res.evidence
    assert res.observed["kv_tokens"] > 0  # it started fine
    assert res.timings["load_s"] >= 0


def test_a_tp_size_beyond_the_node_fails_like_the_server() -> None:
    req = dataclasses.replace(_request(PLAIN), num_gpus=4)
    res = evaluate(req)
    assert res.state == "failed"
    assert "invalid device ordinal" in res.evidence
    assert res.gpu_seconds == 0.0


def test_a_real_backend_is_refused() -> None:
    req = dataclasses.replace(_request(PLAIN), backend="sglang")
    with pytest.raises(Exception, match="backend='sglang'"):
        evaluate(req)


def test_a_whole_study_runs_offline_through_the_driver(tmp_path: Path) -> None:
    spec = load_study_spec(DEMO)
    spec = spec.model_copy(update={
        "storage": f"sqlite:///{tmp_path / 's.db'}", "run_dir": str(tmp_path / "runs"), "n_trials": 8,
        "workload": spec.workload.model_copy(update={"num_prompts": 32, "concurrency": [16], "output_len": 32,
                                                     "warmup_requests": 1}),
    })
    seen: list[tuple[int, str]] = []
    summary = run_study(spec, executor=OfflineExecutor(on_result=lambda n, _rq, r: seen.append((n, r.state))))
    assert summary.finished >= 8
    launched = [n for n, _ in seen]
    assert 0 in launched  # the baseline ran
    assert summary.states.get("COMPLETE", 0) >= 1
    # every trial the driver did not prune before launch, nor answer from a stored launch of the
    # same argv, went through the evaluator
    study = open_study(spec, create=False)
    reused = sum(1 for t in study.trials if t.user_attrs.get(attrs.REUSED_FROM) is not None)
    told = summary.states.get("COMPLETE", 0) + summary.states.get("FAIL", 0)
    assert len(seen) == told - reused + sum(1 for _, s in seen if s == "pruned")


def test_poisson_arrivals_set_the_pace_like_the_load_generator() -> None:
    res = evaluate(_request(PLAIN, num_prompts=40, concurrency=[64], output_len=16, warmup_requests=1,
                            request_rate=2.0))
    m = res.metrics_by_point["c64"]
    assert m["completed"] == 40
    # 40 arrivals at 2/s take ~20 s; the server is far from saturated, so requests rarely overlap
    assert m["request_throughput"] == pytest.approx(2.0, rel=0.35)
    assert m["concurrency"] < 8  # decode at the measured PCIe allreduce latency: a request lasts ~3 s


def test_a_duration_bound_point_stops_dispatching_at_its_deadline() -> None:
    res = evaluate(_request(PLAIN, num_prompts=None, duration_s=20, concurrency=[16], output_len=16,
                            warmup_requests=1))
    m = res.metrics_by_point["c16"]
    assert m["completed"] > 16
    # dispatch stops at 20 modelled seconds; the last requests finish shortly after
    assert 20 <= m["duration"] < 30
    assert m["concurrency"] == pytest.approx(16, rel=0.1)
