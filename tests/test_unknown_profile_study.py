"""A model whose architecture the memory model does not know: never condemned before a launch calibrates it.

``plan`` says "unknown: calibrated from the first launch"; a study launches SGLang's own defaults first
(whatever ``search.baseline`` says), calibrates P and A from that log, and then prunes by the calibrated formula.
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import yaml

from autotune.cli import main
from autotune.sglang.knobs.config import ServerConfig
from autotune.sglang.memory.predictor import predict
from autotune.sglang.models.profile import load_model_profile
from autotune.spec import load_study_spec
from autotune.study.driver import run_study
from autotune.study.execution.offline import OfflineExecutor
from autotune.study.prediction import UNKNOWN_REASON, Predictor

# A made-up 7B-class dense model: GQA-shaped fields, an architecture no profile family holds.
CONFIG = {"architectures": ["MadeUpForCausalLM"], "model_type": "madeup", "hidden_size": 4096,
          "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
          "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 8192,
          "torch_dtype": "bfloat16"}
WEIGHT_BYTES = 14_500_000_000  # the checkpoint index's total size: 13.5 GiB on one 24 GiB card


def _study(tmp_path: Path) -> Path:
    model = tmp_path / "madeup-7b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(CONFIG))
    (model / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": WEIGHT_BYTES},
                                                                    "weight_map": {}}))
    data = {"name": "madeup", "n_trials": 5,
            "sampler": {"kind": "tpe", "seed": 0, "n_startup_trials": 2},
            "server": {"backend": "sim", "sglang_version": "0.5.23", "model_path": str(model), "tp_size": 1,
                       "sim": {"time_scale": 50, "seed": 0}},
            "hardware": {"gpu": "rtx-4090", "num_gpus": 1, "interconnect": "pcie"},
            "search_space": {"mem_fraction_static": {"low": 0.3, "high": 0.9, "step": 0.05},
                             "cuda_graph_max_bs": {"choices": [8, 16]}},
            "workload": {"input_len": 128, "output_len": 16, "num_prompts": 16, "concurrency": [8],
                         "warmup_requests": 0},
            "objective": {"metric": "output_throughput", "direction": "maximize"},
            # a low f the formula condemns once calibrated; the baseline stays "last" as the default says
            "search": {"confirm_top": 0, "references": {"low f": {"mem_fraction_static": 0.3}}}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_plan_says_unknown_instead_of_condemning(tmp_path: Path, capsys) -> None:
    study = _study(tmp_path)
    spec = load_study_spec(study)
    model = load_model_profile(spec.server.model_path)
    assert model.is_unknown and "MadeUpForCausalLM" in model.unknown_reason
    low = ServerConfig(model_path=str(model.path), tp_size=1, mem_fraction_static=0.3, cuda_graph_max_bs=8)
    # the generic formula alone finds no room for the KV cache at f 0.3, yet the predictor does not condemn ...
    raw = predict(model, "rtx-4090", low, version="0.5.23")
    assert raw.kv_gib < 0 and raw.uncertain and not raw.should_prune
    # ... but a study never does before a launch has calibrated it
    pred = Predictor(spec, lambda: None).predict(low)
    assert pred.verdict == "unknown" and not pred.should_prune and pred.reason.startswith(UNKNOWN_REASON)
    assert main(["plan", str(study), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["candidates"]
    assert rows and all(r["verdict"] == "unknown" and r["reason"].startswith(UNKNOWN_REASON) for r in rows)
    assert main(["plan", str(study), "--set", "mem_fraction_static=0.3"]) == 0
    assert "unknown: calibrated from the first launch" in capsys.readouterr().out


def test_a_study_of_a_made_up_architecture_launches_calibrates_then_prunes(tmp_path: Path) -> None:
    spec = load_study_spec(_study(tmp_path))
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    trials = sorted(study.trials, key=lambda t: t.number)
    first = trials[0]
    # SGLang's defaults launch first (search.baseline is "last"), and their log calibrates the study
    assert first.user_attrs.get("baseline") and first.user_attrs.get("failure_kind") != "predicted_oom"
    assert first.user_attrs["prediction"]["verdict"] == "unknown"
    cal = study.user_attrs["calibration"]
    assert cal["source"] == "trial 0" and cal["p_gib"] > 20 and cal["a_gib"] < cal["p_gib"] - 13
    # after that the calibrated formula judges: the low-f reference is condemned before launch
    low = [t for t in trials if t.params.get("mem_fraction_static") == 0.3]
    assert low and all(t.number > 0 for t in low)
    assert all(t.user_attrs.get("failure_kind") == "predicted_oom" and "rest = " in t.user_attrs["reason"]
               for t in low)
    assert all(t.user_attrs["prediction"]["verdict"] != "unknown" for t in trials[1:])
    launched = [t for t in trials if t.state.name == "COMPLETE"]
    assert launched and first in launched
