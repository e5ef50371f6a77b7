"""Roofline of one forward pass on one GPU (private to :mod:`autotune.sim.perf.model`).

The terms are documented in :mod:`autotune.sim.perf.model`'s docstring and ``docs/simulator-speed.md``;
the achievable shares of each GPU kind's datasheet figures live in :mod:`autotune.sim.perf.gpu`.
A forward over ``T`` tokens reading ``C`` tokens of KV costs, on one GPU:

* the larger of the weight read (dense + the experts ``T`` tokens touch), the GEMM compute
  (experts' rows padded to the Triton MoE kernel's block) and the GEMMs' own floors;
* attention: the larger of the KV read and its FLOPs (MLA decode is compute-bound on H20);
* the MoE layers' activation traffic (the fused MoE kernel's intermediate caches);
* every small kernel's floor (norms, rope, KV store, routing, activations);
* the allreduces (:mod:`autotune.sim.perf.comm`), or DeepEP-style dispatch/combine.

CUDA-graph replay costs ``GRAPH_REPLAY_S``; eagerly, CPU launch (``EAGER_CPU_PER_LAYER_S``, more for an
MLA layer and more again for a DSA one) overlaps the GPU and the GPU idles ``EAGER_GAP_PER_LAYER_S`` between
kernels.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from autotune.sglang.hardware.gpus import GpuKind
from autotune.sglang.hardware.rocm import is_rocm
from autotune.sglang.models.dp_attention import attn_tp_weight_bytes
from autotune.sglang.models.sizing import layout_of
from autotune.sim.perf.comm import CommSetup, allreduce_s
from autotune.sim.perf.gpu import gemm_speed_factor, gpu_speed, w8a8_fp8
from autotune.sim.perf.knobs import FP8_GEMM_SPEED, KnobSpeed


class ForwardInputs(Protocol):
    """What a forward pass reads of :class:`autotune.sim.perf.model.PerfInputs` (no import back: no cycle)."""

    @property
    def tp_size(self) -> int: ...
    @property
    def gpu(self) -> GpuKind: ...
    @property
    def kv_cache_dtype_bytes(self) -> int: ...
    @property
    def knobs(self) -> KnobSpeed: ...

GRAPH_REPLAY_S = 40e-6
EAGER_CPU_PER_LAYER_S = {"dense": 150e-6, "moe": 300e-6}
#: An MLA layer launches more eagerly than a GQA one **[fitted on the 13 fitted MLA sets (DeepSeek-V3/R1,
#: Kimi-K2, V3.2-Exp; their ids: docs/simulator-speed.md), benchmarks/sim_speed_fit.py --rounds 1 --only
#: EAGER_CPU_MLA_EXTRA_S EAGER_CPU_DSA_EXTRA_S, grid 0-300 us: loss 0.2662 -> 0.2397]**: SGLang's
#: ``DeepseekV2AttentionMLA`` (models/deepseek_v2.py) issues the q_a / kv_a projections and norms, q_b, the
#: absorbed bmm pair, rope and the MLA kernel's metadata from Python, twice LlamaAttention's kernels
#: (``SMALL_KERNELS`` and ``GEMM_KERNELS`` below: 12 against 6). What showed it: the published TTFT at
#: concurrency 1, a prefill eager launch bounds, was 0.55-0.71x of measured for every MLA model (DeepSeek-R1 on
#: 8 x B200: 141 / 126 / 155 ms measured, 88-110 modelled; Kimi-K2 158 / 161 against 86 / 89) and 0.84-1.40x for
#: the GQA MoE models (GLM-4.6, Qwen3-235B-A22B; Qwen3-Next, a hybrid, 0.53x, is not MLA and not changed).
#: Multiplied by the node's ``eager`` scale like the base (perf/gpu.py: 4, 1 on the seed-calibrated kinds).
EAGER_CPU_MLA_EXTRA_S = 200e-6
#: DSA's lightning indexer adds its own eager launches on every layer (its three projections, k norm, rope, two
#: quantisations, the key store, logits, top-k: ``DSA_INDEX_*`` below) **[fitted on
#: sgl-cookbook-deepseek-v3.2-exp-b200 alone, the one fitted DSA set, grid 0-500 us: loss 0.2397 -> 0.2378]**:
#: V3.2-Exp's TTFT at concurrency 1 on 8 x B200 is 191 ms measured, 89 modelled without either extra. Held out,
#: GPUStack's V3.2 on 8 x H200 shows what it does above ``cuda_graph_max_bs``: pure TP 8 with 1,000 requests at
#: once decodes eagerly, CPU-bound, and DP attention (125 a rank, inside the graphs) is 2.4x faster.
EAGER_CPU_DSA_EXTRA_S = 200e-6
EAGER_GAP_PER_LAYER_S = {"dense": 30e-6, "moe": 50e-6}
#: Kernels per decoder layer that stream no weights, each at least the GPU's kernel floor
#: (perf/gpu.py) **[modelled: counted from SGLang 0.5.9's decode path]**: GQA attention: fused add-RMSNorm,
#: rope, KV store, the decode attention kernel (models/llama.py LlamaAttention). MLA attention (absorbed,
#: models/deepseek_v2.py DeepseekV2AttentionMLA forward_absorb): add-RMSNorm, the q_a and kv_a RMSNorms,
#: the two absorbed bmm (w_kc, w_vc), rope, KV store, the decode attention kernel, the output reshape.
#: Dense MLP: add-RMSNorm, SiLU-and-mul. MoE MLP (layers/moe/fused_moe_triton, topk.py): add-RMSNorm,
#: router GEMM, grouped top-k, moe_align_block_size, SiLU-and-mul, moe_sum_reduce; shared experts add
#: their activation (``SHARED_EXPERT_SMALL_KERNELS``). FP8 checkpoints add a per-token-group activation
#: quantisation before each GEMM.
SMALL_KERNELS = {"gqa": 4, "mla": 9, "dense": 2, "moe": 6}
#: Weight-streaming GEMMs per layer (a GEMM over a few rows costs at least the kernel floor too):
#: qkv + o; MLA's fused q_a/kv_a, q_b, o; dense gate_up + down; MoE: the two grouped GEMMs, and the shared
#: experts' gate_up + down where the model has them (``SHARED_EXPERT_GEMMS``).
GEMM_KERNELS = {"gqa": 2, "mla": 3, "dense": 2, "moe": 2}
SHARED_EXPERT_SMALL_KERNELS = 1
SHARED_EXPERT_GEMMS = 2
#: What a CUDA graph replays off the step's critical path on NVIDIA GPUs **[code: SGLang 0.5.9]**. SGLang gives
#: DeepSeek-family, GLM-4-MoE, Qwen2-MoE and Qwen3-Next models a second CUDA stream (``alt_stream``, only
#: ``_is_cuda``) and, while capturing: runs the shared experts on the main stream beside the router, top-k and
#: routed experts on the other (``DeepseekV2MoE.forward_normal_dual_stream``, models/deepseek_v2.py:591-613;
#: glm4_moe.py:478; qwen2_moe.py:292-298), or fuses them into the routed MoE as one more expert (DeepSeek-V3/R1:
#: ``determine_num_fused_shared_experts``, deepseek_v2.py:2853-2895, on by default on compute capability >= 8.0
#: without EP; on AMD gfx942+ the one place it happens there); either way the shared experts' kernels add no floor
#: to a replayed step. MLA normalises q_a on the main stream beside kv_a on the other
#: (``forward_absorb_prepare``, deepseek_v2.py:1548-1555): one floor less. DSA projects ``q_b`` on the other
#: stream beside the lightning indexer (deepseek_v2.py:1610-1630): q_b's GEMM and its quantisation.
MLA_GRAPH_OVERLAPPED_SMALL_KERNELS = 1
DSA_GRAPH_OVERLAPPED_GEMMS = 1

#: Per forward, outside the layers: the final norm, the logits' gather/processing (the LM head GEMM streams).
HEAD_SMALL_KERNELS = 2
#: The fused MoE kernel pads each expert's rows to its block: BLOCK_SIZE_M 16 for decode-sized batches
#: (the tuned configs in layers/moe/fused_moe_triton/configs/ and get_default_config's M <= E case)
#: **[code]**: at small batch every touched expert computes 16 rows.
MOE_BLOCK_M = 16
#: DeepEP-style all-to-all (--moe-a2a-backend deepep, EP over NVLink): dispatch (FP8) and combine (BF16)
#: at DeepEP's intranode bus bandwidth, 153 / 158 GB/s on H800 NVLink **[published: DeepEP docs/legacy.md,
#: "Normal kernels with NVLink and RDMA forwarding"]**, each with a fixed latency **[modelled]**.
A2A_BUS_BW_GB_S = 155.0
A2A_LATENCY_S = 20e-6
#: DSA (DeepSeek-V3.2's sparse attention, ``family == "dsa"``): the lightning indexer of every DSA layer,
#: per token it serves **[code: SGLang 0.5.9 layers/attention/nsa/nsa_indexer.py]**: its three projections
#: ``wq_b`` (q_lora_rank x heads x dim), ``wk`` (hidden x dim), ``weights_proj`` (hidden x heads) are
#: ``ReplicatedLinear`` (nsa_indexer.py:181-202), whole on every rank, and ``models/deepseek_v2.py`` calls the
#: indexer on each rank's whole batch: under pure TP every rank indexes every request, under DP attention
#: only its own. Decoding computes the FP8 MQA logits of each query over its whole context
#: (``fp8_paged_mqa_logits``: 2 x heads x dim FLOPs per context token, reading the FP8 key + its fp32 scale)
#: and keeps the top ``index_topk``; the extend path skips the logits when no sequence is longer than
#: ``index_topk`` (nsa_indexer.py:957-966). The sparse MLA then attends to at most ``index_topk`` keys per
#: query (nsa_backend.py). Small kernels per layer **[modelled, counted from the same decode path]**: k_norm
#: LayerNorm, rope, the two activation quantisations, the key-cache store, the logits, the top-k.
DSA_INDEX_SMALL_KERNELS = 7
DSA_INDEX_GEMM_KERNELS = 3
DSA_INDEX_KEY_SCALE_BYTES = 4


def _fuses_shared_experts(architecture: str, routed: int, shared: int, nvidia: bool, ep_size: int) -> bool:
    """Whether SGLang 0.5.9 fuses this model's shared experts into its routed MoE, eager or replayed
    **[code]**: DeepSeek-V3/R1 (``DeepseekV3ForCausalLM``, 256 routed, 1 shared) on NVIDIA without EP or on AMD
    gfx942+ (deepseek_v2.py:2853-2895); GLM-4-MoE on NVIDIA without EP (glm4_moe.py:1035-1063). DeepEP and
    other all-to-all backends turn it off; they come with EP here (perf.knobs), so EP stands for them."""
    if architecture == "DeepseekV3ForCausalLM" and routed == 256 and shared == 1:
        return not nvidia or ep_size <= 1
    return architecture in ("Glm4MoeForCausalLM", "GlmMoeDsaForCausalLM") and nvidia and ep_size <= 1


def _mlp_params(model: Any) -> tuple[float, float]:
    """(dense MLP parameters per layer, one routed expert's parameters) multiplied per token."""
    h = model.hidden_size
    if model.num_experts > 0:
        return 0.0, 3.0 * h * model.moe_intermediate_size
    return 3.0 * h * model.intermediate_size, 0.0


def flop_params(model: Any) -> float:
    """Parameters multiplied per token (attention + active MLP + LM head), from the architecture."""
    h = model.hidden_size
    heads = model.num_attention_heads
    if model.is_mla:
        v_dim = getattr(model, "v_head_dim", 128) or 128
        nope = model.head_dim - model.qk_rope_head_dim
        attn = h * heads * model.head_dim + h * (model.kv_lora_rank + model.qk_rope_head_dim)
        attn += model.kv_lora_rank * heads * (nope + v_dim) + heads * v_dim * h
    else:
        attn = 2 * h * heads * model.head_dim + 2 * h * model.num_kv_heads * model.head_dim
    dense, expert = _mlp_params(model)
    mlp = dense + expert * max(model.num_experts_per_tok, 1)
    return float(model.num_layers * (attn + mlp) + h * model.vocab_size)


def attention_flops_per_context_token(model: Any, attn_tp: int) -> float:
    """Decode attention FLOPs one query token spends per context token, all layers, on one GPU.

    MLA decodes absorbed (MQA over the latent): QK over ``kv_lora_rank + rope`` and PV over
    ``kv_lora_rank`` per head (FlashMLA's d=576, dv=512); GQA: QK and PV over ``head_dim`` per query
    head. Query heads are split over the attention-TP group; hybrid models attend on their full
    layers only."""
    heads = model.num_attention_heads / max(attn_tp, 1)
    if model.is_mla:
        per_head = 2.0 * (2 * model.kv_lora_rank + model.qk_rope_head_dim)
        layers = model.num_layers
    else:
        per_head = 4.0 * model.head_dim
        lay = layout_of(model)
        layers = lay.full_layers if lay.family in ("mamba", "swa") and lay.full_layers else model.num_layers
    return heads * per_head * layers


def kv_bytes_per_token(model: Any, tp: int, dtype_bytes: int) -> float:
    """KV bytes per token of context read on one GPU (MLA replicated; GQA heads split over TP). Mamba
    hybrids read KV on their attention layers only, hybrid-SWA models their full layers per context token
    (a window's worth on the others)."""
    if model.is_mla:
        return float((model.kv_lora_rank + model.qk_rope_head_dim) * model.num_layers * dtype_bytes)
    layout = layout_of(model)
    layers = layout.full_layers if layout.family in ("mamba", "swa") else model.num_layers
    heads_per_gpu = max(model.num_kv_heads / tp, 1.0)
    v_dim = getattr(model, "v_head_dim", model.head_dim) or model.head_dim
    return float(heads_per_gpu * (model.head_dim + v_dim) * layers * dtype_bytes)


class Forward:
    """Roofline of one forward pass of one model (target or draft) on one GPU."""

    def __init__(self, model: Any, inputs: ForwardInputs, comm: CommSetup) -> None:
        self.model = model
        self.comm = comm
        tp = inputs.tp_size
        gpu = inputs.gpu
        self.speed = gpu_speed(gpu)
        self.bw = gpu.hbm_tb_s * 1e12 * self.speed.hbm
        self.flops = gpu.bf16_tflops * 1e12  # the BF16 dense peak (attention runs there)
        self.gemm_flops = self.flops * gemm_speed_factor(model, gpu)  # this checkpoint's GEMMs
        e = model.num_experts
        k = max(model.num_experts_per_tok, 1)
        self.moe = e > k
        if self.moe:
            per_expert = max(model.weight_bytes - model.active_param_bytes, 0) / (e - k)
            self.dense_bytes = max(model.active_param_bytes - k * per_expert, 0.0) / tp
            self.expert_bytes = e * per_expert / tp
            self.route_share = k / e
        else:
            self.dense_bytes = model.weight_bytes / tp
            self.expert_bytes = 0.0
            self.route_share = 1.0
        self.experts, self.topk = e, k
        knobs = inputs.knobs
        attn_dp = max(knobs.attn_dp, 1)
        attn_tp = max(tp // attn_dp, 1)
        # DP attention (perf.knobs): attn-TP-sharded attention weights whole per attention-TP group (dp_attention.py),
        # KV read of own requests only
        self.dense_bytes += attn_tp_weight_bytes(model) * (1.0 / attn_tp - 1.0 / tp) if attn_dp > 1 else 0.0
        self.expert_bytes *= knobs.moe_factor
        self.attn_comm = replace(comm, tp_size=attn_tp) if attn_dp > 1 else None
        self.attn_dp = attn_dp
        # --fp8-gemm-backend picks the block-FP8 GEMM (the "fp8" method on FP8 tensor cores; Marlin elsewhere)
        block_fp8 = getattr(model, "quant_method", None) == "fp8" and w8a8_fp8(model, gpu)
        self.fp8_factor = FP8_GEMM_SPEED.get(knobs.fp8_gemm, 1.0) if block_fp8 else 1.0
        self.params = flop_params(model) / tp
        _, expert = _mlp_params(model)
        self.expert_params = expert / tp  # one routed expert's share on this GPU (TP or EP: the same FLOPs)
        self.dense_params = self.params - self.expert_params * k if self.moe else self.params
        self.kv_token_bytes = (kv_bytes_per_token(model, attn_tp, inputs.kv_cache_dtype_bytes) / attn_dp
                               * knobs.attention_factor_on(gpu.sm_family))
        self.attn_flops_ctx = attention_flops_per_context_token(model, attn_tp) / attn_dp
        # the MoE layers' intermediate caches (fused_moe.py intermediate_cache1/2/3: [T, k, 2N], [T k, N],
        # [T, k, hidden], each written and read once, bf16), N the expert's intermediate size on this GPU
        inter = model.moe_intermediate_size / tp if self.moe else 0.0
        self.moe_act_bytes_per_token = 4.0 * k * (3.0 * inter + model.hidden_size) * model.num_layers if self.moe else 0.0
        self._init_floors(model, gpu, max(knobs.ep_size, 1))
        self._init_dsa(model, tp)
        self.a2a = self.moe and knobs.moe_a2a not in ("", "none") and knobs.ep_size > 1
        self.ep = max(knobs.ep_size, 1)
        kind = "moe" if e > 0 else "dense"
        per_layer = EAGER_CPU_PER_LAYER_S[kind] + (EAGER_CPU_MLA_EXTRA_S if model.is_mla else 0.0) \
            + (EAGER_CPU_DSA_EXTRA_S if self.dsa else 0.0)
        self.eager_cpu = per_layer * model.num_layers * self.speed.eager
        self.eager_gap = EAGER_GAP_PER_LAYER_S[kind] * model.num_layers

    def _init_floors(self, model: Any, gpu: Any, ep_size: int) -> None:
        """The small kernels' and the GEMMs' floors per forward, eager (``small_s``, ``gemm_floor_s``) and replayed
        from a CUDA graph (``small_graph_s``, ``gemm_floor_graph_s``: less what a second stream overlaps)."""
        attn_kind = "mla" if model.is_mla else "gqa"
        mlp_kind = "moe" if self.moe else "dense"
        nvidia = not is_rocm(gpu)
        shared = int(getattr(model, "shared_experts", 0) or 0) if self.moe else 0
        fused = shared > 0 and _fuses_shared_experts(model.architecture, self.experts, shared, nvidia, ep_size)
        self.fp8_quant = w8a8_fp8(model, gpu)  # one activation quantisation per GEMM (every W8A8 FP8 method)
        q = 1 if self.fp8_quant else 0
        floor = self.speed.kernel_floor_s
        layers = model.num_layers

        def floors(shared_kernels: bool, overlapped_small: int) -> tuple[float, float]:
            gemms = GEMM_KERNELS[attn_kind] + GEMM_KERNELS[mlp_kind] + (SHARED_EXPERT_GEMMS if shared_kernels else 0)
            small = SMALL_KERNELS[attn_kind] + SMALL_KERNELS[mlp_kind] - overlapped_small + q * gemms
            small += SHARED_EXPERT_SMALL_KERNELS if shared_kernels else 0
            return (layers * small + HEAD_SMALL_KERNELS) * floor, layers * gemms * floor

        self.small_s, self.gemm_floor_s = floors(shared > 0 and not fused, 0)
        self.graph_overlap = nvidia  # a second stream exists on CUDA only
        q_norm_beside_kv = model.is_mla and nvidia and int(getattr(model, "q_lora_rank", 0) or 0) > 0
        self.small_graph_s, self.gemm_floor_graph_s = floors(
            shared > 0 and not fused and not nvidia, MLA_GRAPH_OVERLAPPED_SMALL_KERNELS if q_norm_beside_kv else 0)

    def _init_dsa(self, model: Any, tp: int) -> None:
        """DSA's lightning indexer (``DSA_INDEX_*``): replicated projections, FP8 logits, a top-k."""
        layout = getattr(model, "kv_layout", None)
        heads = int(getattr(model, "index_n_heads", 0) or 0)
        self.dsa = getattr(model, "family", "") == "dsa" and layout is not None and layout.index_head_dim > 0 \
            and heads > 0
        self.index_topk = float(getattr(model, "index_topk", 0) or 0)
        self.index_params_per_token = self.index_logit_flops_ctx = self.index_key_bytes_ctx = 0.0
        if not self.dsa or layout is None:
            return
        # a NextN draft (mtp_head) keeps the target's layout but has its own few layers, each a DSA layer
        layers = min(layout.index_layers or model.num_layers, model.num_layers)
        dim, h = layout.index_head_dim, model.hidden_size
        params = layers * ((model.q_lora_rank or h) * heads * dim + h * dim + h * heads)
        # whole on every rank: the checkpoint's share of them (weight_bytes / tp above) is topped up to all
        self.dense_bytes += params * (model.weight_bits or 8 * model.dtype_bytes) / 8.0 * (1.0 - 1.0 / tp)
        self.index_params_per_token = float(params)
        self.index_logit_flops_ctx = 2.0 * heads * dim * layers
        self.index_key_bytes_ctx = float((dim + DSA_INDEX_KEY_SCALE_BYTES) * layers)
        floor = self.speed.kernel_floor_s
        self.small_s += layers * DSA_INDEX_SMALL_KERNELS * floor
        self.gemm_floor_s += layers * DSA_INDEX_GEMM_KERNELS * floor
        # replayed on CUDA, q_b_proj (its GEMM, and its activation quantisation counted with MLA's) runs beside the indexer
        overlapped = DSA_GRAPH_OVERLAPPED_GEMMS if self.graph_overlap else 0
        self.small_graph_s += layers * (DSA_INDEX_SMALL_KERNELS - (overlapped if self.fp8_quant else 0)) * floor
        self.gemm_floor_graph_s += layers * (DSA_INDEX_GEMM_KERNELS - overlapped) * floor

    def indexer_s(self, tokens: float, context_tokens: float, queries_per_seq: float, efficiency: float) -> float:
        """DSA's indexer on one rank: its replicated projections over the tokens its attention-DP rank serves
        (all of them under pure TP), and, decoding, its FP8 logits over their contexts and key read."""
        if not self.dsa:
            return 0.0
        own = tokens / self.attn_dp
        fp8_peak = self.flops * 2.0  # FP8 tensor cores: 2x the BF16 dense peak (perf/gpu.py)
        proj = 2.0 * self.index_params_per_token * own / (fp8_peak * efficiency)
        ctx = context_tokens / self.attn_dp
        logits = ctx * queries_per_seq * self.index_logit_flops_ctx / (fp8_peak * self.speed.attention)
        keys = ctx * self.index_key_bytes_ctx / self.bw
        return proj + max(logits, keys)

    def attended_context(self, tokens: float, context_tokens: float, queries_per_seq: float) -> float:
        """KV tokens the decode attention reads: DSA's sparse MLA keeps at most ``index_topk`` per sequence."""
        if not self.dsa or self.index_topk <= 0:
            return context_tokens
        return min(context_tokens, tokens / max(queries_per_seq, 1.0) * self.index_topk)

    def touched_experts(self, routed: float) -> float:
        """Expected distinct experts ``routed`` independently routed tokens select."""
        return self.experts * (1.0 - (1.0 - self.route_share) ** max(routed, 1.0)) if self.moe else 0.0

    def weight_read_s(self, tokens: float) -> float:
        touched = 1.0 - (1.0 - self.route_share) ** max(tokens, 1.0) if self.expert_bytes else 0.0
        return (self.dense_bytes + self.expert_bytes * touched / self.speed.moe) / self.bw

    def compute_s(self, tokens: int, routed: float, efficiency: float) -> float:
        """GEMM FLOPs at this checkpoint's tensor peak; a MoE's experts over their padded rows."""
        flops = 2.0 * self.dense_params * tokens
        if self.moe:
            pairs = float(tokens * self.topk)
            touched = self.touched_experts(routed)
            rows = max(pairs + touched * (MOE_BLOCK_M - 1) / 2.0, touched * MOE_BLOCK_M)
            flops += 2.0 * self.expert_params * rows
        return flops / (self.gemm_flops * efficiency) * self.fp8_factor

    def attention_s(self, context_tokens: float, queries_per_seq: float) -> float:
        """Decode attention: its KV read or its FLOPs, whichever is longer."""
        kv = context_tokens * self.kv_token_bytes / self.bw
        flops = context_tokens * queries_per_seq * self.attn_flops_ctx
        return max(kv, flops / (self.flops * self.speed.attention))

    def moe_comm_s(self, tokens: int) -> float:
        """DeepEP-style dispatch (FP8) + combine (BF16) of every layer's routed copies, per GPU."""
        if not self.a2a:
            return 0.0
        moved = tokens * self.topk * self.model.hidden_size * 3.0 * (self.ep - 1) / self.ep
        return self.model.num_layers * (2 * A2A_LATENCY_S + moved / (A2A_BUS_BW_GB_S * 1e9))

    def gpu_s(
        self, tokens: int, context_tokens: float, *, captured: bool, efficiency: float, routed: float | None = None,
        queries_per_seq: float = 1.0,
    ) -> float:
        """GPU busy time of a forward over ``tokens`` tokens reading ``context_tokens`` of KV.

        ``routed`` is the number of independently routed tokens (MoE expert
        coverage); it defaults to ``tokens``. ``queries_per_seq``: query tokens per
        sequence attending to its context (speculative verification: the draft tokens).
        """
        routed_tokens = float(tokens if routed is None else routed)
        weights = self.weight_read_s(routed_tokens)
        compute = self.compute_s(tokens, routed_tokens, efficiency)
        attended = self.attended_context(tokens, context_tokens, queries_per_seq)
        gemm_floor, small = (self.gemm_floor_graph_s, self.small_graph_s) if captured else (self.gemm_floor_s, self.small_s)
        body = max(weights, compute, gemm_floor) + self.attention_s(attended, queries_per_seq)
        body += self.indexer_s(tokens, context_tokens, queries_per_seq, efficiency)
        body += tokens * self.moe_act_bytes_per_token / self.bw + small + self.moe_comm_s(tokens)
        layers = self.model.num_layers
        ar, _ = allreduce_s(self.comm, tokens, self.model.hidden_size, captured=captured)
        moe_ar = 0.0 if self.a2a else ar  # the all-to-all replaces the MoE output's allreduce
        if self.attn_comm is None:
            return body + layers * (ar + moe_ar)
        # DP attention: the MoE gather/scatter ~ one allreduce of the batch, attention output over attn_tp only
        ar_attn, _ = allreduce_s(self.attn_comm, -(-tokens // self.attn_dp), self.model.hidden_size, captured=captured)
        return body + layers * (moe_ar + ar_attn)

    def step_s(
        self,
        tokens: int,
        context_tokens: float,
        *,
        graph: bool,
        efficiency: float | None = None,
        routed: float | None = None,
        queries_per_seq: float = 1.0,
    ) -> float:
        """Wall time of the forward: graph replay, or eager launch overlapped with the GPU."""
        eff = self.speed.gemm if efficiency is None else efficiency
        gpu = self.gpu_s(tokens, context_tokens, captured=graph, efficiency=eff, routed=routed,
                         queries_per_seq=queries_per_seq)
        if graph:
            return gpu + GRAPH_REPLAY_S
        return max(gpu, self.eager_cpu) + self.eager_gap


def mtp_head(model: Any) -> Any:
    """The draft an MTP checkpoint runs: its own next-token (NextN) layers, not the whole target.

    SGLang's NextN draft (``python/sglang/srt/models/deepseek_nextn.py``, ``DeepseekModelNextN``; GLM-4.5's
    ``glm4_moe_nextn.py`` and MiMo's ``mimo_mtp.py`` alike) is one decoder layer of the target's kind (MoE
    for DeepSeek-V3) behind ``eh_proj`` (``2 hidden x hidden``, over the concatenated normed embedding and
    hidden state), with the target's embedding and LM head shared ("Use shared head and embed weights from
    target model" in its ``load_weights``) **[code]**. Per draft step it therefore reads ``num_nextn_predict_layers``
    layers' weights (the experts its tokens touch), ``eh_proj`` and the LM head. The profile keeps the
    target's path and ``num_nextn_predict_layers``, which is how the memory model recognises an MTP draft;
    its layers are the target's average layer (DeepSeek-V3's 58 of 61 are MoE layers like its MTP layer).
    Also the stand-in for an EAGLE draft without a profile (one layer plus the LM head).
    """
    layers = max(model.num_layers, 1)
    n = max(int(getattr(model, "num_nextn_predict_layers", 0) or 0), 1)
    lm_head = model.hidden_size * model.vocab_size * model.dtype_bytes
    eh_proj = 2 * model.hidden_size * model.hidden_size * model.dtype_bytes
    per_layer_active = max(model.active_param_bytes - lm_head, 0) / layers
    per_layer_all = max(model.weight_bytes - lm_head, 0) / layers
    return replace(
        model,
        num_layers=n,
        weight_bytes=int(n * per_layer_all + lm_head + eh_proj),
        active_param_bytes=int(n * per_layer_active + lm_head + eh_proj),
    )
