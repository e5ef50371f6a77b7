"""Search trials launch the study file's space only: SGLang's automatic values, which the baseline
adds to the distributions optuna stores (space.widen_for_baseline), stay the baseline's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune import space
from autotune.spec import FloatRange, IntChoices, StrChoices, load_study_spec
from autotune.study import attrs
from autotune.study.driver import run_study
from autotune.study.execution.offline import OfflineExecutor

ROOT = Path(__file__).resolve().parents[1]
MRR = [32, 64, 128]  # SGLang's automatic max_running_requests on this node is 3327
F = {"low": 0.95, "high": 0.97, "step": 0.01}  # its automatic mem_fraction_static is 0.91


def _spec(tmp_path: Path, sampler: dict[str, Any], n_trials: int, **space_over: Any):
    data = {
        "name": "in-space",
        "n_trials": n_trials,
        "sampler": sampler,
        "executor": {"kind": "inline"},
        "server": {"backend": "sim", "sglang_version": "0.5.9",
                   "model_path": str(ROOT / "studies" / "models" / "qwen3-32b-class"),
                   "tp_size": 1, "startup_timeout_s": 120, "sim": {"time_scale": 4, "seed": 0}},
        "hardware": {"gpu": "h200", "num_gpus": 1},
        "search_space": {"mem_fraction_static": F, "max_running_requests": {"choices": MRR}, **space_over},
        "workload": {"input_len": 256, "output_len": 32, "num_prompts": 32, "concurrency": [64],
                     "warmup_requests": 2},
        "objective": {"metric": "output_throughput"},
        "search": {"confirm_top": 1},
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_study_spec(path)


def _search_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Every trial but the baseline and its re-runs."""
    return [t for t in study.trials if not t.user_attrs.get(attrs.BASELINE)]


def _assert_in_space(study: optuna.Study) -> None:
    base = next(t for t in study.trials if t.user_attrs.get(attrs.BASELINE))
    auto_mrr, auto_f = base.params["max_running_requests"], base.params["mem_fraction_static"]
    assert auto_mrr not in MRR and auto_f < F["low"], base.params  # the case under test
    searched = _search_trials(study)
    assert searched
    for t in searched:
        assert t.params["max_running_requests"] in MRR, (t.number, t.params)
        assert F["low"] - 1e-9 <= t.params["mem_fraction_static"] <= F["high"] + 1e-9, (t.number, t.params)
        argv = " ".join(t.user_attrs.get(attrs.COMMAND) or [])
        assert f"--max-running-requests {auto_mrr}" not in argv, (t.number, argv)
        assert f"--mem-fraction-static {auto_f}" not in argv, (t.number, argv)
    # The stored distributions still hold the baseline's values: one per parameter for the study.
    assert auto_mrr in study.trials[-1].distributions["max_running_requests"].choices


@pytest.mark.parametrize("sampler", [{"kind": "tpe", "seed": 0, "n_startup_trials": 2},
                                     {"kind": "random", "seed": 0}])
def test_no_search_trial_launches_sglangs_automatic_value(tmp_path: Path, sampler: dict[str, Any]) -> None:
    spec = _spec(tmp_path, sampler, n_trials=10)
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    _assert_in_space(study)
    # A resume with a larger budget sees the same distributions and stays inside the space.
    before = dict(study.trials[0].distributions)
    run_study(spec.model_copy(update={"n_trials": 14}), executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    assert len(_search_trials(study)) > 10
    assert all(t.distributions[k] == d for t in study.trials for k, d in before.items() if k in t.distributions)
    _assert_in_space(study)


def test_the_grid_enumerates_the_files_points_only(tmp_path: Path) -> None:
    spec = _spec(tmp_path, {"kind": "grid", "seed": 0}, n_trials=30)
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    _assert_in_space(study)
    # Every point of the file's grid (3 f x 3 sizes) once, the baseline apart, then the grid's end.
    points = {(round(t.params["mem_fraction_static"], 6), t.params["max_running_requests"])
              for t in _search_trials(study) if t.user_attrs.get(attrs.CONFIRM_OF) is None}
    assert len(points) == 9 == len([t for t in _search_trials(study) if t.user_attrs.get(attrs.CONFIRM_OF) is None])


def test_a_queued_search_point_holding_the_baseline_value_launches_inside_the_space(tmp_path: Path) -> None:
    """A stage built on the baseline (the best base found), a warm start carrying an earlier study's
    baseline: a queued search trial with SGLang's automatic value gets the space's nearest value."""
    spec = _spec(tmp_path, {"kind": "random", "seed": 0}, n_trials=4)
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    base = next(t for t in study.trials if t.user_attrs.get(attrs.BASELINE))
    study.enqueue_trial(dict(base.params), user_attrs={attrs.STAGE: 2})
    run_study(spec.model_copy(update={"n_trials": 5}), executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    staged = next(t for t in study.trials if t.user_attrs.get(attrs.STAGE) == 2)
    assert staged.params["max_running_requests"] == 128 and staged.params["mem_fraction_static"] == 0.95
    _assert_in_space(study)


def test_into_domain() -> None:
    pick = lambda choices: choices[-1]  # noqa: E731
    assert space.into_domain(IntChoices(choices=[32, 64, 128]), 3327, pick) == 128
    assert space.into_domain(IntChoices(choices=[32, 64, 128]), 64, pick) == 64
    assert space.into_domain(IntChoices(choices=[32, 64, 128]), None, pick) == 128  # "not passed": picked
    assert space.into_domain(FloatRange(low=0.95, high=0.97, step=0.01), 0.91, pick) == 0.95
    assert space.into_domain(FloatRange(low=0.5, high=0.6), 0.9, pick) == 0.6
    assert space.into_domain(StrChoices(choices=["fp8_e4m3"]), "auto", pick) == "fp8_e4m3"
    assert not space.in_domain(IntChoices(choices=[1, 2]), True)  # a bool is not the choice 1
