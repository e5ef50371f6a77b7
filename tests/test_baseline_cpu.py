"""``search.baseline: first`` on ``server.device: cpu`` with ``mem_fraction_static`` searched: SGLang's
own value there is unknown before launch (the baseline's params hold None), and optuna's float
distribution holds no None. The study must still launch SGLang's defaults first (offline: no SGLang)."""

from __future__ import annotations

import logging
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.results import trials
from autotune.results.progress import make_progress
from autotune.results.summary import best
from autotune.spec import load_study_spec
from autotune.study.candidates import Candidates
from autotune.study.driver import run_study
from autotune.study.execution.offline import OfflineExecutor
from autotune.trial.contract import TrialRequest, TrialResult, TrialState

ROOT = Path(__file__).resolve().parents[1]


def _spec(tmp_path: Path, sampler: str):
    data = yaml.safe_load((ROOT / "studies" / "real-cpu-tiny.yaml").read_text())
    data["server"]["model_path"] = str(ROOT / "studies" / "models" / "tiny-llama-cpu")
    data.update(n_trials=3, sampler={"kind": sampler, "seed": 0})
    data["search"]["baseline"] = "first"
    data["search"]["confirm_top"] = 0
    data["search_space"] = {"mem_fraction_static": {"low": 0.5, "high": 0.9, "step": 0.1},
                            "max_running_requests": {"choices": [4, 16]}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_study_spec(path)


def _measure(request: TrialRequest) -> TrialResult:
    """A stand-in for real SGLang: every launch serves, the launch's argv is what is recorded."""
    cfg = request.config
    return TrialResult(state=TrialState.COMPLETE, value=100.0 + (cfg.mem_fraction_static or 0.0),
                       command=["--mem-fraction-static", str(cfg.mem_fraction_static)]
                       if cfg.mem_fraction_static is not None else [])


@pytest.mark.parametrize("sampler", ["tpe", "grid"])
def test_the_cpu_baseline_runs_first_with_mem_fraction_static_searched(tmp_path: Path, monkeypatch, caplog, sampler: str):
    monkeypatch.setattr(Candidates, "preflight", lambda self, *checked: None)  # no SGLang venv needed offline
    from autotune.study import driver
    from autotune.study.candidates import SglangCheck

    monkeypatch.setattr(driver, "check_sglang", lambda spec: SglangCheck(None))  # nor run_study's own probe
    spec = _spec(tmp_path, sampler)
    launched: list[TrialRequest] = []
    with caplog.at_level(logging.INFO, logger="autotune"):
        run_study(spec, executor=OfflineExecutor(_measure, on_result=lambda n, req, res: launched.append(req)),
                  progress=make_progress(False))
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    trials_ = study.trials
    assert len(trials_) == 3 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials_)
    base = trials_[0]
    assert base.user_attrs.get("baseline") and base.user_attrs["resolved"]["mem_fraction_static"] is None
    assert launched[0].config.mem_fraction_static is None  # SGLang picks its own value: nothing passed
    assert launched[0].config.max_running_requests is None
    assert 0.5 <= base.params["mem_fraction_static"] <= 0.9  # a value optuna accepts, from the range
    assert all(r.config.mem_fraction_static is not None for r in launched[1:])  # the search passes its f
    # what people read says SGLang chose (None), not the sampler's stand-in
    assert trials.ran_params(base) == {"mem_fraction_static": None, "max_running_requests": None}
    # the launch lines leave an unset knob out (no "mem_fraction_static=None"): the baseline sets none
    lines = [r.getMessage() for r in caplog.records]
    assert [m for m in lines if m.startswith("trial 0 launch")] == [
        "trial 0 launched with no knob set (SGLang's own values)",
        "trial 0 launching with no knob set (SGLang's own values)"]
    f1 = round(trials_[1].params["mem_fraction_static"], 6)
    assert [m for m in lines if m.startswith("trial 1 launched")] == [
        f"trial 1 launched max_running_requests={trials_[1].params['max_running_requests']}, mem_fraction_static={f1}"]
    assert not any("None" in m or "null" in m for m in lines if " launch" in m)
    assert trials.row(base)["param_mem_fraction_static"] is None
    assert trials.ran_params(trials_[1]) == {k: round(v, 6) if isinstance(v, float) else v
                                             for k, v in trials_[1].params.items()}
    top = best(spec)  # the stand-in value measures 100 + f: the baseline is the worst, a runner-up
    assert top["baseline_number"] == 0 and top["number"] != 0
    assert {r["number"]: r["params"]["mem_fraction_static"] for r in top["runners_up"]}[0] is None
