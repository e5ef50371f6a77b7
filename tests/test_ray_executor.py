"""RayExecutor on a real local Ray instance (2 CPUs, 8 declared GPUs), shared by the module.

Trial bodies here are cheap stand-ins passed through RayExecutor's ``body`` seam; they
record what they saw (times, CUDA_VISIBLE_DEVICES, pids) in files under tmp dirs.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

ray = pytest.importorskip("ray")

from autotune.objective import Objective  # noqa: E402
from autotune.outcome import FailureKind  # noqa: E402
from autotune.sglang.knobs.config import ServerConfig  # noqa: E402
from autotune.spec import (  # noqa: E402
    SimSpec,
    StudySpec,  # noqa: E402
    WorkloadSpec,
)
from autotune.study.execution.ray.executor import RayExecutor  # noqa: E402
from autotune.trial.contract import TrialRequest, TrialResult, TrialState  # noqa: E402

pytestmark = pytest.mark.ray

# The bodies below are defined in this test module, which Ray workers cannot import:
# ship them by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _spec(**executor: Any) -> StudySpec:
    return StudySpec.model_validate({
        "name": "raytest",
        "server": {"model_path": "models/x", "tp_size": 2},
        "hardware": {"gpu": "h100", "num_gpus": 8},
        "executor": {"kind": "ray", "num_cpus": 2, "num_gpus": 8, **executor},
    })


def _request(number: int, tmp: Path, *, tp: int = 2, time_scale: float = 10.0, seed: int = 0,
             **fixture: Any) -> TrialRequest:
    """``fixture`` (dir, want, barrier_s) reaches the test bodies as TEST_* environment entries."""
    return TrialRequest(
        study_name="raytest", trial_number=number, config=ServerConfig(model_path="models/x", tp_size=tp),
        backend="sim", sglang_version="0.5.9", gpu="h100", num_gpus=8, interconnect="nvlink",
        workload=WorkloadSpec(), objective=Objective(),
        artifact_dir=str(tmp / f"t{number}"), run_dir=str(tmp), sim=SimSpec(time_scale=time_scale, seed=seed),
        env={f"TEST_{k.upper()}": str(v) for k, v in fixture.items()},
    )


@pytest.fixture(scope="module")
def ray_owner() -> Iterator[RayExecutor]:
    """One local Ray instance for the module, started through RayExecutor's own local path."""
    saved = os.environ.pop("RAY_ADDRESS", None)
    owner = RayExecutor(_spec())
    try:
        assert ray.is_initialized()
        assert ray.cluster_resources().get("GPU") == 8
        assert [n["NodeManagerAddress"] for n in ray.nodes()] == ["127.0.0.1"]  # loopback only
        yield owner
    finally:
        owner.shutdown(cancel=True)
        if saved is not None:
            os.environ["RAY_ADDRESS"] = saved
    assert not ray.is_initialized()


def _drive(ex: RayExecutor, requests: list[TrialRequest], timeout_s: float = 90) -> dict[int, TrialResult]:
    """What the study driver does: submit while a slot is free, collect results."""
    pending = list(requests)
    results: dict[int, TrialResult] = {}
    deadline = time.monotonic() + timeout_s
    while pending or ex.in_flight():
        assert time.monotonic() < deadline, f"trials still running: {ex.in_flight()}"
        while pending and ex.slots_free(pending[0]) > 0:
            req = pending.pop(0)
            ex.submit(req.trial_number, req)
        for number, result in ex.wait(1.0):
            results[number] = result
    return results


# ---- bodies (run inside Ray workers) ------------------------------------------------------

def _hold_body(req: TrialRequest, report: Any) -> TrialResult:
    """Hold 'GPUs' until ``want`` trials are in at once (or ``barrier_s`` passed); record what it saw."""
    d = Path(req.env["TEST_DIR"])
    active = d / "active"
    me = active / str(req.trial_number)
    start = time.time()
    me.write_text(str(os.getpid()))
    deadline = start + float(req.env["TEST_BARRIER_S"])
    while len(list(active.iterdir())) < int(req.env["TEST_WANT"]) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    end = time.time()
    me.unlink()
    record = {"start": start, "end": end, "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "gpu_ids": req.gpu_ids}
    (d / f"{req.trial_number}.json").write_text(json.dumps(record))
    return TrialResult(state=TrialState.COMPLETE, value=float(req.trial_number))


def _server_body(req: TrialRequest, report: Any) -> TrialResult:
    """Start a tiny server tree (child + grandchild) through ServerProcess, then idle until killed."""
    from autotune.launch import ServerProcess, free_port

    tree = ("import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); time.sleep(120)")
    art = Path(req.artifact_dir)
    art.mkdir(parents=True, exist_ok=True)
    server = ServerProcess([sys.executable, "-c", tree], log_path=art / "server.log", port=free_port("127.0.0.1"),
                           startup_timeout_s=60)
    try:
        server.start()
        time.sleep(0.5)  # let the grandchild appear
        pids = [server.pid] + [c.pid for c in psutil.Process(server.pid).children(recursive=True)]
        info = {"worker_pid": os.getpid(), "server_pids": pids}
        (Path(req.env["TEST_DIR"]) / f"{req.trial_number}.json").write_text(json.dumps(info))
        for _ in range(1200):
            time.sleep(0.1)
    finally:
        server.stop(grace_s=2)
        (Path(req.env["TEST_DIR"]) / f"{req.trial_number}.stopped").write_text("")
    return TrialResult(state=TrialState.COMPLETE, value=1.0)


def _report_body(req: TrialRequest, report: Any) -> TrialResult:
    """Report steps 1..50 until told to stop."""
    for step in range(1, 51):
        if not report(step, float(step) * 10):
            return TrialResult(
                state=TrialState.PRUNED,
                failure_kind=FailureKind.EARLY_STOPPED,
                evidence=f"stopped at {step}",
                observed={"stopped_at": step},
            )
        time.sleep(0.1)
    return TrialResult(state=TrialState.COMPLETE, value=500.0)


def _flag_table_body(req: TrialRequest, report: Any) -> TrialResult:
    """Ask for the study release's flag table, as rendering an argv does; record what was logged."""
    import logging

    from autotune.sglang.flags.release_tables import table_for

    logged: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("autotune.sglang.flags.release_tables")
    logger.addHandler(handler)
    try:
        note = table_for(req.sglang_version).note
    finally:
        logger.removeHandler(handler)
    return TrialResult(state=TrialState.COMPLETE, value=1.0, observed={"note": note, "logged": logged})


def _raising_body(req: TrialRequest, report: Any) -> TrialResult:
    raise ValueError(f"boom in trial {req.trial_number}")


# ---- tests -----------------------------------------------------------------------------------


def test_tp2_trials_run_four_at_a_time_on_disjoint_gpus(ray_owner: RayExecutor, tmp_path: Path) -> None:
    (tmp_path / "active").mkdir()
    ex = RayExecutor(_spec(), body=_hold_body)
    try:
        reqs = [_request(n, tmp_path, dir=str(tmp_path), want=4, barrier_s=20.0) for n in range(8)]
        assert ex.slots_free(reqs[0]) == 4
        assert ex.slots_free(_request(99, tmp_path, tp=8)) == 1
        results = _drive(ex, reqs)
    finally:
        ex.shutdown(cancel=True)
    assert sorted(results) == list(range(8))
    assert all(r.state == "complete" and r.value == n for n, r in results.items())
    recs = [json.loads((tmp_path / f"{n}.json").read_text()) for n in range(8)]
    for rec in recs:
        ids = rec["cvd"].split(",")
        assert len(ids) == 2 and all(0 <= int(i) < 8 for i in ids)
        assert rec["gpu_ids"] == [int(i) for i in ids]  # the body's request carries Ray's assignment
    # Peak concurrency and GPU use, from the bodies' own timestamps.
    events = sorted([(r["start"], 1, i) for i, r in enumerate(recs)] + [(r["end"], -1, i) for i, r in enumerate(recs)])
    live: set[int] = set()
    peak = 0
    for _, kind, i in events:
        if kind == 1:
            live.add(i)
            gpus = [g for j in live for g in recs[j]["cvd"].split(",")]
            assert len(gpus) == len(set(gpus)), "trials in flight share a GPU"
            assert len(gpus) <= 8
        else:
            live.discard(i)
        peak = max(peak, len(live))
    assert peak == 4
    assert len({r["cvd"] for r in recs}) >= 4


def test_max_parallel_caps_slots(ray_owner: RayExecutor, tmp_path: Path) -> None:
    ex = RayExecutor(_spec(max_parallel=3), body=_hold_body)
    try:
        assert ex.slots_free(_request(0, tmp_path)) == 3
        assert ex.slots_free() == 3  # default need: the study's tp x dp
    finally:
        ex.shutdown(cancel=False)


def test_a_trial_that_can_never_fit_fails_at_once(ray_owner: RayExecutor, tmp_path: Path) -> None:
    ex = RayExecutor(_spec(resources={"gpu_arch_blackwell": 1}), body=_hold_body)
    try:
        ex.submit(7, _request(7, tmp_path, tp=16))
        ex.submit(8, _request(8, tmp_path, tp=2))  # no node has gpu_arch_blackwell
        assert sorted(ex.in_flight()) == [7, 8]
        # both come back as failures, not as trials queued until the wait gives up (a timing bound
        # here failed under load: the behaviour is that nothing waits for a node that never comes)
        out = dict(ex.wait(60.0))
        assert sorted(out) == [7, 8]
    finally:
        ex.shutdown(cancel=True)
    assert out[7].state == "failed" and out[7].failure_kind == "invalid_args"
    assert "GPU=16" in out[7].evidence and "largest 8" in out[7].evidence
    assert "gpu_arch_blackwell=1" in out[8].evidence
    assert ex.in_flight() == []


def test_reports_reach_the_reporter_and_false_stops_the_body(ray_owner: RayExecutor, tmp_path: Path) -> None:
    seen: list[tuple[int, int, float]] = []

    def factory(number: int) -> Callable[[int, float], bool]:
        def report(step: int, value: float) -> bool:
            seen.append((number, step, value))
            return step < 3

        return report

    ex = RayExecutor(_spec(), reporter_factory=factory, body=_report_body)
    try:
        results = _drive(ex, [_request(5, tmp_path)], timeout_s=60)
    finally:
        ex.shutdown(cancel=True)
    result = results[5]
    assert result.state == "pruned"
    stopped = result.observed["stopped_at"]
    assert 3 < stopped < 50  # the stop flag reached the body soon after the driver's False
    steps = [s for n, s, _ in seen if n == 5]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 3
    assert all(v == s * 10 for _, s, v in seen)


def _wait_file(path: Path, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:  # the body writes it in place: on a loaded machine it was read half-written (empty)
        try:
            return dict(json.loads(path.read_text()))
        except (FileNotFoundError, json.JSONDecodeError):
            assert time.monotonic() < deadline, f"{path} never appeared whole"
            time.sleep(0.1)


def _gone(pids: list[int], timeout_s: float = 20) -> list[int]:
    """Pids still alive (zombies count as gone) after waiting up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def test_killed_worker_fails_with_worker_died_and_leaves_no_server(ray_owner: RayExecutor, tmp_path: Path) -> None:
    ex = RayExecutor(_spec(), body=_server_body)
    try:
        ex.submit(3, _request(3, tmp_path, dir=str(tmp_path)))
        info = _wait_file(tmp_path / "3.json")
        assert len(info["server_pids"]) >= 2
        os.kill(info["worker_pid"], signal.SIGKILL)
        out: list[tuple[int, TrialResult]] = []
        deadline = time.monotonic() + 60
        while not out and time.monotonic() < deadline:
            out = ex.wait(1.0)
    finally:
        ex.shutdown(cancel=True)
    assert [n for n, _ in out] == [3]
    result = out[0][1]
    assert result.state == "failed" and result.failure_kind == "worker_died"
    assert "Error" in result.evidence
    assert _gone(info["server_pids"]) == []


@pytest.mark.parametrize("grace_s", [0.0, 10.0], ids=["force", "soft-then-force"])
def test_cancel_tears_down_running_servers(ray_owner: RayExecutor, tmp_path: Path, grace_s: float) -> None:
    """Ctrl-C in the driver: shutdown(cancel=True). 0 s grace goes straight to force-cancel."""
    ex = RayExecutor(_spec(), body=_server_body, cancel_grace_s=grace_s)
    infos = []
    try:
        for n in (10, 11):
            ex.submit(n, _request(n, tmp_path, dir=str(tmp_path)))
        infos = [_wait_file(tmp_path / f"{n}.json") for n in (10, 11)]
        t0 = time.monotonic()
    finally:
        ex.shutdown(cancel=True)
    stopped = [(tmp_path / f"{n}.stopped").exists() for n in (10, 11)]
    if grace_s:  # the soft cancel reached the bodies: their finally stopped the servers
        assert stopped == [True, True]
        assert time.monotonic() - t0 < grace_s
    else:  # force: no finally ran; the guard ended the servers
        assert stopped == [False, False]
    pids = [p for info in infos for p in info["server_pids"]] + [info["worker_pid"] for info in infos]
    assert len(pids) >= 6
    assert _gone(pids) == []
    assert ray.is_initialized()  # an executor that joined an instance leaves it running


def test_real_trial_body_runs_the_sim_on_rays_gpus(ray_owner: RayExecutor, tmp_path: Path) -> None:
    """The default body: a simulated SGLang server launched on the GPUs Ray assigned, load run, torn down."""
    model = Path(__file__).resolve().parent.parent / "studies" / "models" / "qwen3-32b-class"
    req = _request(0, tmp_path, time_scale=100.0, seed=0)  # no figure is asserted: a short startup
    req.config = ServerConfig(model_path=str(model), tp_size=2)
    req.startup_timeout_s = 60
    req.workload = WorkloadSpec(
        backend="sglang",
        input_len=128,
        output_len=32,
        range_ratio=1.0,
        num_prompts=16,
        concurrency=[4],
        warmup_requests=1,
        flush_cache=True,
        seed=0,
    )
    ex = RayExecutor(_spec())
    try:
        results = _drive(ex, [req], timeout_s=120)
    finally:
        ex.shutdown(cancel=True)
    result = results[0]
    assert result.state == "complete", f"{result.failure_kind}: {result.evidence}"
    assert result.value and result.value > 0
    ids = result.observed["gpu_ids"]
    assert len(ids) == 2
    env = json.loads((tmp_path / "t0" / "env.json").read_text())
    assert env.get("CUDA_VISIBLE_DEVICES", ",".join(ids)) == ",".join(ids)  # recorded or not, never other GPUs
    assert "--tp-size" in result.command and "2" in result.command


def test_a_body_that_raises_is_a_crashed_trial_with_the_traceback(ray_owner: RayExecutor, tmp_path: Path) -> None:
    ex = RayExecutor(_spec(), body=_raising_body)
    try:
        results = _drive(ex, [_request(4, tmp_path)], timeout_s=60)
    finally:
        ex.shutdown(cancel=False)
    assert results[4].state == "failed" and results[4].failure_kind == "crashed"
    assert "ValueError" in results[4].evidence and "boom in trial 4" in results[4].evidence
    with pytest.raises(RuntimeError, match="submit after shutdown"):
        ex.submit(5, _request(5, tmp_path))


def test_a_trial_worker_does_not_repeat_the_newer_release_warning(ray_owner: RayExecutor, tmp_path: Path) -> None:
    """The driver warns once for the run that the study's release is newer than every table; each trial
    runs in a fresh worker process, which used to say it again (33 times in one run)."""
    ex = RayExecutor(_spec(), body=_flag_table_body)
    requests = [_request(n, tmp_path) for n in (6, 7)]
    for req in requests:
        req.sglang_version = "0.5.98"
    try:
        results = _drive(ex, requests, timeout_s=60)
    finally:
        ex.shutdown(cancel=False)
    for n in (6, 7):
        assert "newer than every release" in results[n].observed["note"]
        assert results[n].observed["logged"] == []


def test_a_study_runs_through_the_driver_on_ray(ray_owner: RayExecutor, tmp_path: Path) -> None:
    """``executor: {kind: ray}`` end to end: the driver's ask/tell with trials as Ray tasks."""
    from autotune.study.driver import run_study

    model = Path(__file__).resolve().parent.parent / "studies" / "models" / "qwen3-32b-class"
    spec = StudySpec.model_validate(
        {
            "name": "ray-e2e",
            "n_trials": 3,
            "storage": str(tmp_path / "study.db"),
            "run_dir": str(tmp_path / "runs"),
            "sampler": {"kind": "tpe", "seed": 0},
            "executor": {"kind": "ray"},
            "server": {
                "backend": "sim",
                "model_path": str(model),
                "tp_size": 2,
                "startup_timeout_s": 60,
                "sim": {"time_scale": 100, "seed": 0},  # no figure is asserted: short startups (6 launches)
            },
            "hardware": {"gpu": "h100", "num_gpus": 8},
            "search_space": {"cuda_graph_max_bs": {"choices": [16, 32]}},
            "workload": {
                "input_len": 128,
                "output_len": 32,
                "num_prompts": 16,
                "concurrency": [4],
                "warmup_requests": 1,
            },
        }
    )
    summary = run_study(spec)
    assert summary.finished == 3 and set(summary.states) == {"COMPLETE"}, summary.states
    import optuna

    study = optuna.load_study(study_name="ray-e2e", storage=spec.storage_url)
    for t in study.trials:
        assert len(t.user_attrs["observed"]["gpu_ids"]) == 2
    assert ray.is_initialized()  # the driver's executor joined the shared instance and left it up


def test_worker_death_when_the_local_instance_itself_died_stops_the_study(
        ray_owner: RayExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dead raylet makes every trial die the same way: the executor raises instead of
    reporting worker_died trial after trial (benchmarks/faults.py, "raylet killed")."""
    from autotune.study.execution.ray import cluster as ray_cluster
    from autotune.study.execution.ray.executor import RayInstanceLost

    ex = RayExecutor(_spec(), body=_server_body)
    monkeypatch.setattr(ex, "_owned", True)
    monkeypatch.setattr(ray_cluster, "local_instance_lost", lambda: "raylet")
    try:
        ex.submit(4, _request(4, tmp_path, dir=str(tmp_path)))
        info = _wait_file(tmp_path / "4.json")
        os.kill(info["worker_pid"], signal.SIGKILL)
        deadline = time.monotonic() + 60
        with pytest.raises(RayInstanceLost, match="lost its raylet during trial 4"):
            while time.monotonic() < deadline:
                ex.wait(1.0)
    finally:
        monkeypatch.setattr(ex, "_owned", False)
        ex.shutdown(cancel=True)
    assert _gone(info["server_pids"]) == []


def test_a_layout_reserves_tp_x_dp_gpus(ray_owner: RayExecutor, tmp_path: Path) -> None:
    """search_space.layout: each trial reserves its own layout's GPUs (tp x dp of one server)."""
    from dataclasses import replace

    def req(tp: int, dp: int) -> TrialRequest:
        r = _request(0, tmp_path)
        r.config = replace(ServerConfig(model_path="models/x"), tp_size=tp, dp_size=dp)
        return r

    assert ray_owner.slots_free(req(2, 1)) == 4
    assert ray_owner.slots_free(req(4, 2)) == 1 and ray_owner.slots_free(req(2, 4)) == 1
    assert ray_owner.slots_free(req(8, 1)) == 1


def _offline_body(req: TrialRequest, report: Any) -> TrialResult:
    """The simulated server's offline evaluator (modelled time, no process)."""
    from autotune.trial.offline import evaluate

    return evaluate(req)


def test_the_issues_study_runs_to_its_budget_on_ray(ray_owner: RayExecutor, tmp_path: Path) -> None:
    """Issue 35 with the Ray executor (four TP-2 trials at a time): the node removes ``--attn-dp-size 8``
    and the study, whose designed start draws from the space after pruning, runs to its budget. Six
    trials, no confirmation re-runs: each Ray trial starts a worker of its own (seconds on a 2-core
    box); on the old code the second ask raised, before the first trial ended."""
    import optuna
    from support.pruned_space import DP8, issue_study

    from autotune.spec import load_study_spec
    from autotune.study.driver import run_study

    spec = load_study_spec(issue_study(tmp_path, n_trials=6, search={"confirm_top": 0}))
    assert spec.executor.kind == "ray"
    summary = run_study(spec, executor=RayExecutor(spec, body=_offline_body))
    assert summary.finished == 6 and "FAIL" not in summary.states, summary.states
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    assert all(p["params"][DP8] == 1 for p in study.user_attrs["design_points"])
    assert all(t.params[DP8] == 1 for t in study.trials)
    assert ray.is_initialized()
