"""The speed model's structure (issue 32), as behaviour: an MTP checkpoint drafts with its NextN head, GPU kinds
differ in what they achieve, a MoE decode step costs more than its weight read as the batch grows, FP8 GEMMs run
at the FP8 peak, the overlap scheduler and the request path delay admission, a chunk attends to earlier chunks.
Never a timing of the test itself."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from autotune.sglang.hardware.gpus import GPUS, get_gpu
from autotune.sglang.knobs.config import SpeculativeConfig
from autotune.sglang.models.profile import load_model_profile
from autotune.sim.engine.core import Engine
from autotune.sim.hardware import load_draft
from autotune.sim.perf.gpu import FP8_GEMM_RELATIVE, GPU_SPEED, gemm_peak_factor, gemm_speed_factor, gpu_speed
from autotune.sim.perf.knobs import KnobSpeed
from autotune.sim.perf.model import PerfInputs, PerfModel

ROOT = Path(__file__).resolve().parents[1]
DSV3 = ROOT / "tests" / "data" / "public_logs" / "ktransformers-1804-dsv3-kt-tp2"  # DeepSeek-V3's config.json
LLAMA = ROOT / "studies" / "models" / "llama-3.1-70b-class"
MTP_1_1_2 = SpeculativeConfig("EAGLE", None, 1, 1, 2)


@pytest.fixture(scope="module")
def dsv3() -> Any:
    return load_model_profile(DSV3)


@pytest.fixture(scope="module")
def llama() -> Any:
    return load_model_profile(LLAMA)


def perf(model: Any, gpu: str = "h200", tp: int = 8, **kw: Any) -> PerfModel:
    args: dict[str, Any] = dict(model=model, gpu=get_gpu(gpu), tp_size=tp, interconnect="nvlink",
                                cuda_graph_max_bs=256, custom_allreduce_active=True)
    args.update(kw)
    return PerfModel(PerfInputs(**args))


def tpot(p: PerfModel, batch: int, ctx_per_req: int = 1500) -> float:
    return p.decode_step_time_s(batch, batch * ctx_per_req) / p.accepted_tokens_per_step(batch)


# --- MTP: the draft is the checkpoint's NextN head --------------------------------------------


def test_an_mtp_checkpoint_drafts_with_its_nextn_head(dsv3: Any) -> None:
    draft = load_draft(MTP_1_1_2, dsv3)
    assert draft is not None
    assert draft.num_layers == dsv3.num_nextn_predict_layers == 1
    assert draft.path == dsv3.path  # how the memory plan recognises an MTP draft
    # one layer, eh_proj and the shared LM head: a few percent of the target, not the whole of it
    assert draft.weight_bytes < dsv3.weight_bytes / 20
    assert draft.weight_bytes > dsv3.hidden_size * dsv3.vocab_size  # it does read the LM head


def test_deepseek_mtp_gains_at_batch_1_and_32(dsv3: Any) -> None:
    base = perf(dsv3)
    mtp = perf(dsv3, speculative=MTP_1_1_2, draft=load_draft(MTP_1_1_2, dsv3))
    for batch in (1, 32):
        assert tpot(mtp, batch) < tpot(base, batch)
    # a whole-target draft (what the simulator did before) makes MTP a loss
    whole = perf(dsv3, speculative=MTP_1_1_2, draft=dsv3)
    assert tpot(whole, 1) > tpot(base, 1)


# --- per-GPU achievable figures ------------------------------------------------------------------


def test_gpu_kinds_have_their_own_achievable_figures_each_with_its_provenance() -> None:
    assert gpu_speed(get_gpu("h20")).attention != gpu_speed(get_gpu("h100")).attention
    assert gpu_speed(get_gpu("rtx-pro-6000")).hbm != gpu_speed(get_gpu("h200")).hbm
    for name, row in GPU_SPEED.items():
        assert name in GPUS
        assert row.kind.split()[0] in ("published", "modelled", "fitted") and row.source
        assert 0 < row.hbm <= 1 and 0 < row.gemm <= 1 and 0 < row.prefill <= 1 and 0 < row.attention <= 1


def test_mla_decode_attention_is_compute_bound_on_h20_not_on_h200(dsv3: Any) -> None:
    for gpu, bound in (("h20", True), ("h200", False)):
        t = perf(dsv3, gpu).target
        ctx = 32 * 2000
        kv_read = ctx * t.kv_token_bytes / t.bw
        assert (t.attention_s(ctx, 2) > kv_read * 1.01) is bound


def test_fp8_checkpoints_compute_at_the_fp8_peak_where_the_gpu_has_one(dsv3: Any, llama: Any) -> None:
    assert dsv3.quant_method == "fp8"
    assert gemm_peak_factor(dsv3, get_gpu("h100")) == 2.0
    assert gemm_peak_factor(dsv3, get_gpu("a100-80")) == 1.0  # no FP8 tensor cores
    assert gemm_peak_factor(llama, get_gpu("h100")) == 1.0


def test_fp8_prefill_gains_less_than_the_datasheets_2x() -> None:
    """GPUStack's Qwen3-14B on one H100 (a fitted set): FP8's median TTFT 1.24x lower than BF16's, not 2x."""
    models = ROOT / "tests" / "data" / "published_speed" / "models"
    bf16, fp8 = (load_model_profile(models / name) for name in ("qwen--qwen3-14b", "qwen--qwen3-14b-fp8"))
    assert gemm_speed_factor(fp8, get_gpu("h100")) == pytest.approx(2.0 * FP8_GEMM_RELATIVE)
    assert gemm_speed_factor(fp8, get_gpu("a100-80")) == 1.0  # no FP8 tensor cores: nothing to discount
    gain = perf(bf16, "h100", tp=1).prefill_time_s(8192, 4) / perf(fp8, "h100", tp=1).prefill_time_s(8192, 4)
    assert 1.0 < gain < 1.6  # faster, as measured, and far from the datasheets' 2x


def test_every_w8a8_fp8_method_quantises_activations_and_marlin_on_a100_does_not() -> None:
    """The small-kernel floors count an activation quantisation per GEMM wherever the GEMMs run FP8 x FP8 (every
    W8A8 FP8 method, not only block FP8), and none where an FP8 checkpoint runs weight-only (Marlin on A100:
    SGLang 0.5.9 fp8.py:240-244, 582), as the GEMM speed already did."""
    models = ROOT / "tests" / "data" / "published_speed" / "models"
    bf16, fp8 = (load_model_profile(models / name) for name in ("qwen--qwen3-14b", "qwen--qwen3-14b-fp8"))
    w8a8 = dataclasses.replace(fp8, quant_method="w8a8_fp8")
    on = {name: perf(m, "h100", tp=1).target for name, m in (("bf16", bf16), ("fp8", fp8), ("w8a8", w8a8))}
    assert on["fp8"].small_graph_s > on["bf16"].small_graph_s
    assert on["w8a8"].small_graph_s == pytest.approx(on["fp8"].small_graph_s)
    a100 = {name: perf(m, "a100-80", tp=1).target for name, m in (("bf16", bf16), ("fp8", fp8))}
    assert a100["fp8"].small_graph_s == pytest.approx(a100["bf16"].small_graph_s)
    assert not a100["fp8"].fp8_quant and on["w8a8"].fp8_quant


# --- MoE decode: costs beyond the weight read that grow with the batch ---------------------------


def test_moe_decode_step_grows_with_batch_beyond_the_weight_read(dsv3: Any) -> None:
    p = perf(dsv3)
    beyond = []
    for batch in (8, 32, 128, 256):
        step = p.decode_step_time_s(batch, 0)
        beyond.append(step - p.target.weight_read_s(batch))
    assert all(b > a for a, b in zip(beyond, beyond[1:], strict=False))
    assert p.target.moe_act_bytes_per_token > 0  # the fused MoE kernel's caches: more tokens, more traffic
    # a graph-replayed decode step has per-layer costs of its own, even at batch 1
    assert p.decode_step_time_s(1, 0) > 2 * p.target.weight_read_s(1)


def test_moe_experts_compute_padded_rows_at_small_batch(dsv3: Any) -> None:
    t = perf(dsv3).target
    # 8 tokens touch ~62 experts: each pads its rows to the kernel's block, far above 8 x top-k rows
    dense = 2.0 * t.dense_params * 8 / (t.gemm_flops * 0.5)
    experts = t.compute_s(8, 8, 0.5) - dense
    unpadded = 2.0 * t.expert_params * 8 * t.topk / (t.gemm_flops * 0.5)
    assert experts > 3 * unpadded
    # at a large batch every expert's rows are mostly real: padding adds little
    dense = 2.0 * t.dense_params * 4096 / (t.gemm_flops * 0.5)
    experts = t.compute_s(4096, 4096, 0.5) - dense
    assert experts < 1.1 * 2.0 * t.expert_params * 4096 * t.topk / (t.gemm_flops * 0.5)


def test_deepep_all_to_all_replaces_the_moe_allreduce(dsv3: Any) -> None:
    plain = perf(dsv3, knobs=KnobSpeed(ep_size=8))
    a2a = perf(dsv3, knobs=KnobSpeed(ep_size=8, moe_a2a="deepep"))
    assert plain.target.moe_comm_s(64) == 0.0 < a2a.target.moe_comm_s(64)
    assert a2a.target.moe_comm_s(256) > a2a.target.moe_comm_s(64)


def _floors(model: Any, gpu: str, graph: bool, **kw: Any) -> float:
    """A decode forward at batch 8 of ``model`` less the same forward with no shared experts: same weights, so
    only the shared experts' kernel floors can differ."""
    def busy(m: Any) -> float:  # the GPU's busy time (eager, the CPU's launch would hide it)
        t = perf(m, gpu, **kw).target
        return t.gpu_s(8, 8 * 1500, captured=graph, efficiency=t.speed.gemm)

    return busy(model) - busy(replace(model, shared_experts=0))


def test_shared_experts_cost_no_floor_where_sglang_fuses_or_overlaps_them(dsv3: Any) -> None:
    assert dsv3.shared_experts == 1
    kimi_like = replace(dsv3, num_experts=384)  # DeepSeek's architecture, not fused: a second stream on CUDA
    # NVIDIA, replayed: fused (DeepSeek-V3, 256 + 1) or on the other stream (the rest): no floor of their own
    assert _floors(dsv3, "h200", graph=True) == pytest.approx(0.0, abs=1e-9)
    assert _floors(kimi_like, "h200", graph=True) == pytest.approx(0.0, abs=1e-9)
    # eager on NVIDIA: the fused ones still cost nothing, the others their activation, GEMMs and quantisations
    assert _floors(dsv3, "h200", graph=False) == pytest.approx(0.0, abs=1e-9)
    assert _floors(kimi_like, "h200", graph=False) > 0.0
    # with EP, SGLang does not fuse DeepSeek-V3's shared expert: eager it pays, replayed it overlaps
    assert _floors(dsv3, "h200", graph=False, knobs=KnobSpeed(ep_size=8)) > 0.0
    assert _floors(dsv3, "h200", graph=True, knobs=KnobSpeed(ep_size=8)) == pytest.approx(0.0, abs=1e-9)
    # AMD has no second stream: DeepSeek-V3 fuses there (gfx942+), a 384-expert model pays replayed too
    assert _floors(dsv3, "mi300x", graph=True) == pytest.approx(0.0, abs=1e-9)
    assert _floors(kimi_like, "mi300x", graph=True) > 0.0


def test_moe_without_shared_experts_pays_no_shared_expert_kernels() -> None:
    models = ROOT / "tests" / "data" / "published_speed" / "models"
    qwen_moe = load_model_profile(models / "qwen--qwen3-235b-a22b-instruct-2507")
    qwen_next = load_model_profile(models / "qwen--qwen3-next-80b-a3b-instruct")
    assert qwen_moe.shared_experts == 0  # Qwen3-MoE has none
    assert qwen_next.shared_experts == 1  # Qwen3-Next: one, given as shared_expert_intermediate_size
    with_one = replace(qwen_moe, shared_experts=1)
    assert _floors(with_one, "mi300x", graph=True) > 0.0  # what the former count charged every MoE model


def test_mla_normalises_q_and_kv_on_two_streams_when_replayed(dsv3: Any) -> None:
    on_h200, on_mi300x = perf(dsv3, "h200").target, perf(dsv3, "mi300x").target
    floor = on_h200.speed.kernel_floor_s
    # eager, the two normalisations follow each other on both; replayed on CUDA one is beside the other
    assert on_h200.small_s - on_h200.small_graph_s == pytest.approx(dsv3.num_layers * floor)
    assert on_mi300x.small_s == pytest.approx(on_mi300x.small_graph_s)


# --- TTFT: scheduling, the request path, chunked prefill -----------------------------------------


class StepPerf:
    """Fixed step times; ``overlap`` and ``request_path_s`` as PerfModel exposes them."""

    def __init__(self, overlap: bool, path_s: float) -> None:
        self.overlap = overlap
        self.request_path_s = path_s

    def prefill_time_s(self, num_tokens: int, batch_reqs: int, attn_pairs: float | None = None) -> float:
        return 0.004

    def decode_step_time_s(self, batch_size: int, context_tokens: int) -> float:
        return 0.010

    def accepted_tokens_per_step(self, batch_size: int) -> float:
        return 1.0


def _ttft_of_a_request_sent_at_a_step_end(overlap: bool, path_s: float) -> float:
    engine = Engine(StepPerf(overlap, path_s), kv_tokens=100_000, max_running_requests=64,
                    chunked_prefill_size=8192, time_scale=1.0, seed=0)
    engine.submit("a", 100, 50)
    for _ in range(3):  # a's prefill and two decode steps
        assert engine.step_once() is not None
    b = engine.submit("b", 100, 5)
    sent = engine.modelled_now()
    while b.first_token_s is None:
        engine.step_once()
    return b.first_token_s - sent


def test_the_overlap_scheduler_and_the_request_path_delay_admission() -> None:
    immediate = _ttft_of_a_request_sent_at_a_step_end(False, 0.0)
    no_overlap = _ttft_of_a_request_sent_at_a_step_end(False, 1e-3)
    overlap = _ttft_of_a_request_sent_at_a_step_end(True, 1e-3)
    assert immediate == pytest.approx(0.004)  # its prefill right away
    assert no_overlap == pytest.approx(0.010 + 0.004)  # missed the batch decided at the step end: one decode step
    assert overlap == pytest.approx(2 * 0.010 + 0.004)  # the next batch was decided a step earlier: two


def test_an_idle_engine_takes_a_request_once_it_reaches_the_scheduler() -> None:
    engine = Engine(StepPerf(True, 1e-3), kv_tokens=100_000, max_running_requests=64, chunked_prefill_size=8192,
                    time_scale=1.0, seed=0)
    a = engine.submit("a", 100, 3)
    while a.first_token_s is None:
        engine.step_once()
    assert a.first_token_s == pytest.approx(1e-3 + 0.004)


def test_speculative_decoding_turns_the_overlap_scheduler_off(dsv3: Any) -> None:
    draft = load_draft(MTP_1_1_2, dsv3)
    assert perf(dsv3).overlap
    assert not perf(dsv3, speculative=MTP_1_1_2, draft=draft).overlap
    assert perf(dsv3, speculative=MTP_1_1_2, draft=draft, knobs=KnobSpeed(spec_v2=True)).overlap
    assert not perf(dsv3, knobs=KnobSpeed(overlap=False)).overlap


def test_a_later_chunk_attends_to_its_earlier_chunks(llama: Any) -> None:
    p = perf(llama, "h100", 4)
    first = p.prefill_time_s(8192, 1, attn_pairs=8192 * 8192 / 2)
    third = p.prefill_time_s(8192, 1, attn_pairs=8192 * (2 * 8192 + 8192 / 2))
    assert third > first * 1.1
    assert p.prefill_time_s(8192, 1) == pytest.approx(first)


def test_amd_kinds_stream_routed_experts_at_their_own_fitted_share(dsv3: Any) -> None:
    """ROCm runs other MoE kernels than CUDA's Triton fused MoE: the experts' share is fitted per vendor, and an
    AMD kind without a row of its own takes AMD's share, not NVIDIA's."""
    from autotune.sim.perf import gpu as perf_gpu

    assert gpu_speed(get_gpu("mi300x")).moe == perf_gpu.MOE_SHARE_AMD
    assert gpu_speed(get_gpu("mi355x")).moe == perf_gpu.MOE_SHARE_AMD  # no row: the default row, AMD's share
    assert gpu_speed(get_gpu("h200")).moe == gpu_speed(get_gpu("b200")).moe == perf_gpu.MOE_SHARE
    assert perf_gpu.MOE_SHARE != perf_gpu.MOE_SHARE_AMD
    # as behaviour: the expert read of a MoE decode step follows the kind's share
    amd, slower = perf(dsv3, gpu="mi300x").target, perf(dsv3, gpu="mi300x").target
    assert amd.speed.moe == perf_gpu.MOE_SHARE_AMD
    slower.speed = replace(amd.speed, moe=amd.speed.moe / 2)
    assert slower.weight_read_s(64) > amd.weight_read_s(64)


def test_fitted_constants_were_fitted_on_fitted_sets_only() -> None:
    import yaml

    from autotune.sim.perf import fitted as perf_fitted

    data = ROOT / "tests" / "data" / "published_speed"
    held = {h["id"] for h in yaml.safe_load((data / "holdout.yaml").read_text())["holdout"]}
    assert perf_fitted.FITTED_SETS and not held & set(perf_fitted.FITTED_SETS)
    assert set(perf_fitted.FP8_SETS) <= set(perf_fitted.FITTED_SETS)
    assert perf_fitted.AMD_MOE_SETS and not set(perf_fitted.AMD_MOE_SETS) & set(perf_fitted.MOE_SETS)
    assert set(perf_fitted.AMD_MOE_SETS) | set(perf_fitted.MOE_SETS) <= set(perf_fitted.FITTED_SETS)
    assert all((data / f"{sid}.yaml").exists() for sid in perf_fitted.FITTED_SETS)
    assert set(perf_fitted.GPU_SETS) <= set(GPU_SPEED)  # every kind whose HBM share was fitted has its row
    for kind, sets in perf_fitted.GPU_SETS.items():
        assert GPU_SPEED[kind].kind == "fitted" and len(sets) >= perf_fitted.MIN_SETS_PER_GPU


# --- DSA (DeepSeek-V3.2): the indexer runs replicated on every attention-TP rank -----------------

V32 = ROOT / "tests" / "data" / "published_speed" / "models" / "deepseek-ai--deepseek-v3.2"


@pytest.fixture(scope="module")
def v32() -> Any:
    return load_model_profile(V32)


def _dp_attention_gain(model: Any, batch: int = 1024, ctx_per_req: int = 1500) -> float:
    """Decode throughput of TP 8 with DP attention over 8 ranks, over pure TP 8, at one high load."""
    tp = perf(model, cuda_graph_max_bs=512)
    dp = perf(model, cuda_graph_max_bs=512, knobs=KnobSpeed(attn_dp=8))
    return tpot(tp, batch, ctx_per_req) / tpot(dp, batch, ctx_per_req)


def test_dsa_indexer_makes_dp_attention_beat_pure_tp_and_leaves_other_models_alone(v32: Any, dsv3: Any) -> None:
    assert v32.family == "dsa" and v32.index_n_heads == 64 and v32.index_topk == 2048
    no_indexer = replace(v32, family="mla", index_n_heads=0, index_topk=0)  # the same model read as plain MLA
    # (contexts under index_topk: the sparse MLA reads what the dense one does, the indexer is the difference)
    # pure TP: every rank indexes the whole batch; DP attention: its own requests only
    assert _dp_attention_gain(v32) > 1.0
    assert _dp_attention_gain(v32) > _dp_attention_gain(no_indexer)  # its size: the indexer's own term, below
    assert perf(v32).target.indexer_s(1024, 1024 * 3000, 1, 0.4) > 2 * perf(
        v32, knobs=KnobSpeed(attn_dp=8)).target.indexer_s(1024, 1024 * 3000, 1, 0.4)
    # a model without an indexer: no indexer term, its steps exactly what they were
    assert dsv3.family != "dsa" and dsv3.index_n_heads == 0
    p = perf(dsv3)
    assert not p.target.dsa and p.target.indexer_s(1024, 1024 * 3000, 1, 0.4) == 0.0
    assert p.target.attended_context(64, 64 * 20_000, 1) == 64 * 20_000


def test_dsa_decode_attends_to_at_most_index_topk_keys_per_sequence(v32: Any) -> None:
    p = perf(v32)
    assert p.target.attended_context(64, 64 * 20_000, 1) == 64 * 2048
    assert p.target.attended_context(64, 64 * 1000, 1) == 64 * 1000
    plain = perf(replace(v32, family="mla", index_n_heads=0, index_topk=0))
    # past index_topk the sparse MLA's read stops growing with the context (the indexer's own read still grows)
    grow_dsa = tpot(p, 64, 32_000) - tpot(p, 64, 16_000)
    grow_mla = tpot(plain, 64, 32_000) - tpot(plain, 64, 16_000)
    assert grow_dsa < grow_mla / 2


def test_an_mtp_draft_of_a_dsa_model_indexes_its_own_layers_only(v32: Any) -> None:
    head = perf(v32).target.index_params_per_token
    draft = PerfModel(PerfInputs(model=v32, gpu=get_gpu("b200"), tp_size=8, interconnect="nvlink",
                                 speculative=MTP_1_1_2, cuda_graph_max_bs=64)).draft
    assert draft is not None and draft.dsa
    assert draft.index_params_per_token == pytest.approx(head / v32.num_layers)


# --- DP attention: graphs and prefill chunks are per rank ---------------------------------------------


def test_dp_attention_replays_a_graph_keyed_on_each_ranks_batch(dsv3: Any) -> None:
    dp = perf(dsv3, cuda_graph_max_bs=256, knobs=KnobSpeed(attn_dp=8))
    eager = perf(dsv3, cuda_graph_max_bs=256, cuda_graph_enabled=False, knobs=KnobSpeed(attn_dp=8))
    # 1000 requests over 8 ranks: 125 a rank, under the 256 captured: replayed, not launched eagerly
    assert dp.decode_step_time_s(1000, 1000 * 1500) < eager.decode_step_time_s(1000, 1000 * 1500)
    tp = perf(dsv3, cuda_graph_max_bs=256)
    eager_tp = perf(dsv3, cuda_graph_max_bs=256, cuda_graph_enabled=False)
    assert tp.decode_step_time_s(1000, 1000 * 1500) == pytest.approx(eager_tp.decode_step_time_s(1000, 1000 * 1500))


def test_each_dp_attention_rank_admits_its_own_prefill_chunk() -> None:
    from autotune.sim.args import parse_args
    from autotune.sim.engine.factory import build_engine
    from autotune.sim.hardware import plan_memory, resolve_speculative

    base = f"--model-path {ROOT / 'studies' / 'models' / 'kimi-k2-class'} --tp-size 8 --sim-gpu h200 " \
           "--sim-interconnect nvlink --sim-sglang-version 0.5.9"
    for extra, ranks in (("", 1), ("--enable-dp-attention --dp-size 8", 8)):
        launch, sim = parse_args(f"{base} {extra}".split())
        model = load_model_profile(launch.model_path)
        draft = load_draft(resolve_speculative(launch, model, sim.version), model)
        plan = plan_memory(launch, model, draft, sim.gpu, version=sim.version, interconnect=sim.interconnect)
        assert plan.chunked_prefill_size == 8192 // ranks  # SGLang's per-rank chunk under DP attention
        engine = build_engine(plan, launch, sim, model)
        assert engine.chunked_prefill_size == 8192  # one chunk per rank in each step


def test_each_dp_attention_rank_schedules_only_its_own_requests(dsv3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every GPU runs a scheduler: under pure TP each one handles the whole batch, under DP attention each one
    its rank's requests, so the per-request scheduler cost a step adds is the largest rank's share."""
    from autotune.sim.perf import model as perf_model

    def per_request_cost(knobs: KnobSpeed) -> float:
        p = perf(dsv3, cuda_graph_max_bs=512, knobs=knobs)
        monkeypatch.setattr(perf_model, "STEP_PER_REQ_S", 0.0)
        base = p.decode_step_time_s(256, 256 * 1500)
        monkeypatch.setattr(perf_model, "STEP_PER_REQ_S", 1e-3)
        return p.decode_step_time_s(256, 256 * 1500) - base

    assert per_request_cost(KnobSpeed()) == pytest.approx(0.256)  # 256 requests x 1 ms
    assert per_request_cost(KnobSpeed(attn_dp=8)) == pytest.approx(0.032)  # 32 a rank


def test_an_mla_layer_launches_eagerly_slower_than_a_gqa_one_and_a_dsa_layer_slower_still(v32: Any, dsv3: Any) -> None:
    """The eager launch per layer (prefill, and decode past cuda_graph_max_bs): DSA > MLA > the same MoE read as
    GQA; what the published TTFT at concurrency 1 showed (forward.EAGER_CPU_MLA_EXTRA_S)."""
    def per_layer(model: Any) -> float:
        return perf(model).target.eager_cpu / model.num_layers

    assert per_layer(v32) > per_layer(dsv3) > per_layer(replace(dsv3, is_mla=False))


def test_pure_tp_decodes_past_its_cuda_graphs_eagerly_where_each_dp_attention_rank_stays_in_them(v32: Any) -> None:
    """GPUStack's DeepSeek-V3.2 on 8 x H200 (1,000 requests at once; held out): pure TP 8 runs a batch past its
    512-request graphs eagerly, CPU-bound on V3.2's launches, while each DP-attention rank holds 125 and replays."""
    tp = perf(v32, cuda_graph_max_bs=512)
    dp = perf(v32, cuda_graph_max_bs=512, knobs=KnobSpeed(attn_dp=8))
    ctx = 400  # ShareGPT's requests: about 220 tokens in, 200 out
    tp_jump = tp.decode_step_time_s(1000, 1000 * ctx) / tp.decode_step_time_s(512, 512 * ctx)
    dp_jump = dp.decode_step_time_s(1000, 1000 * ctx) / dp.decode_step_time_s(512, 512 * ctx)
    assert tp_jump > 2.5 > 1.3 > dp_jump
    assert tp.decode_step_time_s(1000, 1000 * ctx) > 2.5 * dp.decode_step_time_s(1000, 1000 * ctx)
