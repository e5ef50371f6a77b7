"""The memory model against the seed case, the reference's cell sizes, and its slack rules."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.sglang.knobs.config import ServerConfig, SpeculativeConfig
from autotune.sglang.memory.predictor import Calibration, cell_size_bytes, predict
from autotune.sglang.models.profile import ModelProfile, load_model_profile, profile_from_config

MODELS = Path(__file__).resolve().parent.parent / "studies" / "models"
KIMI = load_model_profile(MODELS / "kimi-k2-class")
DRAFT = load_model_profile(MODELS / "kimi-k2-class-eagle3")
LLAMA70 = load_model_profile(MODELS / "llama-3.1-70b-class")
QWEN32 = load_model_profile(MODELS / "qwen3-32b-class")
SEED_CAL = Calibration(p_gib=94.0, a_gib=21.71, source="seed-case")


def _llama8b() -> ModelProfile:
    cfg = json.loads((MODELS / "llama-3.1-70b-class" / "config.json").read_text())
    cfg.update(
        hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336
    )
    return profile_from_config(cfg, path="llama-8b")


def _seed(f: float | None, **kw: object) -> ServerConfig:
    return ServerConfig(model_path=KIMI.path, tp_size=8, mem_fraction_static=f, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "model,tp,dtype,expected",
    [
        ("llama70", 8, "auto", 40960),
        ("llama70", 4, "auto", 81920),
        ("llama70", 16, "auto", 40960),
        ("qwen32", 1, "auto", 262144),
        ("llama8", 1, "auto", 131072),
        ("kimi", 8, "auto", 70272),
        ("kimi", 1, "auto", 70272),
        ("kimi", 8, "fp8_e4m3", 35136),
        ("llama70", 8, "fp8_e5m2", 20480),
    ],
)
def test_cell_sizes(model: str, tp: int, dtype: str, expected: int) -> None:
    m = {"llama70": LLAMA70, "qwen32": QWEN32, "llama8": _llama8b(), "kimi": KIMI}[model]
    assert cell_size_bytes(m, tp_size=tp, kv_cache_dtype=dtype, version="0.5.9") == expected


def test_regime_b_folds_draft_layers_into_cell() -> None:
    a = cell_size_bytes(KIMI, tp_size=8, version="0.5.9", draft=DRAFT, spec_algorithm="EAGLE3")
    b = cell_size_bytes(KIMI, tp_size=8, version="0.5.14", draft=DRAFT, spec_algorithm="EAGLE3")
    assert a == 70272 and b == int(70272 * (1 + 1 / 61))
    assert cell_size_bytes(KIMI, tp_size=8, version="0.5.23", spec_algorithm="NGRAM") == 70272


def test_seed_baseline_fits_with_159368_tokens() -> None:
    p = predict(
        KIMI, "rtx-pro-6000", _seed(0.88), version="0.5.9", num_gpus=8, interconnect="pcie", calibration=SEED_CAL
    )
    assert p.kv_tokens == 159368 == math.floor((21.71 - 94.0 * 0.12) * 2**30 / 70272)
    assert p.verdict == "fits" and not p.should_prune
    assert p.kv_gib == pytest.approx(10.43, abs=1e-6) and p.slack_gib == pytest.approx(11.28, abs=1e-6)
    assert p.reason.startswith("rest = 21.71 - 94.00 x (1 - 0.88) = 10.43 GiB -> 159,368 tokens x 70,272 B")


def test_seed_055_is_kv_oom_with_the_exact_reason() -> None:
    p = predict(
        KIMI, "rtx-pro-6000", _seed(0.55), version="0.5.9", num_gpus=8, interconnect="pcie", calibration=SEED_CAL
    )
    assert p.verdict == "kv_oom" and p.should_prune and p.kv_tokens == 0
    assert p.reason == "rest = 21.71 - 94.00 x (1 - 0.55) = -20.59 GiB < 0; minimum viable mem_fraction_static = 0.769"
    assert p.min_viable_mem_fraction == 0.769
    assert p.min_launchable_mem_fraction == 0.770
    above = predict(KIMI, "rtx-pro-6000", _seed(p.min_launchable_mem_fraction), version="0.5.9", calibration=SEED_CAL)
    assert above.kv_gib > 0 and above.verdict != "kv_oom"


def test_custom_allreduce_does_not_change_a_on_pcie_tp8() -> None:
    on = predict(KIMI, "rtx-pro-6000", _seed(0.88), version="0.5.9", interconnect="pcie", calibration=SEED_CAL)
    off = predict(
        KIMI,
        "rtx-pro-6000",
        _seed(0.88, custom_allreduce=False),
        version="0.5.9",
        interconnect="pcie",
        calibration=SEED_CAL,
    )
    assert on.a_gib == off.a_gib == 21.71


def test_calibrated_a_moves_with_buffers_between_launches() -> None:
    cal = Calibration(p_gib=70.0, a_gib=40.0, tp_size=2, custom_allreduce=False)
    on = predict(
        QWEN32,
        "h100",
        ServerConfig(model_path="q", tp_size=2, mem_fraction_static=0.85),
        version="0.5.9",
        interconnect="nvlink",
        calibration=cal,
    )
    assert on.p_gib == pytest.approx(70.0 - 24 / 1024) and on.a_gib == pytest.approx(40.0 - 24 / 1024)


def test_regime_b_draft_weights_reduce_a_and_regime_a_puts_them_in_slack() -> None:
    spec = SpeculativeConfig("EAGLE3", DRAFT.path, 3, 1, 4)
    b = predict(
        KIMI, "rtx-pro-6000", _seed(0.88, speculative=spec), version="0.5.23", calibration=SEED_CAL, draft=DRAFT
    )
    a = predict(KIMI, "rtx-pro-6000", _seed(0.88, speculative=spec), version="0.5.9", calibration=SEED_CAL, draft=DRAFT)
    draft_gib = DRAFT.weight_bytes / 8 / 2**30
    assert b.a_gib == pytest.approx(21.71 - draft_gib, abs=1e-4) and "draft_weights" not in b.slack_parts
    assert a.a_gib == 21.71 and a.slack_parts["draft_weights"] == pytest.approx(draft_gib, abs=1e-4)
    assert a.slack_parts["draft_kv"] > 0 and b.cell_bytes > a.cell_bytes
    assert a.max_running_requests == 48


def test_symm_mem_takes_four_gib_of_slack_and_can_break_startup() -> None:
    cfg = _seed(0.95, enable_symm_mem=True)
    p = predict(
        KIMI, "rtx-pro-6000", cfg, version="0.5.9", calibration=Calibration(p_gib=94.0, a_gib=21.71, graph_gib=1.0)
    )
    assert p.slack_parts["symm_mem"] == 4.0
    assert p.verdict == "graph_capture_oom" and not p.uncertain and p.should_prune
    assert "slack 94.00 x (1 - 0.95) = 4.70 GiB <" in p.reason


def test_graph_memory_scales_from_calibration() -> None:
    cal = Calibration(p_gib=94.0, a_gib=21.71, graph_gib=1.2, cuda_graph_max_bs=512, tp_size=8)
    big = predict(KIMI, "rtx-pro-6000", _seed(0.88, cuda_graph_max_bs=512), version="0.5.9", calibration=cal)
    small = predict(KIMI, "rtx-pro-6000", _seed(0.88, cuda_graph_max_bs=128), version="0.5.9", calibration=cal)
    assert big.slack_parts["graphs"] == pytest.approx(1.2, abs=1e-3)
    assert 0 < small.slack_parts["graphs"] < big.slack_parts["graphs"]
    assert len(small.graph_batch_sizes) < len(big.graph_batch_sizes) and small.graph_batch_sizes[-1] == 128
    none = predict(KIMI, "rtx-pro-6000", _seed(0.88, disable_cuda_graph=True), version="0.5.9", calibration=cal)
    assert none.slack_parts["graphs"] == 0 and none.graph_batch_sizes == []


def test_uncalibrated_prediction_is_uncertain_and_leans_to_launch() -> None:
    p = predict(KIMI, "rtx-pro-6000", _seed(None), version="0.5.9", num_gpus=8)
    assert p.f == 0.848 and p.f_is_auto and p.uncertain and p.pa_estimated
    assert p.p_gib == pytest.approx(94.0, abs=0.05) and p.a_gib == pytest.approx(p.p_gib - 576.32 / 8 - 0.25, abs=1e-3)
    near = predict(KIMI, "rtx-pro-6000", _seed(0.76), version="0.5.9")
    assert near.verdict == "kv_oom" and near.uncertain and not near.should_prune  # estimated A: too close to call
    far = predict(KIMI, "rtx-pro-6000", _seed(0.55), version="0.5.9")
    assert far.verdict == "kv_oom" and not far.uncertain and far.should_prune


def test_calibration_at_another_tp_is_rescaled() -> None:
    per_gpu8 = LLAMA70.weight_bytes / 8 / 2**30
    cal = Calibration(p_gib=94.0, a_gib=94.0 - per_gpu8 - 0.3, tp_size=8)
    p = predict(
        LLAMA70,
        "rtx-pro-6000",
        ServerConfig(model_path="l", tp_size=4, mem_fraction_static=0.9),
        version="0.5.9",
        calibration=cal,
    )
    assert p.uncertain and any("rescaled" in n for n in p.notes)
    assert p.w_gib == pytest.approx(2 * per_gpu8 + 0.3, abs=1e-3)  # residue learned at TP 8 carried over


def test_auto_f_follows_a_calibration_that_used_the_fallback() -> None:
    cal = Calibration(p_gib=94.0, a_gib=21.71, tp_size=8, mem_fraction_static=0.88, f_is_auto=True)
    p = predict(KIMI, "rtx-pro-6000", _seed(None), version="0.5.9", calibration=cal)
    assert p.f == 0.88 and p.kv_tokens == 159368


def test_max_total_tokens_and_page_size_floor() -> None:
    p = predict(
        KIMI,
        "rtx-pro-6000",
        _seed(0.88, max_total_tokens=100001, extra_args=("--page-size", "64")),
        version="0.5.9",
        calibration=SEED_CAL,
    )
    assert p.kv_tokens == 100001 // 64 * 64


def test_too_few_tokens() -> None:
    p = predict(KIMI, "rtx-pro-6000", _seed(0.77), version="0.5.9", calibration=SEED_CAL, min_tokens=8192)
    assert p.verdict == "too_few_tokens" and p.should_prune and "< 8,192 tokens needed" in p.reason


def test_machine_too_small_is_config_error() -> None:
    with pytest.raises(ConfigError, match="tp_size: 8 x dp_size 2 needs 16 GPUs, the machine has 8"):
        predict(KIMI, "rtx-pro-6000", ServerConfig(model_path="k", tp_size=8, dp_size=2), version="0.5.9", num_gpus=8)


def test_calibration_round_trip_and_from_summary() -> None:
    cal = Calibration.at(
        {"p_gib": 94.0, "a_gib": 21.71, "kv_tokens": 159277, "graph_gib": 1.1},
        _seed(None, cuda_graph_max_bs=512),
        source="trial 0",
        resolved_f=0.88,
    )
    assert cal.f_is_auto and cal.mem_fraction_static == 0.88 and cal.tp_size == 8
    assert Calibration.from_dict(cal.to_dict() | {"unknown": 1}) == cal


def test_prediction_to_dict_is_plain() -> None:
    d = predict(KIMI, "rtx-pro-6000", _seed(0.88), version="0.5.9", calibration=SEED_CAL).to_dict()
    json.dumps(d)
    assert d["verdict"] == "fits" and d["should_prune"] is False and d["kv_tokens"] == 159368


def test_auto_speculative_params_drive_the_verify_graph_estimate() -> None:
    auto = predict(
        KIMI,
        "rtx-pro-6000",
        _seed(0.88, speculative=SpeculativeConfig("EAGLE3", DRAFT.path)),
        version="0.5.23",
        calibration=SEED_CAL,
        draft=DRAFT,
    )
    explicit = predict(
        KIMI,
        "rtx-pro-6000",
        _seed(0.88, speculative=SpeculativeConfig("EAGLE3", DRAFT.path, 3, 1, 4)),
        version="0.5.23",
        calibration=SEED_CAL,
        draft=DRAFT,
    )
    assert auto.slack_parts == explicit.slack_parts and auto.max_running_requests == 48
    wide = predict(
        KIMI,
        "rtx-pro-6000",
        _seed(0.88, speculative=SpeculativeConfig("EAGLE3", DRAFT.path, 7, 1, 8)),
        version="0.5.23",
        calibration=SEED_CAL,
        draft=DRAFT,
    )
    assert wide.slack_parts["graphs"] > explicit.slack_parts["graphs"]


def test_flashinfer_fusion_workspace_auto_on_hopper_only() -> None:
    cal = Calibration(p_gib=130.0, a_gib=58.0)
    h200 = predict(KIMI, "h200", _seed(0.88), version="0.5.9", interconnect="nvlink", calibration=cal)
    assert h200.slack_parts["allreduce_fusion"] == pytest.approx(896 / 1024, abs=1e-3)
    pro = predict(KIMI, "rtx-pro-6000", _seed(0.88), version="0.5.9", calibration=SEED_CAL)
    assert "allreduce_fusion" not in pro.slack_parts
    forced = predict(
        KIMI, "rtx-pro-6000", _seed(0.88, flashinfer_allreduce_fusion=True), version="0.5.9", calibration=SEED_CAL
    )
    assert forced.slack_parts["allreduce_fusion"] > 0 and forced.slack_needed_gib > pro.slack_needed_gib


def test_dp_attention_in_the_memory_model() -> None:
    """DP attention: a bigger MHA cell per rank (attention at TP tp/dp), chunk split, the reserve term in auto f."""
    plain = predict(LLAMA70, "h100", ServerConfig(model_path=LLAMA70.path, tp_size=8), version="0.5.9")
    dp = predict(LLAMA70, "h100", ServerConfig(model_path=LLAMA70.path, tp_size=8, attn_dp_size=8), version="0.5.9")
    assert dp.cell_bytes == 8 * plain.cell_bytes  # 8 KV heads: one per rank at attention TP 8, all 8 at TP 1
    assert dp.chunked_prefill_size == plain.chunked_prefill_size // 8
    assert dp.f < plain.f  # cuda_graph_max_bs x dp x 3 MiB more reserved
    assert any("DP attention 8" in n for n in dp.notes)
    mla_plain = predict(KIMI, "rtx-pro-6000", _seed(0.88), version="0.5.9", calibration=SEED_CAL)
    mla_dp = predict(KIMI, "rtx-pro-6000", _seed(0.88, attn_dp_size=8), version="0.5.9", calibration=SEED_CAL)
    assert mla_dp.cell_bytes == mla_plain.cell_bytes  # latent per rank
    # whole on every rank at attention TP 1 instead of 1/8: q_b, kv_b, o (bf16 in this int4 checkpoint: self_attn
    # is in its quantization ignore list), MLA's absorbed bf16 w_kc/w_vc copies of kv_b, and the embedding;
    # not the q_a/kv_a projections (ReplicatedLinear at any TP) nor the lm_head (all TP without --enable-dp-lm-head)
    per_layer = 1536 * 64 * 192 + 512 * 64 * 256 * 2 + 64 * 128 * 7168
    more_gib = (61 * per_layer + 163840 * 7168) * 2 * (1 - 1 / 8) / 2**30
    assert mla_dp.a_gib == pytest.approx(mla_plain.a_gib - more_gib, abs=0.01)
    assert mla_dp.verdict == "kv_oom"  # 21.71 - 11.30 - 94 x 0.12 < 0: the seed's 0.88 no longer fits
    lm = predict(KIMI, "rtx-pro-6000", _seed(0.95, attn_dp_size=8, flags=(("--enable-dp-lm-head", True),)),
                 version="0.5.9", calibration=SEED_CAL)
    assert lm.a_gib == pytest.approx(mla_dp.a_gib - 163840 * 7168 * 2 * (1 - 1 / 8) / 2**30, abs=0.01)  # lm_head too


def test_the_predictor_charges_dp_attentions_padding_as_the_simulator_does() -> None:
    from autotune.sim.args import parse_args
    from autotune.sim.hardware import plan_memory

    def both(bs: int) -> tuple[object, float]:
        cfg = _seed(0.93, attn_dp_size=8, cuda_graph_max_bs=bs)
        pred = predict(KIMI, "rtx-pro-6000", cfg, version="0.5.23", num_gpus=8, interconnect="pcie")
        launch, sim = parse_args(f"--model-path {KIMI.path} --tp-size 8 --attn-dp-size 8 --mem-fraction-static 0.93 "
                                 f"--cuda-graph-max-bs-decode {bs} --sim-gpu rtx-pro-6000 --sim-interconnect pcie "
                                 "--sim-sglang-version 0.5.23".split())
        return pred, plan_memory(launch, KIMI, None, sim.gpu, version=sim.version, interconnect=sim.interconnect).graph_gib

    big, big_sim = both(512)
    small, small_sim = both(64)
    assert big.verdict == "graph_capture_oom" and small.verdict == "fits"
    # the padding (512 x 8 x 4.5 MiB = 18 GiB at bs 512) is in both; the prediction adds prefill graphs
    assert big.slack_parts["graphs"] - small.slack_parts["graphs"] == pytest.approx(big_sim - small_sim, rel=0.05)
    assert big_sim - small_sim > 18.0 - 1.5
