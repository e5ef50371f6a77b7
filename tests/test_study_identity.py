"""Two study files with one ``name`` do not share a study: a resume from another file is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.cli import main

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("cli_signal_handlers")  # `autotune run` in this process


def _write(tmp_path: Path, file: str, bs: list[int], input_len: int, **over: Any) -> Path:
    data: dict[str, Any] = {
        "name": "clash",
        "n_trials": 3,
        "sampler": {"kind": "random", "seed": 0},
        "executor": {"kind": "inline"},
        "server": {"backend": "sim", "sglang_version": "0.5.9",
                   "model_path": str(ROOT / "studies" / "models" / "qwen3-32b-class"),
                   "tp_size": 1, "startup_timeout_s": 60, "sim": {"time_scale": 20}},
        "hardware": {"gpu": "h200", "num_gpus": 1},
        "search_space": {"cuda_graph_max_bs": {"choices": bs}},
        "workload": {"input_len": input_len, "output_len": 16, "num_prompts": 16, "concurrency": [8],
                     "warmup_requests": 1},
        "objective": {"metric": "output_throughput"},
        "search": {"confirm_top": 0},
    }
    for key, value in over.items():
        if isinstance(value, dict):
            data[key] = {**data.get(key, {}), **value}
        else:
            data[key] = value
    path = tmp_path / file
    path.write_text(yaml.safe_dump(data))
    return path


def _trials(tmp_path: Path) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="clash", storage=f"sqlite:///{tmp_path / 'clash.db'}").trials


def test_another_file_with_the_same_name_is_refused_and_nothing_is_written(tmp_path: Path, capsys) -> None:
    first = _write(tmp_path, "clash1.yaml", [64, 128], 128)
    assert main(["run", str(first), "--no-progress"]) == 0
    before = [(t.number, t.state.name, t.params) for t in _trials(tmp_path)]
    assert len(before) == 3
    capsys.readouterr()

    second = _write(tmp_path, "clash2.yaml", [128, 256], 256)
    for extra in ([], ["--n-trials", "4"]):
        assert main(["run", str(second), "--no-progress", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"error: study 'clash' in sqlite:///{tmp_path / 'clash.db'} was created from another study "
                       "file: its search_space.cuda_graph_max_bs differs (stored [64, 128], this file [128, 256]); "
                       "give this study another name"], err
        after = [(t.number, t.state.name, t.params) for t in _trials(tmp_path)]
        assert after == before  # nothing asked, nothing left RUNNING

    # The commands that show results refuse it too; from the first file they show its trials.
    for command in ("status", "best"):
        assert main([command, str(second)]) == 2
        assert "was created from another study file: its search_space.cuda_graph_max_bs differs" \
            in capsys.readouterr().err
        assert main([command, str(first)]) == 0
        capsys.readouterr()

    # The workload alone differs: named too.
    third = _write(tmp_path, "clash3.yaml", [64, 128], 256)
    assert main(["run", str(third), "--no-progress"]) == 2
    assert "its workload.input_len differs (stored 128, this file 256)" in capsys.readouterr().err
    assert len(_trials(tmp_path)) == 3


def test_a_resume_of_the_same_study_with_a_larger_budget_still_runs(tmp_path: Path, capsys) -> None:
    first = _write(tmp_path, "clash1.yaml", [64, 128], 128)
    assert main(["run", str(first), "--no-progress"]) == 0
    assert main(["run", str(first), "--no-progress", "--n-trials", "5"]) == 0
    assert len([t for t in _trials(tmp_path) if t.state.name == "COMPLETE"]) == 5
    # What only spends or places the budget may change: n_trials, the sampler, confirmation, timeouts.
    edited = _write(tmp_path, "clash1.yaml", [64, 128], 128, n_trials=6, sampler={"kind": "tpe", "seed": 1},
                    search={"confirm_top": 1}, server={"startup_timeout_s": 90, "sim": {"time_scale": 10}})
    assert main(["run", str(edited), "--no-progress"]) == 0
    assert len([t for t in _trials(tmp_path) if t.state.name == "COMPLETE"]) >= 6
