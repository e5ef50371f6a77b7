"""The family dispatch: KV bytes per token per GPU, the memory taken before the KV pool, and the
weight bytes one GPU loads, for any :class:`autotune.sglang.models.profile.ModelProfile`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.sglang.models.dsv4 import dsv4_coef, dsv4_fixed_bytes
from autotune.sglang.models.gqa import SWA_FULL_TOKENS_RATIO, gqa_cell, swa_cell
from autotune.sglang.models.layout import KvLayout
from autotune.sglang.models.mamba import MambaKnobs, MambaPool, mamba_pool
from autotune.sglang.models.mla import dsa_budget_cell, dsa_cell, dsa_kv_is_fp8, mla_cell

__all__ = ["Reserve", "layout_of", "kv_cell_bytes", "kv_reserved", "kv_reserved_bytes", "weight_bytes_per_gpu"]


def layout_of(model: Any) -> KvLayout:
    layout = getattr(model, "kv_layout", None)
    if isinstance(layout, KvLayout):
        return layout
    return KvLayout("mla" if model.is_mla else "mha", model.num_layers)


def kv_cell_bytes(model: Any, *, attn_tp: int, kv_bytes: float, kv_cache_dtype: str = "auto", gpu_sm: int = 0,
                  swa_ratio: float | None = None, stored_fp8_row: bool = True) -> float:
    """KV bytes one full-attention token costs on one GPU, every pool of the family included.
    ``swa_ratio``: ``--swa-full-tokens-ratio`` when given, else the family's default (hybrid SWA 0.8,
    DeepSeek V4 0.1). ``stored_fp8_row=False``: DSA's cell as releases up to 0.5.16 budgeted it
    (:func:`autotune.sglang.models.mla.dsa_budget_cell`), not as the pool stores it."""
    lay = layout_of(model)
    layers = lay.full_layers or model.num_layers
    if lay.family == "dsv4":
        return dsv4_coef(lay.compress_ratios) if swa_ratio is None else dsv4_coef(lay.compress_ratios, swa_ratio)
    if lay.family == "dsa":
        fp8 = dsa_kv_is_fp8(kv_cache_dtype, gpu_sm, bool(getattr(model, "kv_cache_quant_fp8", False)))
        cell = dsa_cell if stored_fp8_row else dsa_budget_cell
        return cell(model.kv_lora_rank, model.qk_rope_head_dim, layers, lay.index_head_dim, lay.index_layers, fp8)
    if lay.family == "mla" or model.is_mla:
        return mla_cell(model.kv_lora_rank, model.qk_rope_head_dim, layers, kv_bytes)
    if lay.family == "swa":
        swa_heads = (lay.swa_kv_heads, lay.swa_head_dim, lay.swa_v_head_dim) if lay.swa_kv_heads else None
        return swa_cell(model.num_kv_heads, model.head_dim, model.v_head_dim, lay.full_layers, lay.swa_layers,
                        attn_tp, kv_bytes, SWA_FULL_TOKENS_RATIO if swa_ratio is None else swa_ratio, swa_heads)
    return gqa_cell(model.num_kv_heads, model.head_dim, model.v_head_dim, layers, attn_tp, kv_bytes)


#: The multimodal embedding cache reserved out of the KV budget (``SGLANG_VLM_CACHE_SIZE_MB``, SGLang 0.5.23
#: ``srt/mem_cache/kv_cache_configurator.py:202-224``), for models with a vision tower.
VLM_CACHE_BYTES = 100 * 2**20


@dataclass(frozen=True)
class Reserve:
    """What SGLang takes out of ``rest`` before it sizes the KV pool."""

    bytes: float
    mamba: MambaPool | None = None  # the state pool of a Mamba / linear-attention hybrid


def kv_reserved(model: Any, rest_bytes: float, *, tp: int, max_running_requests: int | None = None,
                mamba: MambaKnobs | None = None) -> Reserve:
    """The multimodal cache, then the Mamba state pool (:func:`autotune.sglang.models.mamba.mamba_pool`,
    sized by the launch's ``mamba`` knobs) or DeepSeek V4's fixed compressed state (nothing else for a
    text-only model of the other families). ``tp`` is the attention TP (tp / attention-DP size)."""
    lay = layout_of(model)
    mm = float(VLM_CACHE_BYTES) if getattr(model, "vision_weight_bytes", 0) else 0.0
    if lay.family == "mamba" and lay.mamba is not None:
        knobs = mamba or MambaKnobs(architecture=getattr(model, "architecture", ""),
                                    max_running_requests=max_running_requests)
        if rest_bytes - mm <= 0:
            return Reserve(mm)
        pool = mamba_pool(lay.mamba, tp, rest_bytes - mm, knobs)
        return Reserve(mm + pool.reserved_bytes, pool)
    if lay.family == "dsv4":
        return Reserve(mm + dsv4_fixed_bytes(lay.compress_ratios, max_running_requests or 256))
    return Reserve(mm)


def kv_reserved_bytes(model: Any, rest_bytes: float, *, tp: int, max_running_requests: int | None = None,
                      mamba: MambaKnobs | None = None) -> float:
    """:func:`kv_reserved`'s bytes."""
    return kv_reserved(model, rest_bytes, tp=tp, max_running_requests=max_running_requests, mamba=mamba).bytes


def weight_bytes_per_gpu(model: Any, tp: int, *, mxfp4_align: tuple[int, int] = (128, 128)) -> float:
    """Bytes one rank loads at plain TP ``tp``: the split parts / tp, what every rank holds whole
    (MLA's replicated a-projections, routers, norms) and its share of the post-load copies.
    ``mxfp4_align``: the release's (intermediate, hidden) padding of MXFP4 experts
    (:func:`autotune.sglang.releases.mxfp4_pad_align`)."""
    tp = max(int(tp), 1)
    whole = float(getattr(model, "replicated_weight_bytes", 0) or 0)
    post = float(getattr(model, "post_load_weight_bytes", 0) or 0)
    return (model.weight_bytes - whole) / tp + whole + post / tp + mxfp4_padding_bytes(model, tp, mxfp4_align) \
        + kv_head_replication_bytes(model, tp)


def kv_head_replication_bytes(model: Any, tp: int) -> float:
    """With tp above the KV heads, QKVParallelLinear gives every rank one whole KV head
    (0.5.23 ``srt/layers/linear.py:1142``, ``num_kv_head_replicas = tp / total_num_kv_heads``):
    k_proj / v_proj cost 1/kv_heads of theirs per rank instead of 1/tp."""
    kv = int(getattr(model, "num_kv_heads", 0) or 0)
    kv_bytes = float(getattr(model, "kv_proj_weight_bytes", 0) or 0)
    if not kv_bytes or kv <= 0 or tp <= kv or model.is_mla:
        return 0.0
    return kv_bytes * (1.0 / kv - 1.0 / tp)


def mxfp4_padding_bytes(model: Any, tp: int, align: tuple[int, int] = (128, 128)) -> float:
    """MXFP4 MoE experts are padded after loading: each rank's intermediate and the hidden size rounded up
    to ``align`` = (intermediate, hidden): 128 on SGLang 0.5.23's FlashInfer SM100 and CUTLASS SM90/SM120
    paths (``layers/quantization/mxfp4.py:478-508``), 256 on aiter and on 0.5.9's SM100 FlashInfer path
    (0.5.9 ``mxfp4.py:324-355``). GPT-OSS: 2880 -> 2944 (128) or 3072 (256) at TP 1."""
    experts = float(getattr(model, "expert_weight_bytes", 0) or 0)
    if str(getattr(model, "quant_method", "") or "") != "mxfp4" or not experts or not model.moe_intermediate_size:
        return 0.0
    h = model.hidden_size
    inter = max(model.moe_intermediate_size // tp, 1)
    a_inter, a_h = max(int(align[0]), 1), max(int(align[1]), 1)
    factor = (-(-h // a_h) * a_h / h) * (-(-inter // a_inter) * a_inter / inter)
    return experts / tp * (factor - 1.0)
