"""Studies with workload kinds: validation of workload.dataset, and a shared-prefix study on the
simulated backend whose trials and export carry the cache figures."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.demo import demo_data, demo_spec, write_study

from autotune.errors import ConfigError
from autotune.results.export import trials_frame
from autotune.spec import load_study_spec, parse_study, resolve_workload
from autotune.study.driver import run_study
from autotune.study.execution.offline import OfflineExecutor


def _data(**workload: object) -> dict:
    data = demo_data()
    data["workload"].update(workload)
    return data


def test_a_bad_workload_kind_or_field_is_one_line_naming_the_path() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_study(_data(dataset={"kind": "generated-shared-prefix", "num_groups": 0}))
    assert "workload.dataset" in str(exc.value) and "num_groups" in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match="workload.dataset"):
        parse_study(_data(dataset={"kind": "zipf"}))


def test_dataset_paths_resolve_against_the_study_file(tmp_path: Path) -> None:
    data = _data(dataset={"kind": "trace", "path": "traces/t.jsonl"})
    del data["workload"]["num_prompts"]
    spec = load_study_spec(write_study(data, tmp_path, "s.yaml"))
    got = resolve_workload(spec, spec.workload)
    assert str(got.dataset.path) == str(tmp_path / "traces" / "t.jsonl")  # type: ignore[union-attr]
    assert got.tokenizer is None  # the demo model directory has no tokenizer.json
    assert got.num_prompts is None  # a trace's own length, not num_prompts' 512 default


def test_a_shared_prefix_study_records_hit_rates_and_exports_them(tmp_path: Path) -> None:
    data = _data(dataset={"kind": "generated-shared-prefix", "num_groups": 4, "prompts_per_group": 16,
                          "system_prompt_len": 1024, "question_len": 64, "output_len": 16},
                 num_prompts=None, concurrency=[8])
    data.update({"n_trials": 3, "search": {"confirm_top": 0, "stages": "off"}})
    spec = demo_spec(tmp_path, data)
    run_study(spec, executor=OfflineExecutor())
    frame = trials_frame(spec)
    done = frame[frame["state"] == "COMPLETE"]
    assert len(done) >= 1
    assert (done["c8_cache_hit_rate"] > 0.6).all()
    assert (done["c8_completed"] == 64).all()
    assert "c8_median_ttft_cached_ms" in frame.columns


def _mix_data(**over: object) -> dict:
    data = _data()
    wl = data.pop("workload")
    data["workloads"] = [
        {**wl, "name": "chat", "weight": 3, "dataset": {"kind": "generated-shared-prefix", "num_groups": 2}},
        {**wl, "name": "batch", "slo": {"p99_ttft_ms": 5000}},
    ]
    data.update(over)
    return data


def test_a_mix_names_its_workloads_and_validates_each() -> None:
    spec = parse_study(_mix_data())
    assert [(w.name, w.weight, w.slo) for w in spec.workloads or []] == [
        ("chat", 3.0, {}), ("batch", 1.0, {"p99_ttft_ms": 5000.0})]
    assert [where for where, _ in spec.named_workloads()] == ["workloads[0]", "workloads[1]"]
    bad = _mix_data()
    bad["workloads"][1]["name"] = "chat"
    with pytest.raises(ConfigError, match="names must be unique, 'chat' repeats"):
        parse_study(bad)
    bad = _mix_data()
    bad["workloads"][0]["slo"] = {"p99_nothing_ms": 1}
    with pytest.raises(ConfigError, match=r"workloads.0.slo: unknown SLO metric"):
        parse_study(bad)
    both = _mix_data(workload={"input_len": 5})
    with pytest.raises(ConfigError, match="not both"):
        parse_study(both)
    one = _mix_data()
    one["workloads"] = one["workloads"][:1]
    with pytest.raises(ConfigError, match="workloads"):
        parse_study(one)
    goodput = _mix_data(objective={"metric": "goodput"})
    goodput["workloads"][0]["goodput_slo"] = {"ttft_ms": 100}
    with pytest.raises(ConfigError, match=r"workloads\[1\].goodput_slo"):
        parse_study(goodput)
