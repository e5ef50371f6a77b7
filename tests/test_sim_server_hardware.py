"""The simulated server's memory truth (autotune.sim.hardware), without starting a process."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.sglang.models.profile import load_model_profile
from autotune.sim.args import parse_args
from autotune.sim.hardware import GIB, MIB, MemoryPlan, load_draft, plan_memory, resolve_speculative

MODELS = Path(__file__).resolve().parents[1] / "studies" / "models"
SEED = f"--model-path {MODELS / 'kimi-k2-class'} --tp-size 8 --sim-gpu rtx-pro-6000 --sim-interconnect pcie"


def plan(extra: str = "", base: str = SEED, version: str = "0.5.9") -> MemoryPlan:
    launch, sim = parse_args(f"{base} {extra} --sim-sglang-version {version}".split())
    model = load_model_profile(launch.model_path)
    draft = load_draft(resolve_speculative(launch, model, sim.version), model)
    return plan_memory(launch, model, draft, sim.gpu, version=sim.version, interconnect=sim.interconnect)


def test_seed_case_p_a_and_tokens() -> None:
    p = plan("--mem-fraction-static 0.88")
    assert p.p_gib == pytest.approx(94.00, abs=0.005)
    assert p.a_gib == pytest.approx(21.71, abs=0.005)
    assert p.cell_bytes == 70_272
    assert abs(p.kv_tokens - 159_277) / 159_277 < 0.005
    assert p.fails_at is None and p.prefill_oom_tokens is None
    assert not p.custom_ar_active and any("more than two PCIe-only GPUs" in w for w in p.warnings)


def test_seed_case_auto_fraction_and_055() -> None:
    auto = plan()
    assert auto.f == 0.848 and auto.f_is_auto
    low = plan("--mem-fraction-static 0.55")
    assert low.fails_at == "kv_tokens" and low.rest_gib == pytest.approx(21.71 - 94 * 0.45, abs=0.01)
    assert plan("--mem-fraction-static 0.55", version="0.5.23").fails_at == "kv_rest"


def test_custom_allreduce_costs_buffers_only_when_active() -> None:
    # PCIe TP8: auto-disabled, so disabling it explicitly changes nothing.
    assert plan().p_gib == plan("--disable-custom-all-reduce").p_gib
    h100 = f"--model-path {MODELS / 'llama-3.1-70b-class'} --tp-size 8 --sim-gpu h100 --sim-interconnect nvlink"
    on, off = plan(base=h100), plan("--disable-custom-all-reduce", base=h100)
    assert on.custom_ar_active and not off.custom_ar_active
    assert (off.p_gib - on.p_gib) * GIB == pytest.approx(24 * MIB)


def test_torch_symm_mem_needs_multicast() -> None:
    h100 = f"--model-path {MODELS / 'llama-3.1-70b-class'} --tp-size 8 --sim-gpu h100 --sim-interconnect nvlink"
    on, off = plan("--enable-torch-symm-mem", base=h100), plan(base=h100)
    assert on.torch_symm_active and (off.p_gib - on.p_gib) * GIB == pytest.approx(128 * MIB)
    pcie = plan("--enable-torch-symm-mem")
    assert not pcie.torch_symm_active and pcie.p_gib == plan().p_gib
    assert any("Device capability 12.0 not supported" in w for w in pcie.warnings)  # RTX Blackwell, SM120
    h100_pcie = plan("--enable-torch-symm-mem", base=h100.replace("nvlink", "pcie"))
    assert not h100_pcie.torch_symm_active
    assert any("multicast operations are not supported" in w for w in h100_pcie.warnings)


def test_slack_consumers() -> None:
    base = plan("--mem-fraction-static 0.85")
    symm = plan("--mem-fraction-static 0.85 --enable-symm-mem")
    assert base.final_free_gib - symm.final_free_gib == pytest.approx(4.0)
    fused = plan("--mem-fraction-static 0.85 --enable-flashinfer-allreduce-fusion")
    assert fused.fi_fusion_active and fused.fi_fusion_gib * 1024 == pytest.approx(896, rel=0.01)
    small = plan("--mem-fraction-static 0.85 --cuda-graph-max-bs 128")
    assert len(small.graph_bs) < len(base.graph_bs) and small.graph_gib < base.graph_gib
    assert plan("--mem-fraction-static 0.85 --disable-cuda-graph").graph_gib == 0.0


def test_failure_points_move_with_fraction() -> None:
    assert plan("--mem-fraction-static 0.98").fails_at == "graph"
    # decode graphs of ~7.4 GiB at bs 512 (the published ~6 GB at bs 256) leave the prefill short from 0.89 up
    risky = plan("--mem-fraction-static 0.90")
    assert risky.fails_at is None and risky.prefill_oom_tokens is not None
    assert risky.prefill_oom_tokens < risky.chunked_prefill_size
    # a smaller chunk fits where the default chunk does not
    assert plan(f"--mem-fraction-static 0.90 --chunked-prefill-size {risky.prefill_oom_tokens // 2}").prefill_oom_tokens is None


def test_draft_weights_regime_a_slack_vs_regime_b_budget() -> None:
    eagle = f"--speculative-algorithm EAGLE3 --speculative-draft-model-path {MODELS / 'kimi-k2-class-eagle3'}"
    a = plan(f"--mem-fraction-static 0.85 {eagle}", version="0.5.9")
    b = plan(f"--mem-fraction-static 0.85 {eagle}", version="0.5.23")
    plain = plan("--mem-fraction-static 0.85", version="0.5.9")
    assert a.w_gib == pytest.approx(plain.w_gib) and a.draft_weights_gib > 0 and a.draft_kv_gib > 0
    assert b.w_gib > plain.w_gib and b.draft_weights_gib == 0
    assert a.speculative.num_draft_tokens == 4 and a.max_running_requests == 48
    assert max(a.graph_bs) <= 48


H200 = f"--model-path {MODELS / 'kimi-k2-class'} --tp-size 8 --sim-gpu h200 --sim-interconnect nvlink"


def test_deepseek_class_decode_graphs_cost_the_published_6_gb_at_bs_256() -> None:
    # "DeepSeek uses 6GB" for the decode graph, bs 256, H200 TP 8 (SGLang PR #5893, issue #16143): +-10 %
    p = plan("--mem-fraction-static 0.8 --cuda-graph-max-bs 256", base=H200)
    assert len(p.graph_bs) == 36 and max(p.graph_bs) == 256
    assert p.graph_gib * GIB == pytest.approx(6e9, rel=0.10)


def test_decode_graph_memory_grows_with_max_bs_sizes_and_model_size() -> None:
    by_bs = [plan(f"--mem-fraction-static 0.8 --cuda-graph-max-bs {bs}", base=H200).graph_gib for bs in (64, 128, 256, 512)]
    assert by_bs == sorted(by_bs) and by_bs[-1] > 1.2 * by_bs[-2]
    sizes = plan("--mem-fraction-static 0.8 --cuda-graph-bs 1 2 4 8 16 32 64 128 256", base=H200)
    assert max(sizes.graph_bs) == 256 and sizes.graph_gib < by_bs[2]  # same top batch, fewer captured sizes
    dense = plan("--mem-fraction-static 0.8 --cuda-graph-max-bs 256",
                 base=H200.replace("kimi-k2-class", "llama-3.1-70b-class"))
    assert dense.graph_gib < by_bs[2] / 3  # the published multi-GB figures are MoE models (DeepSeek, Llama-4)


def test_predictor_estimates_the_simulators_decode_graphs() -> None:
    from autotune.sglang.knobs.config import ServerConfig
    from autotune.sglang.memory.predictor import predict

    model = load_model_profile(MODELS / "kimi-k2-class")
    for bs in (128, 512):
        truth = plan(f"--mem-fraction-static 0.88 --cuda-graph-max-bs {bs}")
        cfg = ServerConfig(model_path=model.path, tp_size=8, mem_fraction_static=0.88, cuda_graph_max_bs=bs)
        pred = predict(model, "rtx-pro-6000", cfg, version="0.5.9")
        assert pred.slack_parts["graphs"] == pytest.approx(truth.graph_gib, rel=0.01)


def test_prefill_graphs_share_the_decode_pool_from_0_5_22() -> None:
    shared = plan("--mem-fraction-static 0.88", version="0.5.23")
    assert shared.prefill_graphs_on and shared.prefill_graph_gib == 0.0  # MLA's 1 GiB fits in the decode pool
    own = plan("--mem-fraction-static 0.88", version="0.5.14")  # on by default from 0.5.10, own pool
    assert own.prefill_graphs_on and own.prefill_graph_gib > 0.5


def test_dp_attention_pays_sglangs_padding_reserve_at_graph_capture() -> None:
    # SGLang's auto f sets aside max_bs x attention-DP x 3 MiB (+1.5 MiB above max bs 300) for DP
    # attention's padding (0.5.23 arg_groups/memory_hook.py:372-378): the simulated capture uses it.
    def graphs(dp: int, bs: int) -> float:
        p = plan(f"--mem-fraction-static 0.93 --cuda-graph-max-bs-decode {bs} --attn-dp-size {dp}", version="0.5.23")
        return p.graph_gib

    assert graphs(8, 512) - graphs(1, 512) == pytest.approx(512 * 8 * 4.5 * MIB / GIB, abs=1e-6)
    assert graphs(8, 64) - graphs(1, 64) == pytest.approx(64 * 8 * 3 * MIB / GIB, abs=1e-6)
    big = plan("--mem-fraction-static 0.93 --attn-dp-size 8", version="0.5.23")  # automatic max bs 512
    assert big.fails_at == "graph"
    small = plan("--mem-fraction-static 0.93 --cuda-graph-max-bs-decode 64 --attn-dp-size 8", version="0.5.23")
    assert small.fails_at is None
