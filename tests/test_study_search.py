"""Search behaviour on the simulated backend: early stopping, SLOs, the grid's end."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.cli import main

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("cli_signal_handlers")]  # `autotune run` in this process


def _study(tmp_path: Path, **over) -> Path:
    data = {
        "name": "search",
        "n_trials": 5,  # more than the grid holds: the grid's end stops the search
        "sampler": {"kind": "grid", "seed": 0},
        "executor": {"kind": "inline"},
        "server": {"backend": "sim", "sglang_version": "0.5.9",
                   "model_path": str(ROOT / "studies" / "models" / "qwen3-32b-class"),
                   "tp_size": 2, "startup_timeout_s": 60, "sim": {"time_scale": 20}},
        "hardware": {"gpu": "h100", "num_gpus": 2, "interconnect": "nvlink"},
        "search_space": {"max_running_requests": {"choices": [8, 64]}},
        "workload": {"input_len": 128, "output_len": 64, "num_prompts": 128, "concurrency": [64],
                     "warmup_requests": 2},
        "objective": {"metric": "output_throughput"},
        "search": {"confirm_top": 0},
    }
    data.update(over)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _trials(tmp_path: Path, name: str = "search") -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / (name + '.db')}").trials


def test_pruner_stops_a_clearly_worse_trial_before_its_load_ends(tmp_path: Path, capsys):
    # Long enough (a few wall seconds for the slow candidate) for 1 s snapshots to arrive. The seed
    # orders the grid: 64 runs first, so the pruner has a finished trial to hold 8 against.
    study = _study(tmp_path, sampler={"kind": "grid", "seed": 1}, search={"confirm_top": 0,
                                     "early_stopping": {"n_startup_trials": 1, "n_warmup_steps": 1}},
                   workload={"input_len": 128, "output_len": 128, "num_prompts": 512, "concurrency": [64],
                             "warmup_requests": 2})
    assert main(["run", str(study), "--no-progress"]) == 0
    trials = _trials(tmp_path)
    # The grid (baseline + 2 candidates) ends the search before n_trials.
    assert len(trials) == 3
    slow = [t for t in trials if t.params.get("max_running_requests") == 8]
    assert len(slow) == 1 and slow[0].state.name == "PRUNED", [(t.params, t.state.name) for t in trials]
    t = slow[0]
    assert t.user_attrs["failure_kind"] == "early_stopped"
    assert t.intermediate_values, "the trial reported while its load ran"
    assert t.user_attrs["metrics"]["c64"]["completed"] < 512, "stopped before its load ended"
    fast = [x for x in trials if x.params.get("max_running_requests") == 64]
    assert fast[0].state.name == "COMPLETE"


def test_slo_study_reports_a_best_that_meets_the_slo(tmp_path: Path, capsys):
    # Long prompts: with max_running_requests 64 new requests' prefill chunks keep stalling
    # the decode batch (median TPOT ~80 ms in modelled time) for the most throughput;
    # 8 keeps TPOT near 18 ms at two thirds of it. The SLO sits between, far from both,
    # since host overhead per token is multiplied by the time scale in modelled latencies.
    study = _study(tmp_path, objective={"metric": "output_throughput", "slo": {"median_tpot_ms": 40}},
                   workload={"input_len": 2048, "output_len": 64, "num_prompts": 96, "concurrency": [64],
                             "warmup_requests": 2})
    data = yaml.safe_load(study.read_text())
    data["server"]["sim"]["time_scale"] = 10
    study.write_text(yaml.safe_dump(data))
    assert main(["run", str(study), "--no-progress"]) == 0
    capsys.readouterr()
    trials = [t for t in _trials(tmp_path) if t.state.name == "COMPLETE"]
    assert len(trials) == 3
    unconstrained = max(trials, key=lambda t: t.value)
    assert unconstrained.user_attrs["slo_met"] is False, "the study must be one whose raw winner breaks the SLO"
    assert unconstrained.constraints.get("slo", 0) > 0
    assert main(["best", str(study), "--json"]) == 0
    best = json.loads(capsys.readouterr().out)
    assert best["slo_met"] is True
    assert best["number"] != unconstrained.number
    winner = [t for t in trials if t.number == best["number"]][0]
    assert winner.user_attrs["median_tpot_ms"] <= 40
    assert best["params"]["max_running_requests"] == 8


def test_rate_search_finds_the_highest_rate_meeting_the_slo_in_one_launch(tmp_path: Path, capsys):
    study = _study(tmp_path, n_trials=1, sampler={"kind": "tpe", "seed": 0},
                   search_space={},
                   objective={"metric": "output_throughput", "slo": {"median_tpot_ms": 40}},
                   workload={"input_len": 2048, "output_len": 64, "num_prompts": 48, "concurrency": [64],
                             "warmup_requests": 1, "rate_search": {"low": 0.5, "high": 8, "steps": 4}})
    data = yaml.safe_load(study.read_text())
    data["server"]["sim"]["time_scale"] = 10
    study.write_text(yaml.safe_dump(data))
    assert main(["run", str(study), "--no-progress"]) == 0
    t = _trials(tmp_path)[0]
    points = t.user_attrs["metrics"]
    assert len(points) <= 4 and all(p.startswith("c64_r") for p in points)
    rates = [float(p.split("_r")[1]) for p in points]
    assert rates[0] == 8  # the highest rate first; bisection after
    met = {p: m["median_tpot_ms"] <= 40 for p, m in points.items()}
    assert not met["c64_r8"], "8 long prompts a second saturate it: prefills stall decoding past the SLO"
    assert any(met.values()), met
    assert t.user_attrs["slo_met"] is True and met[t.user_attrs["best_point"]]


def test_rate_search_without_an_slo_is_a_config_error(tmp_path: Path, capsys):
    study = _study(tmp_path, workload={"input_len": 64, "output_len": 8, "num_prompts": 8, "concurrency": [4],
                                       "rate_search": {"low": 1, "high": 8}})
    assert main(["run", str(study)]) == 2
    assert "rate_search needs objective.slo" in capsys.readouterr().err
