"""A trial failed by the node (worker died, port taken, server killed or hung mid-load) runs
once more; a second failure stands. Offline evaluator: the driver's logic, fast."""

from __future__ import annotations

from pathlib import Path

import optuna
from support.demo import demo_data, demo_spec

from autotune.outcome import FailureKind
from autotune.study.driver import run_study
from autotune.study.execution.offline import OfflineExecutor
from autotune.study.observer import budget_used
from autotune.study.rerun import run_once_more
from autotune.trial.contract import TrialResult, TrialState


def _spec(tmp_path: Path):  # type: ignore[no-untyped-def]
    data = demo_data()
    data.update({"n_trials": 6, "search": {"confirm_top": 0}})
    return demo_spec(tmp_path, data)


def test_policy() -> None:
    assert run_once_more("port_in_use", "", {})
    assert run_once_more("load_failed", "server stalled", {})
    assert run_once_more("crashed", "exited: killed by SIGKILL", {})
    assert not run_once_more("crashed", "exited with code 1", {})
    assert not run_once_more("kv_oom", "", {})
    assert not run_once_more("load_failed", "", {"after_death": True})


def test_node_failure_runs_again_once_and_a_repeat_failure_stands(tmp_path: Path) -> None:
    from autotune.trial.offline import evaluate

    seen: list[int] = []

    def flaky(req):  # type: ignore[no-untyped-def]
        seen.append(req.trial_number)
        if len(seen) == 2:  # the second launch: its server hung mid-load
            return TrialResult(state=TrialState.FAILED, failure_kind=FailureKind.LOAD_FAILED, evidence="server stalled")
        if len(seen) in (4, 5):  # the fourth and its re-run: port taken both times
            return TrialResult(state=TrialState.FAILED, failure_kind=FailureKind.PORT_IN_USE,
                               evidence="address already in use")
        return evaluate(req)

    spec = _spec(tmp_path)
    run_study(spec, executor=OfflineExecutor(flaky))
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    by_n = {t.number: t for t in study.trials}
    hung, taken = by_n[seen[1]], by_n[seen[3]]
    rerun = [t for t in study.trials if t.user_attrs.get("retry_of") == hung.number]
    assert len(rerun) == 1 and rerun[0].params == hung.params
    # the re-run measured the candidate itself: what the evaluator gives it, not the node's stall
    truth = [t for t in study.trials if t.params == hung.params and t.number not in (hung.number, rerun[0].number)]
    assert rerun[0].state.name == "COMPLETE" or rerun[0].user_attrs.get("failure_kind") not in (None, "load_failed")
    assert all(t.state == rerun[0].state for t in truth)
    again = [t for t in study.trials if t.user_attrs.get("retry_of") == taken.number]
    assert len(again) == 1 and again[0].state.name == "FAIL"  # the second failure stands
    assert not [t for t in study.trials if t.user_attrs.get("retry_of") == again[0].number]
    assert budget_used(study) == 6


def test_a_full_disk_stops_the_study_cleanly_and_the_trial_runs_again(tmp_path: Path) -> None:
    import errno

    import pytest

    from autotune.study.execution.disk_fault import DiskUnwritable
    from autotune.trial.offline import evaluate

    calls: list[int] = []

    def full(req):  # type: ignore[no-untyped-def]
        calls.append(req.trial_number)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device", req.artifact_dir)
        return evaluate(req)

    spec = _spec(tmp_path)
    with pytest.raises(DiskUnwritable, match=r"^disk: cannot write \(.*\): No space left on device; make room"):
        run_study(spec, executor=OfflineExecutor(full))
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    assert study.trials[calls[-1]].state.name == "RUNNING"  # not condemned: resume re-runs it
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    rerun = [t for t in study.trials if t.user_attrs.get("retry_of") == calls[-1]]
    assert len(rerun) == 1 and rerun[0].state.name in ("COMPLETE", "PRUNED", "FAIL")
    assert budget_used(study) == 6


def test_a_load_point_that_ran_out_of_memory_is_a_runtime_oom_and_not_run_again():
    from autotune.outcome import load_failure_kind

    err = ("warm-up failed: all 8 warm-up requests failed, first: server error: request 8276: "
           "Prefill out of memory (4096 tokens)")
    assert load_failure_kind(err) == "runtime_oom"
    assert load_failure_kind("c64: no request completed (torch.OutOfMemoryError: CUDA error)") == "runtime_oom"
    assert not run_once_more(load_failure_kind(err), err, {})  # the candidate's own limit: a re-run cannot help
    assert load_failure_kind("warm-up failed: the server died") == "load_failed"
    assert run_once_more(load_failure_kind("server stalled"), "server stalled", {})
