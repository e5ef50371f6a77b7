"""A workload mix: each workload is a set of load points of the same launch, the value is the
weighted mean of the workloads' values, the SLO must hold for each, and ``best`` shows each
workload's figures."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import yaml
from support.demo import demo_data, write_study

from autotune.cli import main
from autotune.objective import Direction, Objective, Picked
from autotune.results.summary import best
from autotune.spec import MixWorkloadSpec, load_study_spec
from autotune.study.driver import run_study
from autotune.study.execution.offline import OfflineExecutor
from autotune.trial.load_points import LoadPoint, run_mix

pytestmark = pytest.mark.usefixtures("cli_signal_handlers")  # `autotune run` in this process sets handlers

ROOT = Path(__file__).resolve().parents[1]


def _mix(*specs: dict) -> list[MixWorkloadSpec]:
    return [MixWorkloadSpec.model_validate(s) for s in specs]


def test_the_value_is_the_weighted_mean_and_the_worst_slo_counts() -> None:
    mix = _mix({"name": "chat", "weight": 3, "concurrency": [8, 16]},
               {"name": "batch", "weight": 1, "concurrency": [64], "slo": {"p99_ttft_ms": 100}})
    table = {"chat.c8": {"output_throughput": 100.0, "p99_ttft_ms": 50.0},
             "chat.c16": {"output_throughput": 150.0, "p99_ttft_ms": 80.0},
             "batch.c64": {"output_throughput": 500.0, "p99_ttft_ms": 120.0}}
    seen: list[str] = []

    def measure(p: LoadPoint) -> dict:
        seen.append(p.name)
        return table[p.name]

    out = run_mix(mix, Objective("output_throughput", Direction.MAXIMIZE, {}), measure)
    assert seen == ["chat.c8", "chat.c16", "batch.c64"]
    assert out.picked is not None
    assert out.picked.value == pytest.approx((3 * 150 + 1 * 500) / 4)
    assert out.picked.violation == pytest.approx(0.2)  # batch misses its own 100 ms by 20 %
    assert out.mix["chat"] == {"weight": 3.0, "point": "chat.c16", "value": 150.0, "violation": None}
    assert out.mix["batch"]["point"] == "batch.c64" and out.mix["batch"]["violation"] == pytest.approx(0.2)
    assert isinstance(out.picked, Picked) and out.picked.point == "chat.c16"  # the heaviest workload's point


def test_a_point_that_ends_the_trial_ends_the_mix() -> None:
    mix = _mix({"name": "a", "concurrency": [8]}, {"name": "b", "concurrency": [8]})
    out = run_mix(mix, Objective(), lambda p: None if p.workload == "b" else {"output_throughput": 1.0})
    assert out.ended_at is not None and out.ended_at.name == "b.c8" and out.picked is None


def test_a_two_workload_study_finishes_on_the_simulator_and_best_shows_each(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = demo_data()
    wl = data.pop("workload")
    data["workloads"] = [
        {**wl, "name": "chat", "weight": 3, "num_prompts": None, "concurrency": [16],
         "dataset": {"kind": "generated-shared-prefix", "num_groups": 4, "prompts_per_group": 16,
                     "system_prompt_len": 1024, "question_len": 64, "output_len": 32}},
        {**wl, "name": "batch", "weight": 1, "num_prompts": 64, "output_len": 32, "concurrency": [64],
         "slo": {"p99_ttft_ms": 600000}},
    ]
    data.update({"n_trials": 3, "search": {"confirm_top": 0, "stages": "off"}})
    path = write_study(data, tmp_path, "mix.yaml")
    spec = load_study_spec(path)
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert done
    for t in done:
        mix = t.user_attrs["mix"]
        assert set(mix) == {"chat", "batch"}
        assert set(t.user_attrs["metrics"]) == {"chat.c16", "batch.c64"}
        assert t.value == pytest.approx((3 * mix["chat"]["value"] + mix["batch"]["value"]) / 4)
        assert t.user_attrs["slo_met"] is True
    data = best(spec)
    names = [w["name"] for w in data["workloads"]]
    assert names == ["chat", "batch"]
    chat = data["workloads"][0]
    assert chat["point"] == "chat.c16" and chat["figures"]["cache_hit_rate"] > 0.5
    assert data["workloads"][1]["slo_met"] is True
    assert main(["best", str(path)]) == 0
    out = capsys.readouterr().out
    assert "workload chat (weight 3) at chat.c16" in out and "workload batch (weight 1) at batch.c64" in out


def test_a_mix_runs_live_against_the_simulated_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = yaml.safe_load((ROOT / "studies" / "shared-prefix-chat.yaml").read_text())
    data["server"]["model_path"] = str(ROOT / "studies" / "models" / "qwen3-32b-class")
    data["server"]["sim"] = {"time_scale": 10, "seed": 0}
    wl = data.pop("workload")
    data["workloads"] = [
        {**wl, "name": "chat", "weight": 2, "concurrency": [16], "warmup_requests": 1,
         "dataset": {**wl["dataset"], "num_groups": 2, "prompts_per_group": 16, "output_len": 16}},
        {"name": "agent", "backend": "openai-chat", "concurrency": [8], "warmup_requests": 0,
         "dataset": {"kind": "multi-turn", "num_conversations": 8, "turns": 3, "system_prompt_len": 512,
                     "user_len": 64, "output_len": 16},
         "goodput_slo": {"ttft_ms": 2000, "tpot_ms": 60}},
    ]
    data.update({"n_trials": 1, "search": {"confirm_top": 0, "stages": "off"}})
    path = tmp_path / "live-mix.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path)]) == 0
    spec = load_study_spec(path)
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    (t,) = [t for t in study.trials if t.state.name == "COMPLETE"]
    metrics = t.user_attrs["metrics"]
    assert set(metrics) == {"chat.c16", "agent.c8"}
    assert metrics["agent.c8"]["completed"] == 24 and set(metrics["agent.c8"]["per_turn"]) == {"1", "2", "3"}
    assert metrics["chat.c16"]["cache_hit_rate"] > 0.5
    mix = t.user_attrs["mix"]
    assert t.value == pytest.approx((2 * mix["chat"]["value"] + mix["agent"]["value"]) / 3)
    capsys.readouterr()
    assert main(["best", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [w["name"] for w in out["workloads"]] == ["chat", "agent"]
    assert out["workloads"][1]["figures"]["goodput"] is not None
    from autotune.results.report import build_report

    html = build_report(spec)
    assert "Workload mix: each workload on the best trial" in html and ">agent<" in html and ">chat<" in html
