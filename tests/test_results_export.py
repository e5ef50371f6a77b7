"""`autotune export`: one row per trial, the documented columns, CSV/Parquet, clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from support.finished_study import POINTS

from autotune.cli import main
from autotune.errors import ConfigError
from autotune.results import trials as _trials
from autotune.results.export import check_output, export, trials_frame

README = Path(__file__).resolve().parents[1] / "dashboards" / "README.md"


def test_one_row_per_trial_with_documented_columns(finished_spec):
    from autotune.study.storage.opening import open_study

    study = open_study(finished_spec, create=False)
    frame = trials_frame(finished_spec)
    assert len(frame) == len(study.trials)
    assert sorted(frame["number"]) == [t.number for t in study.trials]
    for col in _trials.FIXED_COLUMNS:
        assert col in frame.columns, col
    for name in study.trials[0].params:
        assert f"param_{name}" in frame.columns
    for point in POINTS:
        for key in ("output_throughput", "p99_ttft_ms", "mean_itl_ms"):
            assert f"{point}_{key}" in frame.columns
    # non-scalar bench keys (percentile lists) are not flattened
    assert not any("percentiles" in c for c in frame.columns)


def test_rows_carry_outcome_prediction_and_observation(finished_spec):
    frame = trials_frame(finished_spec).set_index("number")
    assert frame.loc[0, "baseline"] and not frame.loc[1:, "baseline"].any()
    assert frame.loc[1, "outcome"] == "predicted_oom" and frame.loc[1, "state"] == "PRUNED"
    assert frame.loc[1, "pred_verdict"] == "kv_oom"
    assert set(frame.loc[[2, 3], "outcome"]) == {"kv_oom", "graph_capture_oom"}
    assert frame.loc[[1, 2, 3], "value"].isna().all()
    done = frame[frame["state"] == "COMPLETE"]
    assert (done["value"] == done["c256_output_throughput"]).all()
    assert done["obs_kv_tokens"].notna().all() and done["kv_tokens_error_pct"].notna().all()
    assert (done["duration_s"] >= 0).all()
    assert (done["startup_s"] > 0).all() and frame.loc[[1, 2, 3], "startup_s"].isna().all()


def test_csv_round_trip_through_cli(finished_spec, tmp_path, capsys):
    out = tmp_path / "trials.csv"
    assert main(["export", finished_spec.source_path, "-o", str(out)]) == 0
    back = pd.read_csv(out)
    assert len(back) == len(trials_frame(finished_spec))
    assert list(back.columns) == list(trials_frame(finished_spec).columns)
    assert "wrote" in capsys.readouterr().out


def test_unknown_suffix_exits_2_naming_the_option(finished_spec, tmp_path, capsys):
    assert main(["export", finished_spec.source_path, "-o", str(tmp_path / "t.xlsx")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "-o/--output" in err and ".xlsx" in err


def test_parquet_without_pyarrow_is_a_config_error(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pyarrow(name, *a, **kw):
        if name == "pyarrow" or name.startswith("pyarrow."):
            raise ImportError("no pyarrow")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(ConfigError, match=r"-o/--output.*pyarrow"):
        check_output(tmp_path / "t.parquet")


def test_parquet_when_pyarrow_present(finished_spec, tmp_path):
    pytest.importorskip("pyarrow", reason="parquet export needs pyarrow (optional extra 'parquet')")
    frame = export(finished_spec, tmp_path / "t.parquet")
    assert len(pd.read_parquet(tmp_path / "t.parquet")) == len(frame)


def test_missing_study_is_a_config_error(finished_spec, tmp_path, capsys):
    other = tmp_path / "other.yaml"
    other.write_text(Path(finished_spec.source_path).read_text().replace("name: results-test", "name: never-run")
                     .replace("storage: study.db", f"storage: {tmp_path / 'none.db'}"))
    assert main(["export", str(other), "-o", str(tmp_path / "x.csv")]) == 2
    assert "never-run" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


def test_readme_documents_every_fixed_column():
    text = README.read_text()
    for col in _trials.FIXED_COLUMNS:
        assert re.search(rf"`{re.escape(col)}`", text), f"{col} missing from dashboards/README.md"
    assert "param_<name>" in text and "<point>_<metric>" in text
