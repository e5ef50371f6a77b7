"""benchmarks/search_efficiency.py's figures depend only on the code, the study, the seeds and the pinned
versions: not on where the checkout lies, the interpreter's string hashing, or what the process ran before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.benchmarks import BENCHMARKS, load_harness, load_script

from autotune import space
from autotune.spec import load_study_spec
from autotune.trial.contract import TrialResult, TrialState

ROOT = Path(__file__).resolve().parents[1]


def _study(tmp_path: Path) -> Path:
    """A space the driver designs a start for and TPE searches (not a grid: 52 candidates, 12 trials)."""
    data = {
        "name": "determinism",
        "n_trials": 12,
        "server": {"backend": "sim", "sglang_version": "0.5.9",
                   "model_path": str(ROOT / "studies" / "models" / "qwen3-32b-class"), "tp_size": 1,
                   "sim": {"time_scale": 20, "seed": 0}},
        "hardware": {"gpu": "h200", "num_gpus": 1, "interconnect": "nvlink"},
        "search_space": {"mem_fraction_static": {"low": 0.70, "high": 0.94, "step": 0.02},
                         "chunked_prefill_size": {"choices": [2048, 8192]},
                         "max_running_requests": {"choices": [16, 32]}},
        "workload": {"backend": "openai", "input_len": 128, "output_len": 32, "num_prompts": 32,
                     "concurrency": [16], "warmup_requests": 1},
        "objective": {"metric": "output_throughput", "direction": "maximize"},
        "search": {"confirm_top": 2, "repeats": 2},
    }
    path = tmp_path / "determinism.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


_DRIVE = """
import json, sys
from pathlib import Path
import optuna
from harness import search as mod
from autotune.spec import load_study_spec
optuna.logging.set_verbosity(optuna.logging.ERROR)
path = Path(sys.argv[1])
study = load_study_spec(path)
table = mod.Table.load(study, path, Path(sys.argv[2]))
run = mod.run_driver(table, study.n_trials, mod.Noise(0.04, 3), 1.0, sampler={"seed": 3})
st = mod.LAST_STUDY[0]
print(json.dumps({"design": st.user_attrs.get("design_points"),
                  "trials": [[t.params, t.value] for t in st.trials],
                  "events": run.events, "final": run.final}, sort_keys=True))
"""


def test_driver_run_is_identical_under_two_string_hash_seeds(tmp_path: Path) -> None:
    """The designed points, every trial's parameters and measured value, and the timeline the figures
    come from are the same whatever PYTHONHASHSEED is (set and dict iteration orders of strings)."""
    study = _study(tmp_path)
    outs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": os.pathsep.join([str(ROOT), str(BENCHMARKS)])}
        done = subprocess.run([sys.executable, "-c", _DRIVE, str(study), str(tmp_path / f"out{seed}")],
                              capture_output=True, text=True, env=env, timeout=240, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        outs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    a, b = outs
    assert a["design"], "the driver designed no start: the test would not cover the design"
    assert len(a["trials"]) >= 12
    assert a == b


def test_noise_and_cache_keys_do_not_depend_on_where_the_checkout_lies(monkeypatch: pytest.MonkeyPatch) -> None:
    h = load_harness("search", monkeypatch)
    here = {"model_path": str(ROOT / "studies" / "models" / "qwen3-32b-class"), "port": 30000,
            "speculative": {"draft_model_path": str(ROOT / "studies" / "models" / "kimi-k2-class-eagle3")}}
    relative = {"model_path": "studies/models/qwen3-32b-class",
                "speculative": {"draft_model_path": "studies/models/kimi-k2-class-eagle3"}}
    assert h.config_key(here) == h.config_key(relative)
    assert str(ROOT) not in h.config_key(here)
    # a path outside the checkout is kept as it is (another model directory is another configuration)
    assert "/models/elsewhere" in h.config_key({"model_path": "/models/elsewhere"})


def test_noise_draws_are_the_recorded_ones(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The modelled noise of a (seed, configuration, repeat) is a fixed number: a change of the key or of
    numpy's Generator stream (which the README's table rests on) shows here, not as moved figures."""
    h = load_harness("search", monkeypatch)
    cfg = {"model_path": str(ROOT / "studies" / "models" / "qwen3-32b-class"), "mem_fraction_static": 0.9}

    class Fixed:  # a table whose every launch measures 1000.0 without noise
        def result(self, config):
            return TrialResult(state=TrialState.COMPLETE, value=1000.0)

    noise = h.Noise(0.04, 7)
    values = [noise.measure(Fixed(), cfg).value for _ in range(2)]  # type: ignore[arg-type]
    assert values == pytest.approx([RECORDED_FIRST, RECORDED_SECOND], rel=1e-12)


RECORDED_FIRST = 1059.3112123507913
RECORDED_SECOND = 942.6058994995794


def test_every_launch_is_charged_alike_whatever_was_evaluated_before(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    """A configuration's modelled cost is the same evaluated first or after others (the evaluator's
    per-study page cache would charge whichever came first a cold weight read)."""
    h = load_harness("search", monkeypatch)
    path = _study(tmp_path)
    spec = load_study_spec(path)
    a = space.to_config(spec, {"mem_fraction_static": 0.9, "chunked_prefill_size": 2048,
                                   "max_running_requests": 16}).to_dict()
    b = space.to_config(spec, {"mem_fraction_static": 0.88, "chunked_prefill_size": 2048,
                                   "max_running_requests": 16}).to_dict()
    first = h.Table.load(spec, path, tmp_path / "one")
    cost_a_first = first.result(a).gpu_seconds
    second = h.Table.load(spec, path, tmp_path / "two")
    second.result(b)
    assert second.result(a).gpu_seconds == pytest.approx(cost_a_first, rel=1e-12)


def test_versions_are_printed_and_compared_with_the_pins(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load_script("search_efficiency", monkeypatch)
    env = mod.versions()
    assert set(env) == {"python", *mod.VERSIONED}
    pins = mod.pinned()
    assert {"optuna", "numpy", "scipy"} <= set(pins)
    line = mod._versions_line({**env, **pins, "torch": "absent"})
    assert line.startswith("versions: python ") and "(as pinned in benchmarks/constraints.txt)" in line
    off = mod._versions_line({**env, **pins, "numpy": "0.0.1", "torch": "absent"})
    assert "NOT as pinned" in off and "numpy 0.0.1 (pinned " in off
