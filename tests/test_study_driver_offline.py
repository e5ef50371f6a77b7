"""Driver behaviour on the offline simulated backend (no processes: the driver's logic, fast)."""

from __future__ import annotations

from pathlib import Path

import optuna
import yaml

from autotune.spec import load_study_spec
from autotune.study.driver import budget_used, run_study
from autotune.study.offline_executor import OfflineExecutor

ROOT = Path(__file__).resolve().parents[1]


def _spec(tmp_path: Path, **over):
    data = yaml.safe_load((ROOT / "studies" / "demo.yaml").read_text())
    data["server"]["model_path"] = str(ROOT / "studies" / "models" / "kimi-k2-class")
    data["search_space"]["speculative"]["draft_model_path"] = str(ROOT / "studies" / "models" / "kimi-k2-class-eagle3")
    data["workload"].update({"num_prompts": 64, "output_len": 32})
    data.update({"n_trials": 12, **over})
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_study_spec(path)


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
    from autotune.study.lock import DriverLock

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
    spec = _spec(tmp_path, n_trials=500, budget={"wall_time_s": 3})
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
