"""Driver behaviour on the offline simulated backend (no processes: the driver's logic, fast)."""

from __future__ import annotations

from pathlib import Path

import optuna
from support.demo import demo_data, demo_spec

from autotune.study.driver import run_study
from autotune.study.execution.offline import OfflineExecutor
from autotune.study.observer import budget_used


def _spec(tmp_path: Path, **over):
    data = demo_data()
    data["workload"].update({"num_prompts": 64, "output_len": 32})
    data.update({"n_trials": 12, **over})
    return demo_spec(tmp_path, data)


def test_stages_confirmation_and_a_resumed_confirmation(tmp_path: Path):
    spec = _spec(tmp_path, search={"stages": "fixed", "stage1_fraction": 0.7, "confirm_top": 2})
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    trials = study.trials
    assert budget_used(study) == 12
    # Stage 1 (base knobs, speculative off) for ceil(12 x 0.7) trials, then speculative on the best base.
    stage2 = [t for t in trials if t.user_attrs.get("stage") == 2]
    assert stage2 and all(t.params["speculative_algorithm"] == "EAGLE3" for t in stage2)
    assert all(t.params.get("speculative_algorithm") == "none" for t in trials if t.user_attrs.get("stage") == 1)
    # Confirmation: the top 2 and the baseline ran once more, outside the budget.
    extras = [t for t in trials if t.user_attrs.get("confirm_of") is not None]
    assert len(extras) in (2, 3) and all(t.state.name == "COMPLETE" for t in extras)  # 2 if the baseline is top
    baseline = next(t for t in trials if t.user_attrs.get("baseline") and t.user_attrs.get("confirm_of") is None)
    assert any(t.user_attrs["confirm_of"] == baseline.number for t in extras)
    conf = study.user_attrs["confirmation"]
    assert len(conf) == len(extras) and all(len(v["values"]) == 2 for v in conf.values())

    # An interrupted run can leave confirmation re-runs queued: the next run runs them.
    top = max((t for t in trials if t.state.name == "COMPLETE" and t.user_attrs.get("confirm_of") is None),
              key=lambda t: t.value)
    study.enqueue_trial(top.params, user_attrs={"confirm_of": top.number})
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    assert not study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert len(study.user_attrs["confirmation"][str(top.number)]["values"]) == 3
    assert budget_used(study) == 12


def test_no_launch_ends_in_a_predictable_kv_oom_after_calibration(tmp_path: Path):
    spec = _spec(tmp_path, n_trials=16, search={"confirm_top": 0})
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    calibrated_from = int(study.user_attrs["calibration"]["source"].split()[-1])
    launched_kv_oom = [t for t in study.trials if t.number > calibrated_from
                       and t.user_attrs.get("failure_kind") == "kv_oom"]
    assert not launched_kv_oom
    pruned = [t for t in study.trials if t.user_attrs.get("failure_kind") == "predicted_oom"]
    assert pruned and all("rest = " in t.user_attrs["reason"] and "GiB" in t.user_attrs["reason"] for t in pruned)


def test_one_driver_per_study(tmp_path: Path):
    import subprocess
    import sys

    import psutil
    import pytest

    from autotune.errors import ConfigError
    from autotune.study.storage.lock import DriverLock

    lock = tmp_path / "driver.lock"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        lock.write_text(f"{other.pid} {psutil.Process(other.pid).create_time()!r}\n")
        with pytest.raises(ConfigError, match=f"already being run by pid {other.pid}"):
            with DriverLock(lock):
                pass
        # The same pid with another start time is a recycled pid: the lock is stale.
        lock.write_text(f"{other.pid} 12345.0\n")
        with DriverLock(lock):
            assert lock.read_text().split()[0] == str(__import__("os").getpid())
        assert not lock.exists()
    finally:
        other.kill()
        other.wait()


def test_a_wall_time_budget_stops_the_search_and_skips_confirmation(tmp_path: Path):
    spec = _spec(tmp_path, n_trials=500, budget={"wall_time_s": 1})  # the first trial starts at 0 s, the stop is 1 s on
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    assert 0 < budget_used(study) < 500
    assert not [t for t in study.trials if t.user_attrs.get("confirm_of") is not None]
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING))


def test_a_search_never_launches_the_same_argv_twice_before_confirmation(tmp_path: Path):
    """A space of 4 launches and a budget of 12: the sampler repeats itself, the driver answers a
    repeat from the stored result of the same resolved argv instead of launching it again."""
    from collections import Counter

    from autotune.study import attrs
    from autotune.trial.argv import build_argv
    from autotune.trial.contract import TrialRequest

    spec = _spec(tmp_path, search={"confirm_top": 1, "repeats": 1, "stages": "off"}, search_space={
        "mem_fraction_static": {"low": 0.9, "high": 0.92, "step": 0.02},
        "cuda_graph_max_bs": {"choices": [128, 256]},
    })
    launches: list[tuple[int, str]] = []

    def server_argv(rq: TrialRequest) -> str:  # the launch, less the simulator's per-trial seed
        argv = build_argv(rq)
        i = argv.index("--sim-seed")
        return " ".join(argv[:i] + argv[i + 2:])

    run_study(spec, executor=OfflineExecutor(on_result=lambda n, rq, _r: launches.append((n, server_argv(rq)))))
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    confirm = {t.number for t in study.trials if t.user_attrs.get(attrs.CONFIRM_OF) is not None}
    per_argv = Counter(argv for n, argv in launches if n not in confirm)
    assert per_argv and max(per_argv.values()) == 1, per_argv.most_common(2)
    reused = [t for t in study.trials if t.user_attrs.get(attrs.REUSED_FROM) is not None]
    assert reused, "the sampler never repeated a launch: the test proves nothing"
    for t in reused:
        src = study.trials[t.user_attrs[attrs.REUSED_FROM]]
        assert (t.state, t.value, t.user_attrs[attrs.COMMAND]) == (src.state, src.value, src.user_attrs[attrs.COMMAND])
        assert t.user_attrs[attrs.GPU_SECONDS] == 0.0
    assert budget_used(study) == 12
    assert confirm and any(Counter(a for _, a in launches)[a] == 2 for n, a in launches if n in confirm)


def _leading(study: optuna.Study, params: dict, value: float, **user_attrs) -> int:
    from optuna.distributions import CategoricalDistribution

    dist = {k: CategoricalDistribution([128, 256, 512]) for k in params}
    study.add_trial(optuna.trial.create_trial(params=params, distributions=dist, value=value, user_attrs=user_attrs))
    return len(study.trials) - 1


def test_a_noisy_study_re_runs_each_new_leader_to_three_runs_and_counts_them_towards_its_repeats(tmp_path: Path):
    """search.repeats >= 2 (a noisy node): the best-ranked configuration is re-run as soon as it
    leads, until it has three runs (``RACE_RUNS``, at most ``repeats``); the re-runs are outside
    the budget and count as its confirmation repeats."""
    from autotune.study import attrs
    from autotune.study.phases import Phases
    from autotune.study.search.race import enqueue_race

    spec = _spec(tmp_path, search={"confirm_top": 1, "repeats": 3, "stages": "off"})
    study = optuna.create_study(direction="maximize")
    phases = Phases(spec, study)
    first = _leading(study, {"cuda_graph_max_bs": 128}, 100.0)
    assert enqueue_race(spec, study) == first
    assert enqueue_race(spec, study) is None  # its re-run is queued
    race = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert len(race) == 1 and race[0].system_attrs["fixed_params"] == {"cuda_graph_max_bs": 128}
    assert race[0].user_attrs[attrs.CONFIRM_OF] == first and race[0].user_attrs[attrs.RACE]
    trial = study.ask()  # the queued re-run, as the driver's next launch takes it
    trial.suggest_categorical("cuda_graph_max_bs", [128, 256, 512])
    study.tell(trial, 97.0)
    assert budget_used(study) == 1
    assert enqueue_race(spec, study) == first  # two runs: once more
    trial = study.ask()
    trial.suggest_categorical("cuda_graph_max_bs", [128, 256, 512])
    study.tell(trial, 95.0)
    assert budget_used(study) == 1
    assert enqueue_race(spec, study) is None  # three runs: the leader is not re-run again
    _leading(study, {"cuda_graph_max_bs": 256}, 95.0)
    assert enqueue_race(spec, study) is None  # not the leader: no re-run
    lucky = _leading(study, {"cuda_graph_max_bs": 512}, 104.0)
    assert enqueue_race(spec, study) == lucky
    # Confirmation: the top trial's repeats less the re-run it already had; the baseline's in full.
    trial = study.ask()
    trial.suggest_categorical("cuda_graph_max_bs", [128, 256, 512])
    study.tell(trial, 103.0)
    phases.enqueue_confirmation()
    queued = [t.user_attrs[attrs.CONFIRM_OF] for t in study.get_trials(states=(optuna.trial.TrialState.WAITING,))]
    assert queued == [lucky, lucky]


def test_a_study_of_two_repeats_races_a_leader_to_two_runs(tmp_path: Path):
    """``repeats: 2``: a leader gets one re-run during the search (``race_runs`` = min(3, repeats)),
    so one confirmation run is left for the end."""
    from autotune.study.search.race import enqueue_race, race_runs

    spec = _spec(tmp_path, search={"confirm_top": 1, "repeats": 2, "stages": "off"})
    assert race_runs(spec) == 2
    study = optuna.create_study(direction="maximize")
    first = _leading(study, {"cuda_graph_max_bs": 128}, 100.0)
    assert enqueue_race(spec, study) == first
    trial = study.ask()
    trial.suggest_categorical("cuda_graph_max_bs", [128, 256, 512])
    study.tell(trial, 99.0)
    assert enqueue_race(spec, study) is None


def test_a_quiet_study_re_runs_nothing_during_the_search(tmp_path: Path):
    from autotune.study.search.race import enqueue_race

    spec = _spec(tmp_path, search={"confirm_top": 2, "repeats": 1})
    study = optuna.create_study(direction="maximize")
    _leading(study, {"cuda_graph_max_bs": 128}, 100.0)
    assert enqueue_race(spec, study) is None


def test_the_driver_races_leaders_before_the_confirmation(tmp_path: Path):
    from autotune.study import attrs

    spec = _spec(tmp_path, n_trials=8, search={"confirm_top": 1, "repeats": 2})
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    races = [t for t in study.trials if t.user_attrs.get(attrs.RACE)]
    assert races and budget_used(study) == 8
    confirming = min(t.number for t in study.trials
                     if t.user_attrs.get(attrs.CONFIRM_OF) is not None and not t.user_attrs.get(attrs.RACE))
    for r in races:  # each re-ran, during the search, a configuration measured once until then
        assert r.number < confirming
        before = [t for t in study.trials[: r.number] if t.state.name == "COMPLETE" and t.params == r.params
                  and t.user_attrs.get(attrs.REUSED_FROM) is None]  # a reused result is no run of its own
        assert len(before) == 1 and before[0].user_attrs.get(attrs.CONFIRM_OF) is None
    top = max((t for t in study.trials if t.state.name == "COMPLETE" and t.user_attrs.get(attrs.CONFIRM_OF) is None),
              key=lambda t: t.value)
    runs = [t for t in study.trials if t.user_attrs.get(attrs.CONFIRM_OF) == top.number]
    assert len(runs) == 2  # its race re-run and one confirmation re-run: repeats 2 in all
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    spec_runs = [t for t in done if t.params.get("speculative_algorithm", "none") != "none"]
    assert spec_runs, "no speculative trial completed: the accept length is not checked"
    for t in done:  # recorded (and exported) per trial: tokens per verify, the bonus token included
        acc = t.user_attrs.get("accept_length")
        assert acc is None if t not in spec_runs else 1 < acc <= t.params["speculative_num_steps"] + 1


def test_a_crash_while_building_a_candidate_leaves_no_trial_running(tmp_path: Path, monkeypatch):
    """A bug raised between ask() and the launch (optuna's "CategoricalDistribution does not support
    dynamic value space" on a study of another space) marks the asked trial interrupted and queues it
    again, as a resume would have, instead of leaving it RUNNING."""
    import pytest

    from autotune.study.candidates import Candidates

    built = Candidates.candidate
    calls = []

    def candidate(self, trial):
        calls.append(trial.number)
        if len(calls) == 2:
            raise ValueError("CategoricalDistribution does not support dynamic value space.")
        return built(self, trial)

    monkeypatch.setattr(Candidates, "candidate", candidate)
    spec = _spec(tmp_path, n_trials=4)
    with pytest.raises(ValueError, match="dynamic value space"):
        run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    failed = study.trials[calls[1]]
    assert failed.state.name == "FAIL" and "dynamic value space" in failed.user_attrs["reason"]
    assert failed.user_attrs["failure_kind"] == "interrupted"
    (again,) = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert again.user_attrs["retry_of"] == failed.number
    monkeypatch.setattr(Candidates, "candidate", built)  # the next run runs it and finishes the study
    run_study(spec, executor=OfflineExecutor())
    assert budget_used(optuna.load_study(study_name=spec.name, storage=spec.storage_url)) == 4
