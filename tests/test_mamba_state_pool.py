"""The hybrid models' state pool as SGLang sizes it (issue 36): the KV prediction follows
``--max-running-requests``, the radix cache, ``--max-mamba-cache-size`` and speculative decoding.

Each expected figure is written out from SGLang's own code, not from autotune's:
0.5.23 ``python/sglang/srt/mem_cache/kv_cache_configurator.py``

* :3303-3322  ``--max-mamba-cache-size`` given: ``slots = size // attn_dp``;
* :3323-3347  radix cache off and ``--max-running-requests`` set: ``slots = max(1, mrr // attn_dp)``;
* :3348-3389  otherwise ``budget = rest x r / (1 + r)`` (r 0.9), ``slots = int((budget - s) // s)``, and
  under speculation ``int((budget - s (1 + D)) // (s (1 + D / ratio)))`` with the draft's intermediate
  states ``s x (min(max(1, mrr // dp), slots // ratio) + 1) x D``;
* :3405-3409  ``rest - (slots + 1) x s`` is left for the KV pool; ``KV tokens = floor(that / cell)``;
* :3119-3172  running requests capped at ``slots // ratio`` (ratio 1 with the radix cache off, else 3 +
  the extra buffer's 2 tracking slots with the overlap scheduler: ``_calculate_mamba_ratio`` :3062-3088,
  ``mem_cache/allocation_sizing.py:11-19``).

0.5.9 ``python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py:151-207``: the same branches
without the padding slot (``slots x s``), ``slots = int(budget // s)``, speculation's intermediates
``s x (mrr // dp) x D`` taken first.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from autotune.sglang.config import ServerConfig, SpeculativeConfig
from autotune.sglang.gpus import get_gpu
from autotune.sglang.memory import Calibration, predict
from autotune.sglang.models import ModelProfile, load_model_profile, profile_from_config
from autotune.sglang.profiles.mamba import state_bytes_per_request

GIB = 2**30
BENCH_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "hybrid_state_pool.py"
_spec = importlib.util.spec_from_file_location("hybrid_state_pool", BENCH_PATH)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)
NEMOTRON_H, QWEN3_NEXT = bench.NEMOTRON_H, bench.QWEN3_NEXT  # the two classes' published layouts
# P and A as a launch measured them: rest = A - P (1 - f) is then exact, so the only thing tested is the pool
P, A, F = 78.0, 60.0, 0.9
REST = (A - P * (1 - F)) * GIB


def _pred(model: ModelProfile, version: str = "0.5.23", tp: int = 1, **kw: object) -> object:
    extra = tuple(kw.pop("extra_args", ()))  # type: ignore[arg-type]
    cfg = ServerConfig(model_path="x", tp_size=tp, mem_fraction_static=F, extra_args=extra, **kw)  # type: ignore[arg-type]
    cal = Calibration(p_gib=P, a_gib=A, tp_size=tp, mem_fraction_static=F, f_is_auto=False,
                      speculative_algorithm=cfg.speculative.algorithm)  # measured with the same draft
    return predict(model, get_gpu("h100"), cfg, version=version, calibration=cal)


def _tokens(rest: float, reserved: float, cell: int) -> int:
    return math.floor((rest - reserved) / cell)


@pytest.fixture(scope="module")
def nemotron() -> ModelProfile:
    return profile_from_config(NEMOTRON_H)


@pytest.fixture(scope="module")
def qwen3_next() -> ModelProfile:
    return profile_from_config(QWEN3_NEXT)


def test_nemotron_h_radix_off_sizes_the_pool_from_max_running_requests(nemotron: ModelProfile) -> None:
    """The issue's launch: ``--disable-radix-cache --max-running-requests 8`` gets 8 state slots (KVC:3323-3347),
    not the memory ratio's share; the KV pool gets the rest."""
    lay = nemotron.kv_layout
    assert lay is not None and lay.mamba is not None
    s = state_bytes_per_request(lay.mamba, 1)
    off8 = _pred(nemotron, max_running_requests=8, extra_args=("--disable-radix-cache",))
    off64 = _pred(nemotron, max_running_requests=64, extra_args=("--disable-radix-cache",))
    ratio = _pred(nemotron, max_running_requests=8)
    cell = off8.cell_bytes  # type: ignore[attr-defined]
    assert off8.kv_tokens == _tokens(REST, (8 + 1) * s, cell)  # type: ignore[attr-defined]
    assert off64.kv_tokens == _tokens(REST, (64 + 1) * s, cell)  # type: ignore[attr-defined]
    slots = int((REST * 0.9 / 1.9 - s) // s)
    assert ratio.kv_tokens == _tokens(REST, (slots + 1) * s, cell)  # type: ignore[attr-defined]
    # the radix cache's ratio rule leaves the KV pool about 1/1.9 of rest; 8 slots leave nearly all of it
    assert off8.kv_tokens > 1.8 * ratio.kv_tokens  # type: ignore[attr-defined]
    assert "8 state slots" in off8.reason  # type: ignore[attr-defined]


def test_radix_cache_on_the_ratio_sizes_the_pool_and_caps_running_requests(nemotron: ModelProfile) -> None:
    """With the radix cache on, --max-running-requests does not size the pool (KVC:3348-3389) but is capped at
    slots // 5 (3 + 2 tracking slots of the extra buffer, the 0.5.23 default for Nemotron-H)."""
    a, b = (_pred(nemotron, max_running_requests=n) for n in (8, 4096))
    assert a.kv_tokens == b.kv_tokens  # type: ignore[attr-defined]
    s = state_bytes_per_request(nemotron.kv_layout.mamba, 1)  # type: ignore[union-attr]
    slots = int((REST * 0.9 / 1.9 - s) // s)
    assert b.max_running_requests == slots // 5 < 4096  # type: ignore[attr-defined]
    assert a.max_running_requests == 8  # type: ignore[attr-defined]
    # 0.5.9: no extra buffer by default (auto = no_buffer, server_args.py:873-877), 3 slots a request, no padding slot
    old = _pred(nemotron, version="0.5.9", max_running_requests=4096)
    slots9 = int(REST * 0.9 / 1.9 // s)
    assert old.kv_tokens == _tokens(REST, slots9 * s, old.cell_bytes)  # type: ignore[attr-defined]
    assert old.max_running_requests == slots9 // 3  # type: ignore[attr-defined]


def test_max_mamba_cache_size_and_the_ssm_dtype(nemotron: ModelProfile) -> None:
    s = state_bytes_per_request(nemotron.kv_layout.mamba, 1)  # type: ignore[union-attr]
    given = _pred(nemotron, extra_args=("--max-mamba-cache-size", "40"))
    assert given.kv_tokens == _tokens(REST, 41 * s, given.cell_bytes)  # type: ignore[attr-defined]
    assert given.max_running_requests == 40 // 5  # type: ignore[attr-defined]
    half = _pred(nemotron, extra_args=("--max-mamba-cache-size", "40", "--mamba-ssm-dtype", "bfloat16"))
    lay = nemotron.kv_layout.mamba  # type: ignore[union-attr]
    conv = (lay.intermediate + 2 * lay.n_groups * lay.state_size) * (lay.conv_kernel - 1) * 2 * lay.layers
    s_bf16 = s - (s - conv) // 2  # the SSM state in 2 bytes instead of 4
    assert half.kv_tokens == _tokens(REST, 41 * s_bf16, half.cell_bytes)  # type: ignore[attr-defined]


def test_qwen3_next_speculative_intermediate_states(qwen3_next: ModelProfile) -> None:
    """NEXTN (MTP) with 4 draft tokens: max_running_requests defaults to 48; the pool and the draft's
    intermediate states are solved jointly (KVC:3348-3389), or sized by mrr with the radix cache off."""
    s = state_bytes_per_request(qwen3_next.kv_layout.mamba, 1)  # type: ignore[union-attr]
    spec = SpeculativeConfig(algorithm="NEXTN", num_steps=3, eagle_topk=1, num_draft_tokens=4)
    on = _pred(qwen3_next, speculative=spec)
    d, ratio = 4, 5
    budget = REST * 0.9 / 1.9
    slots = int((budget - s * (1 + d)) // (s * (1 + d / ratio)))
    inter = s * (min(48, slots // ratio) + 1) * d
    assert on.kv_tokens == _tokens(REST, (slots + 1) * s + inter, on.cell_bytes)  # type: ignore[attr-defined]
    off = _pred(qwen3_next, speculative=spec, max_running_requests=16, extra_args=("--disable-radix-cache",))
    assert off.kv_tokens == _tokens(REST, (16 + 1) * s + s * (16 + 1) * d, off.cell_bytes)  # type: ignore[attr-defined]
    # 0.5.9: the intermediates for every running request first, then the ratio on what is left
    old = _pred(qwen3_next, version="0.5.9", speculative=spec)
    rest9 = REST - s * 48 * d
    slots9 = int(rest9 * 0.9 / 1.9 // s)
    assert old.kv_tokens == _tokens(REST, s * 48 * d + slots9 * s, old.cell_bytes)  # type: ignore[attr-defined]


def test_attention_dp_splits_the_slots(qwen3_next: ModelProfile) -> None:
    """Under DP attention each rank gets max(1, mrr // dp) slots at attention-TP tp / dp."""
    dp = ServerConfig(model_path="x", tp_size=4, attn_dp_size=4, mem_fraction_static=F, max_running_requests=32,
                      extra_args=("--disable-radix-cache",))
    cal = Calibration(p_gib=P, a_gib=A, tp_size=4, attn_dp_size=4, mem_fraction_static=F, f_is_auto=False)
    pred = predict(qwen3_next, "h100", dp, version="0.5.23", calibration=cal)
    s = state_bytes_per_request(qwen3_next.kv_layout.mamba, 1)  # type: ignore[union-attr]
    assert "8 state slots" in pred.reason
    assert pred.kv_tokens == _tokens(REST, 9 * s, pred.cell_bytes)


def test_plan_set_max_running_requests_moves_the_prediction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``autotune plan --set max_running_requests=8`` on a Nemotron-H study with the radix cache off: the KV
    pool follows the running requests (it did not before issue 36)."""
    import yaml

    from autotune.cli import main

    model_dir = tmp_path / "nemotron-h"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(NEMOTRON_H))
    assert load_model_profile(model_dir).family == "mamba"
    study = {"name": "hybrid", "server": {"backend": "sim", "sglang_version": "0.5.23", "model_path": str(model_dir),
                                          "extra_args": ["--disable-radix-cache"]},
             "hardware": {"gpu": "h100", "num_gpus": 1},
             "search_space": {"mem_fraction_static": {"low": 0.8, "high": 0.9, "step": 0.05},
                              "max_running_requests": {"choices": [8, 256]}}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    assert main(["plan", str(path), "--json", "--set", "mem_fraction_static=0.85", "--set",
                 "max_running_requests=8,256"]) == 0
    rows = json.loads(capsys.readouterr().out)["candidates"]
    by = {r["max_running_requests"]: r["kv_tokens"] for r in rows}
    s = state_bytes_per_request(load_model_profile(model_dir).kv_layout.mamba, 1)  # type: ignore[union-attr]
    cell = 4 * 8 * 128 * 2 * 2  # 4 attention layers x 8 KV heads x 128 x (K + V) x bf16
    assert by[8] - by[256] == pytest.approx(248 * s / cell, abs=2)


def test_the_benchmark_prints_predicted_against_the_rule(capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/hybrid_state_pool.py: every launch of both classes within 5 % of SGLang's rule, the
    simulated server's pool the predictor's, and the radix-off pool growing as --max-running-requests falls."""
    assert bench.main(["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"nemotron-h-8b-class", "qwen3-next-80b-class"}
    for rows in out.values():
        assert all(abs(r["err_pct"]) < 5 and r["predicted"] == r["simulated"] for r in rows)
        off = {r["mrr"]: r["predicted"] for r in rows if not r["radix"]}
        assert off[8] > off[32] > off[256]
        assert len({r["predicted"] for r in rows if r["radix"]}) == 1
