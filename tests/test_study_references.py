"""search.references: named launch points (the seed's hand-passed 0.88) run beside SGLang's automatic baseline."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from support.demo import demo_data, demo_spec

from autotune.results.report import build_report
from autotune.study.driver import run_study
from autotune.study.execution.offline import OfflineExecutor


def test_the_demo_runs_the_seeds_own_start_beside_the_automatic_baseline(tmp_path: Path) -> None:
    data = demo_data()
    data["workload"].update({"num_prompts": 32, "output_len": 16})
    data["n_trials"] = 3
    data["search"]["confirm_top"] = 0
    assert data["search"]["references"]  # the demo names the seed's start
    spec = demo_spec(tmp_path, data)
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    base = next(t for t in study.trials if t.user_attrs.get("baseline"))
    ref = next(t for t in study.trials if t.user_attrs.get("reference"))
    # SGLang 0.5.23's own value on this node (the demo's release; the sampler's params hold it on the step grid)
    assert base.user_attrs["resolved"]["mem_fraction_static"] == pytest.approx(0.833)
    assert ref.params["mem_fraction_static"] == pytest.approx(0.88) and ref.number == base.number + 1
    assert ref.state.name == "COMPLETE"
    html = build_report(spec)
    assert "reference: seed&#x27;s start" in html or "reference: seed's start" in html


@pytest.mark.parametrize(("n_trials", "refs", "needle"), [
    # 30 references with n_trials 2 ran 31 launches
    (2, {f"r{i}": {"mem_fraction_static": 0.8 + i / 1000} for i in range(30)},
     "search.references: 30 points and the baseline are 31 launches, more than n_trials = 2"),
    (1000, {f"r{i}": {"mem_fraction_static": 0.8 + i / 1000} for i in range(65)},
     "search.references: 65 points, more than 64"),
    (5, {"a": {"mem_fraction_static": 0.85, "cuda_graph_max_bs": 8}, "b": {"mem_fraction_static": 0.9},
         "c": {"cuda_graph_max_bs": "8", "mem_fraction_static": 0.850}},
     "search.references.c: the same point as search.references.a ("),
])
def test_references_are_distinct_and_fit_the_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str], n_trials: int,
                                                    refs: dict, needle: str) -> None:
    from support.hostile import cli, nothing_stored, one_line, study

    path = study(tmp_path, lambda d: (d.update(n_trials=n_trials), d["search"].update(references=refs)))
    for command in ("plan", "run"):
        one_line(*cli(capsys, [command, str(path), "--no-progress"] if command == "run" else [command, str(path)]),
                 needle)
    nothing_stored(tmp_path)


def test_references_that_fit_beside_the_baseline_are_accepted(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from support.hostile import cli, study

    refs = {"a": {"mem_fraction_static": 0.85}, "b": {"mem_fraction_static": 0.9}}
    code, lines = cli(capsys, ["plan", str(study(tmp_path, lambda d: (d.update(n_trials=3),
                                                                       d["search"].update(references=refs))))])
    assert code == 0, lines[-3:]
