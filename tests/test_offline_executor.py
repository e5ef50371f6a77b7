"""OfflineExecutor is an InlineExecutor over an offline body; build_engine is the one engine factory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune import space
from autotune.objective import Objective
from autotune.outcome import FailureKind
from autotune.sglang.models.profile import load_model_profile
from autotune.sim.args import parse_args
from autotune.sim.engine.factory import build_engine
from autotune.sim.hardware import load_draft, plan_memory, resolve_speculative
from autotune.spec import SimSpec, load_study_spec
from autotune.study.execution.executor import InlineExecutor
from autotune.study.execution.offline import OfflineExecutor
from autotune.trial.argv import build_argv
from autotune.trial.contract import TrialRequest, TrialResult, TrialState

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "studies" / "demo.yaml"
PLAIN = {"mem_fraction_static": 0.9, "cuda_graph_max_bs": 256, "custom_allreduce": False,
         "speculative_algorithm": "none"}


def _request(trial: int = 0, **sim: Any) -> TrialRequest:
    spec = load_study_spec(DEMO)
    return TrialRequest(
        study_name="offline-exec", trial_number=trial, config=space.to_config(spec, PLAIN), backend="sim",
        sglang_version="0.5.9", gpu="rtx-pro-6000", num_gpus=8, interconnect="pcie",
        workload=spec.workload, objective=Objective(),
        artifact_dir="/nonexistent/a", run_dir="/nonexistent/r", sim=SimSpec(**{"time_scale": 20.0, "seed": 0, **sim}),
    )


def test_inline_executor_runs_its_body_with_the_trials_reporter() -> None:
    calls: list[tuple[int, Any]] = []
    results: list[tuple[int, str]] = []

    def body(request: TrialRequest, reporter: Any) -> TrialResult:
        calls.append((request.trial_number, reporter))
        return TrialResult(state=TrialState.COMPLETE, value=float(request.trial_number))

    ex = InlineExecutor(lambda n: f"reporter-{n}", body=body,
                        on_result=lambda n, _rq, r: results.append((n, r.state)))
    assert ex.wait(0.1) == [] and ex.slots_free() == 1
    ex.submit(7, _request(trial=3))
    assert ex.slots_free() == 0 and ex.in_flight() == [7]
    [(number, result)] = ex.wait(0.1)
    assert number == 7 and result.value == 3.0
    assert calls == [(3, "reporter-7")] and results == [(7, "complete")]
    assert ex.in_flight() == [] and ex.slots_free() == 1


def test_offline_executor_is_an_inline_executor_over_the_evaluator() -> None:
    seen: list[TrialRequest] = []
    accounted: list[int] = []

    def evaluate(request: TrialRequest) -> TrialResult:
        seen.append(request)
        return TrialResult(state=TrialState.FAILED, failure_kind=FailureKind.KV_OOM)

    ex = OfflineExecutor(evaluate=evaluate, on_result=lambda n, _rq, _r: accounted.append(n))
    assert isinstance(ex, InlineExecutor)
    req = _request()
    ex.submit(1, req)
    [(number, result)] = ex.wait(0.1)
    assert number == 1 and result.failure_kind == "kv_oom"
    assert seen == [req] and accounted == [1]
    ex.submit(2, req)
    ex.shutdown(cancel=True)
    assert ex.in_flight() == [] and ex.wait(0.1) == []


def test_build_engine_models_the_launch_as_the_server_does() -> None:
    req = _request(time_scale=8.0, seed=5)
    cfg = req.config
    launch, sim = parse_args(build_argv(req, cfg)[3:] + ["--stream-interval", "3"])
    model = load_model_profile(launch.model_path)
    draft = load_draft(resolve_speculative(launch, model, sim.version), model)
    plan = plan_memory(launch, model, draft, sim.gpu, version=sim.version, interconnect=sim.interconnect)
    engine = build_engine(plan, launch, sim, model)
    assert engine.kv_tokens == plan.kv_tokens
    assert engine.max_running_requests == plan.max_running_requests
    assert engine.prefill_oom_tokens == plan.prefill_oom_tokens
    assert engine.stream_interval == 3
    assert engine.time_scale == sim.time_scale / sim.faults.slow_tokens
    assert engine.perf.inputs.tp_size == launch.tp_size
    # stepped offline, it serves a request through the same public API the evaluator uses
    handle = engine.submit("one", 64, 4)
    while engine.step_once() is not None:
        pass
    assert handle.finish_reason == "length" and handle.output_tokens == 4
    assert handle.finish_s is not None and handle.finish_s > 0
