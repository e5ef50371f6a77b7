"""benchmarks/predict_public_logs.py on a one-log set written by the test: it runs and its figures follow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "predict_public_logs.py"
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 36, "intermediate_size": 12288,
            "vocab_size": 151936, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120)


def test_one_log_cold_and_calibrated(tmp_path: Path) -> None:
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "config.json").write_text(json.dumps(QWEN3_8B))
    # a TP-1 H100 launch at f 0.9: rest = 63.49 - 78.84 x 0.1 = 55.61 GiB -> 404,910 tokens of 147,456 B
    entry = {"id": "q", "gpu": "h100", "tp": 1, "dp": 1, "mem_fraction_static": 0.9, "config": "q/config.json",
             "sglang_version": "0.5.9",
             "logged": {"weight_gib_per_gpu": 15.35, "avail_before_load_gib": 78.84, "avail_after_load_gib": 63.49,
                        "kv_tokens": 404890, "kv_size_gib": 404890 * 147456 / 2**30}}
    (tmp_path / "manifest.json").write_text(json.dumps([entry, {"id": "kt", "source": "ktransformers/issues/1"},
                                                        {"id": "u", "gpu": "h100", "tp": 1, "config": "u.json"}]))
    (tmp_path / "u.json").write_text(json.dumps({**QWEN3_8B, "architectures": ["MadeUpForCausalLM"]}))
    out = _run(["--dir", str(tmp_path), "--json"])
    assert out.returncode == 0, out.stderr
    rows = {r["id"]: r for r in json.loads(out.stdout)}
    q = rows["q"]
    assert q["status"] == "supported" and q["family"] == "mha" and q["cell"] == 147456
    assert abs(q["cell_err"]) < 0.01 and abs(q["cal_kv_err"]) < 0.1  # calibrated: the family's cell alone
    assert abs(q["cold_w_err"]) < 5 and q["cold_kv"] > 0
    assert rows["kt"]["status"].startswith("n/a")
    assert rows["u"]["status"].startswith("unknown") and rows["u"]["cold_prunes"] is False
    table = _run(["--dir", str(tmp_path)])
    assert table.returncode == 0 and "unknown profiles predicted as a pruning out-of-memory: 0" in table.stdout


def test_missing_manifest_exits_2(tmp_path: Path) -> None:
    out = _run(["--dir", str(tmp_path)])
    assert out.returncode == 2 and "--dir" in out.stderr and "manifest.json" in out.stderr
