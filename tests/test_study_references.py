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
