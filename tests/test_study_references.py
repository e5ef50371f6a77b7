"""search.references: named launch points (the seed's hand-passed 0.88) run beside SGLang's automatic baseline."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from support.demo import demo_data, demo_spec

from autotune.results.report import build_report
from autotune.study.driver import run_study
from autotune.study.execution.offline import OfflineExecutor


def test_the_demo_runs_the_seeds_own_start_beside_the_automatic_baseline(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
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
    # best names it with the winner's gain over it, as it does the baseline
    from autotune.cli import main
    from autotune.results.summary import best

    data = best(spec)
    refs = data["references"]
    assert [r["name"] for r in refs] == [ref.user_attrs["reference"]] and refs[0]["number"] == ref.number
    assert refs[0]["value"] == pytest.approx(ref.value)
    assert refs[0]["gain_pct"] == pytest.approx((data["value"] - ref.value) / ref.value * 100, abs=0.01)
    assert main(["best", str(spec.source_path)]) == 0
    assert f"reference {refs[0]['name']!r} (trial {ref.number}): {ref.value:.2f}  gain" in capsys.readouterr().out


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


def test_a_reference_that_did_not_complete_says_why_and_the_others_their_gain() -> None:
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial

    from autotune.results.summary import _references

    study = optuna.create_study(direction="maximize")
    dist = {"mem_fraction_static": FloatDistribution(0.5, 0.95)}
    study.add_trial(create_trial(params={"mem_fraction_static": 0.8}, distributions=dist, value=100.0,
                                 user_attrs={"reference": "by hand"}))
    study.add_trial(create_trial(params={"mem_fraction_static": 0.7}, distributions=dist, state=TrialState.PRUNED,
                                 user_attrs={"reference": "old", "reused_from": 3,
                                             "note": "early-stopped at step 2: below the median by 20 %"}))
    study.add_trial(create_trial(params={"mem_fraction_static": 0.9}, distributions=dist, value=120.0))
    refs = _references(study, 120.0, 1)
    assert refs[0] | {"why": None} == {"name": "by hand", "number": 0, "value": 100.0, "gain_pct": 20.0,
                                       "state": "COMPLETE", "reused_from": None, "why": None}
    assert refs[1]["value"] is None and refs[1]["reused_from"] == 3 and "early-stopped" in refs[1]["why"]
    assert len(refs) == 2
