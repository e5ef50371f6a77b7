"""Issue 35: the node removes a value of a searched flag (``--attn-dp-size 8`` at TP 2); every
configuration the study enqueues (designed start, warm start, references, a resumed study's
queue) draws from the space after pruning, and one that does not lie in it is dropped with one
line saying which value of which knob and why, never a crash (optuna: ``'8' not in (1,)``)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import optuna
import pytest
import yaml
from support.pruned_space import DP8, GONE, REASON, issue_study

from autotune.spec import load_study_spec
from autotune.study import attrs
from autotune.study.driver import run_study
from autotune.study.execution.offline import OfflineExecutor
from autotune.trial.contract import Reporter, TrialRequest, TrialResult


def _offline_body(request: TrialRequest, _reporter: Reporter | None) -> TrialResult:
    from autotune.trial.offline import evaluate

    return evaluate(request)


def _dropped(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]


def _search_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.trials if t.user_attrs.get(attrs.CONFIRM_OF) is None]


def test_the_issues_study_runs_to_its_budget_with_the_inline_executor(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        cli_signal_handlers: None, caplog: pytest.LogCaptureFixture) -> None:
    """``autotune run`` (inline executor; trial bodies by the offline evaluator), exit 0, 12 trials;
    the designed start holds only values of the space after pruning, so nothing is dropped."""
    from autotune.cli import main
    from autotune.study.execution import executor

    monkeypatch.setattr(executor, "run_trial_body", _offline_body)
    path = issue_study(tmp_path)
    assert main(["plan", str(path)]) == 0
    assert f"removed --attn-dp-size=8: {REASON}" in capsys.readouterr().out
    with caplog.at_level(logging.INFO, logger="autotune"):
        assert main(["run", str(path), "--executor", "inline", "--no-progress"]) == 0
    line = re.search(r"study qwen32-tp2: 12 search trials finished; (\d+) trials in all \((.*)\)(?:, of them (\d+) "
                     r"confirmation re-runs)?$", capsys.readouterr().out, re.M)
    assert line is not None
    spec = load_study_spec(path)
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    # the line adds up: the search trials and the re-runs are all the trials, each state counted once
    confirmations = sum(1 for t in study.trials if t.user_attrs.get(attrs.CONFIRM_OF) is not None)
    assert int(line.group(1)) == len(study.trials) == 12 + confirmations
    assert int(line.group(3) or 0) == confirmations
    assert sum(int(kv.split("=")[1]) for kv in line.group(2).split(", ")) == len(study.trials)
    design = study.user_attrs["design_points"]
    assert len(design) >= 3 and all(p["params"].get(DP8) == 1 for p in design)
    assert len(_search_trials(study)) == 12 and all(t.params[DP8] == 1 for t in study.trials)
    assert _dropped(caplog) == []
    # The study stores its space after pruning; the file still lists 8: the same study file, shown
    # and resumed (study.storage.identity compares the file's space as the run prunes it).
    assert study.user_attrs["spec"]["search_space"]["flags"][DP8]["choices"] == [1]
    assert main(["status", str(path)]) == 0
    assert main(["run", str(path), "--executor", "inline", "--no-progress", "--n-trials", "13"]) == 0


def test_a_resumed_queue_holding_a_removed_value_drops_it_with_one_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A designed point with ``--attn-dp-size 8`` left in the queue (by an autotune that designed
    from the study file's lists) is dropped before the ask, said once, and its slot searched."""
    spec = load_study_spec(issue_study(tmp_path))
    study = optuna.create_study(study_name=spec.name, storage=spec.storage_url, direction="maximize")
    study.enqueue_trial({"mem_fraction_static": 0.9, "cuda_graph_max_bs": 64, DP8: 8},
                        user_attrs={attrs.STAGE: "design", "design": "boundary"})
    with caplog.at_level(logging.INFO, logger="autotune"):
        summary = run_study(spec, executor=OfflineExecutor())
    assert summary.finished == 12
    (line,) = _dropped(caplog)
    assert line.startswith(f"trial 0: queued designed start point (boundary) dropped: {GONE}"), line
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    slot = study.trials[0]
    assert slot.user_attrs[attrs.DROPPED] in line and slot.user_attrs[attrs.STAGE] is None
    assert slot.state.name in ("COMPLETE", "PRUNED") and slot.params[DP8] == 1


def test_a_reference_with_a_removed_value_is_dropped_and_the_study_finishes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    refs = {"dp8 by hand": {"mem_fraction_static": 0.9, DP8: 8}, "f by hand": {"mem_fraction_static": 0.88}}
    spec = load_study_spec(issue_study(tmp_path, search={"references": refs, "confirm_top": 0}))
    with caplog.at_level(logging.INFO, logger="autotune"):
        summary = run_study(spec, executor=OfflineExecutor())
    assert summary.finished == 12
    (line,) = _dropped(caplog)
    assert f"queued reference 'dp8 by hand' dropped: {GONE}" in line
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    assert [t.user_attrs[attrs.REFERENCE] for t in study.trials if t.user_attrs.get(attrs.REFERENCE)] == ["f by hand"]
    assert len([t for t in study.trials if t.user_attrs.get(attrs.DROPPED)]) == 1
    assert all(t.params[DP8] == 1 for t in study.trials)


def test_a_warm_start_configuration_with_a_removed_value_is_left_out_and_said(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An earlier study at TP 8 (where DP 8 runs) won with ``--attn-dp-size 8``; at TP 2 its winners
    are not carried (one line), the next best are, and the study finishes."""
    from autotune.study.warm_start import _fixed

    no_ar = {k: v for k, v in yaml.safe_load(issue_study(tmp_path).read_text())["search_space"].items()
             if k != "custom_allreduce"}  # TP 8 on PCIe prunes it: the earlier study searched without it
    earlier = load_study_spec(issue_study(tmp_path, "earlier", search_space=no_ar,
                                          server={**yaml.safe_load(issue_study(tmp_path).read_text())["server"],
                                                  "tp_size": 8}))
    study = optuna.create_study(study_name=earlier.name, storage=earlier.storage_url, direction="maximize")
    for f, dp, value in ((0.90, 8, 2000.0), (0.88, 8, 1900.0), (0.86, 1, 1500.0), (0.84, 1, 1400.0)):
        fixed = _fixed({"mem_fraction_static": f, "cuda_graph_max_bs": 64, DP8: dp, "--moe-runner-backend": "auto",
                        "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "0"}, earlier)
        assert fixed is not None
        study.add_trial(optuna.trial.create_trial(params=fixed[0], distributions=fixed[1], value=value))
    spec = load_study_spec(issue_study(tmp_path, search_space=no_ar, warm_start=["earlier.yaml"]))
    with caplog.at_level(logging.INFO, logger="autotune"):
        summary = run_study(spec, executor=OfflineExecutor())
    assert summary.finished == 12
    said = [r.getMessage() for r in caplog.records if "not carried: --attn-dp-size" in r.getMessage()]
    assert said == [f"warm start from earlier: trials 0, 1 not carried: {GONE} (_handle_data_parallelism)"]
    later = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    warm = [t.user_attrs[attrs.WARM_FROM] for t in later.trials if t.user_attrs.get(attrs.WARM_FROM)]
    assert warm == ["earlier trial 2", "earlier trial 3"]
    assert _dropped(caplog) == [] and all(t.params[DP8] == 1 for t in later.trials)
