"""benchmarks/predict_public_logs.py on a one-log set written by the test: it runs and its figures follow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from support.benchmarks import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "predict_public_logs.py"
DATA = ROOT / "tests" / "data" / "public_logs"
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


def _bench() -> Any:
    return load_script("predict_public_logs")


def test_release_from_the_version_line_else_the_log_date() -> None:
    b = _bench()
    assert b.release_of({"sglang_version": "0.5.19 (lmsysorg/sglang:v0.5.19)"}) == ("0.5.19", "")
    assert b.release_of({"sglang_version": "0.4.8.post1 (rocm image)"})[0] == "0.5.9"  # older: 0.5.9's rules
    version, why = b.release_of({"sglang_version": None, "log_date": "2025-10-12"})
    assert version == "0.5.9" and "before 0.5.9" in why
    assert b.release_of({"log_date": "2026-05-07"})[0] == "0.5.23"
    assert "not logged" in b.release_of({})[1]


def test_the_launchs_own_server_args_line_is_read() -> None:
    line = ("[2025-06-19 15:12:18] server_args=ServerArgs(model_path='/m/Qwen3-8B/', kv_cache_dtype='auto', "
            "mem_fraction_static=0.853, max_running_requests=None, max_total_tokens=None, chunked_prefill_size=2048, "
            "page_size=1, context_length=8000, swa_full_tokens_ratio=0.8, cuda_graph_max_bs=24, dtype='auto')")
    args = _bench().logged_server_args("noise\n" + line + "\n")
    assert args == {"mem_fraction_static": 0.853, "chunked_prefill_size": 2048, "page_size": 1, "context_length": 8000,
                    "swa_full_tokens_ratio": 0.8, "cuda_graph_max_bs": 24, "kv_cache_dtype": "auto"}


def test_mimo_v2_builds_before_pr_15488_size_the_swa_pool_at_the_full_pools_size() -> None:
    """MiMo-V2-Flash at TP 4: full layers 9 x 1 head x (192 + 128) x 2 B = 5,760 B per token, SWA layers
    39 x 2 heads x 320 x 2 B = 49,920 B; a build that ignores the ratio pays both whole per token (55,680 B)."""
    from autotune.sglang.memory.predictor import cell_size_bytes
    from autotune.sglang.models.profile import profile_from_config

    b = _bench()
    mimo = profile_from_config(json.loads((DATA / "sglang-pr15464-mimo-v2-flash-b200-tp4" / "config.json").read_text()))
    old, why = b.release_overrides({"log_date": "2025-12-19"}, mimo)
    assert old == {"swa_full_tokens_ratio": 1.0} and "#15488" in why[0]
    assert b.release_overrides({"log_date": "2026-01-31"}, mimo) == ({}, [])
    assert cell_size_bytes(mimo, tp_size=4, version="0.5.9", swa_ratio=1.0) == 5760 + 49920
    assert cell_size_bytes(mimo, tp_size=4, version="0.5.9") == int(5760 + 0.8 * 49920)
    cfg = b._server({"tp": 4}, mimo, old)
    assert ("--swa-full-tokens-ratio", "1.0") == cfg.extra_args[-2:]


def test_a_non_stock_build_is_excluded_with_its_reason(tmp_path: Path) -> None:
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "config.json").write_text(json.dumps(QWEN3_8B))
    entry = {"id": "q", "gpu": "h100", "tp": 1, "mem_fraction_static": 0.9, "config": "q/config.json",
             "build": "a PR's patched build: the pool cut for a workspace", "logged": {"kv_tokens": 1000}}
    (tmp_path / "manifest.json").write_text(json.dumps([entry]))
    out = _run(["--dir", str(tmp_path), "--json"])
    row = json.loads(out.stdout)[0]
    assert row["status"] == "excluded (not stock SGLang): a PR's patched build: the pool cut for a workspace"
    assert row["cold_kv"] > 0  # the figures are still shown
    table = _run(["--dir", str(tmp_path)]).stdout
    assert "0 of a supported family with a config, 0 unknown, 1 excluded" in table and "excluded (not stock SGLang): a PR's patched build" in table


def _row(log_id: str) -> dict[str, Any]:
    entry = next(e for e in json.loads((DATA / "manifest.json").read_text()) if e["id"] == log_id)
    return dict(_bench().evaluate(DATA, entry))


def test_pr_17392_is_a_musa_launch_at_the_given_f_0_8() -> None:
    """PR #17392's description quotes the launch's server_args above its log lines: device='musa',
    mem_fraction_static=0.8, page_size=64. With that f and the log's own P and A the pool is the logged one;
    the card's total memory is not logged, so no cold KV figure is claimed (it was an H200 guess before)."""
    row = _row("sglang-pr17392-qwen3-30b-a3b-dp4-ep4")
    assert row["status"] == "supported" and "cold_kv" not in row
    assert abs(row["cal_kv"] - row["logged_kv"]) / row["logged_kv"] < 0.001
    assert row["cal_kv"] % 64 == 0
    assert any("'musa' of unknown memory" in n for n in row["notes"])
