"""Roofline of one forward pass on one GPU (private to :mod:`autotune.sim.perf`).

The constants are documented in :mod:`autotune.sim.perf`'s docstring: weights
and KV read at ``HBM_EFFICIENCY`` of the datasheet bandwidth, GEMMs at
``GEMM_EFFICIENCY`` (decode) / ``PREFILL_EFFICIENCY`` of the dense BF16 peak,
CUDA-graph replay ``GRAPH_REPLAY_S``, eager launch ``EAGER_CPU_PER_LAYER_S``
overlapped with the GPU plus ``EAGER_GAP_PER_LAYER_S`` of idle gaps.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from autotune.sglang.hardware.gpus import GpuKind
from autotune.sglang.models.dp_attention import attn_tp_weight_bytes
from autotune.sglang.models.sizing import layout_of
from autotune.sim.perf_comm import CommSetup, allreduce_s
from autotune.sim.perf_knobs import FP8_GEMM_SPEED, KnobSpeed


class ForwardInputs(Protocol):
    """What a forward pass reads of :class:`autotune.sim.perf.PerfInputs` (no import back: no cycle)."""

    @property
    def tp_size(self) -> int: ...
    @property
    def gpu(self) -> GpuKind: ...
    @property
    def kv_cache_dtype_bytes(self) -> int: ...
    @property
    def knobs(self) -> KnobSpeed: ...

HBM_EFFICIENCY = 0.8
GEMM_EFFICIENCY = 0.55
PREFILL_EFFICIENCY = 0.6
GRAPH_REPLAY_S = 40e-6
EAGER_CPU_PER_LAYER_S = {"dense": 150e-6, "moe": 300e-6}
EAGER_GAP_PER_LAYER_S = {"dense": 30e-6, "moe": 50e-6}


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
    if model.num_experts > 0:
        mlp = 3 * h * model.moe_intermediate_size * max(model.num_experts_per_tok, 1)
    else:
        mlp = 3 * h * model.intermediate_size
    return float(model.num_layers * (attn + mlp) + h * model.vocab_size)


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
        self.bw = gpu.hbm_tb_s * 1e12 * HBM_EFFICIENCY
        self.flops = gpu.bf16_tflops * 1e12
        e = model.num_experts
        k = max(model.num_experts_per_tok, 1)
        if e > k:
            per_expert = max(model.weight_bytes - model.active_param_bytes, 0) / (e - k)
            self.dense_bytes = max(model.active_param_bytes - k * per_expert, 0.0) / tp
            self.expert_bytes = e * per_expert / tp
            self.route_share = k / e
        else:
            self.dense_bytes = model.weight_bytes / tp
            self.expert_bytes = 0.0
            self.route_share = 1.0
        knobs = inputs.knobs
        attn_dp = max(knobs.attn_dp, 1)
        attn_tp = max(tp // attn_dp, 1)
        # DP attention (perf_knobs): attn-TP-sharded attention weights whole per attention-TP group (dp_attention.py),
        # KV read of own requests only
        self.dense_bytes += attn_tp_weight_bytes(model) * (1.0 / attn_tp - 1.0 / tp) if attn_dp > 1 else 0.0
        self.expert_bytes *= knobs.moe_factor
        self.attn_comm = replace(comm, tp_size=attn_tp) if attn_dp > 1 else None
        self.attn_dp = attn_dp
        self.fp8_factor = FP8_GEMM_SPEED.get(knobs.fp8_gemm, 1.0) if getattr(model, "quant_method", None) == "fp8" else 1.0
        self.params = flop_params(model) / tp
        self.kv_token_bytes = (kv_bytes_per_token(model, attn_tp, inputs.kv_cache_dtype_bytes) / attn_dp
                               * knobs.attention_factor)
        kind = "moe" if e > 0 else "dense"
        self.eager_cpu = EAGER_CPU_PER_LAYER_S[kind] * model.num_layers
        self.eager_gap = EAGER_GAP_PER_LAYER_S[kind] * model.num_layers

    def weight_read_s(self, tokens: float) -> float:
        touched = 1.0 - (1.0 - self.route_share) ** max(tokens, 1.0) if self.expert_bytes else 0.0
        return (self.dense_bytes + self.expert_bytes * touched) / self.bw

    def gpu_s(
        self, tokens: int, context_tokens: float, *, captured: bool, efficiency: float, routed: float | None = None
    ) -> float:
        """GPU busy time of a forward over ``tokens`` tokens reading ``context_tokens`` of KV.

        ``routed`` is the number of independently routed tokens (MoE expert
        coverage); it defaults to ``tokens``.
        """
        weights = self.weight_read_s(tokens if routed is None else routed)
        compute = 2.0 * self.params * tokens / (self.flops * efficiency) * self.fp8_factor
        kv = context_tokens * self.kv_token_bytes / self.bw
        ar, _ = allreduce_s(self.comm, tokens, self.model.hidden_size, captured=captured)
        if self.attn_comm is None:
            return max(weights, compute) + kv + 2 * self.model.num_layers * ar
        # DP attention: the MoE gather/scatter ~ one allreduce of the batch, attention output over attn_tp only
        ar_attn, _ = allreduce_s(self.attn_comm, -(-tokens // self.attn_dp), self.model.hidden_size, captured=captured)
        return max(weights, compute) + kv + self.model.num_layers * (ar + ar_attn)

    def step_s(
        self,
        tokens: int,
        context_tokens: float,
        *,
        graph: bool,
        efficiency: float = GEMM_EFFICIENCY,
        routed: float | None = None,
    ) -> float:
        """Wall time of the forward: graph replay, or eager launch overlapped with the GPU."""
        gpu = self.gpu_s(tokens, context_tokens, captured=graph, efficiency=efficiency, routed=routed)
        if graph:
            return gpu + GRAPH_REPLAY_S
        return max(gpu, self.eager_cpu) + self.eager_gap


def mtp_head(model: Any) -> Any:
    """One decoder layer of the target plus its LM head, as the draft of EAGLE/MTP without a
    profile: the target's own profile with one layer's worth of weights."""
    layers = max(model.num_layers, 1)
    lm_head = model.hidden_size * model.vocab_size * model.dtype_bytes
    per_layer_active = max(model.active_param_bytes - lm_head, 0) / layers
    per_layer_all = max(model.weight_bytes - lm_head, 0) / layers
    return replace(
        model,
        num_layers=1,
        weight_bytes=int(per_layer_all + lm_head),
        active_param_bytes=int(per_layer_active + lm_head),
    )
