"""benchmarks/search_efficiency.py on a tiny study: it runs, caches the exhaustive pass, and ends in JSON."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "search_efficiency.py"


def _load_script(monkeypatch: pytest.MonkeyPatch):
    name = "search_efficiency_under_test"
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    monkeypatch.setitem(sys.modules, name, mod)  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _tiny_study(tmp_path: Path) -> Path:
    data = {
        "name": "tiny",
        "n_trials": 10,
        "sampler": {"kind": "tpe", "seed": 0, "n_startup_trials": 3},
        "executor": {"kind": "inline"},
        "server": {"backend": "sim", "sglang_version": "0.5.9",
                   "model_path": str(ROOT / "studies" / "models" / "kimi-k2-class"), "tp_size": 8,
                   "sim": {"time_scale": 20, "seed": 0}},
        "hardware": {"gpu": "rtx-pro-6000", "num_gpus": 8, "interconnect": "pcie"},
        "search_space": {"mem_fraction_static": {"low": 0.70, "high": 0.90, "step": 0.1},
                         "cuda_graph_max_bs": {"choices": [64, 256]}},
        "workload": {"backend": "openai", "input_len": 128, "output_len": 16, "num_prompts": 16,
                     "concurrency": [8], "warmup_requests": 1},
        "objective": {"metric": "output_throughput", "direction": "maximize"},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_benchmark_prints_medians_and_reuses_its_cache(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _load_script(monkeypatch)
    study = _tiny_study(tmp_path)
    out = tmp_path / "out"
    argv = ["--study", str(study), "--seeds", "2", "--budget", "8", "--out", str(out)]
    assert mod.main(argv) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    summary = json.loads(last)
    assert summary["grid_size"] == 6
    assert summary["seeds"] == 2
    for key in ("autotune_gpu_s", "grid_gpu_s", "random_gpu_s", "ratio_vs_grid", "autotune_predictable_oom_launches"):
        assert key in summary
    if summary["grid_gpu_s"]:
        assert summary["ratio_vs_grid"] == pytest.approx(summary["autotune_gpu_s"] / summary["grid_gpu_s"], rel=1e-2)
    assert all(0 <= n <= 2 for n in summary["found_within_budget"].values())
    assert summary["found_within_budget"]["grid"] == 2  # the shuffled full grid always contains the optimum
    cache = json.loads((out / "search_efficiency_tiny.json").read_text())
    assert len(cache["results"]) >= 6

    # a second run reads every grid result from the cache: nothing is evaluated again
    def refuse(_request):
        raise AssertionError("evaluated again despite the cache")

    monkeypatch.setattr(mod.offline, "evaluate", refuse)
    assert mod.main(argv) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == summary
