"""DP attention's weight cost: attention (and embedding) weights whole on every attention-TP rank.

With ``--enable-dp-attention --dp-size N`` (``--attn-dp-size N`` from 0.5.22)
the attention layers are sharded over ``attn_tp = tp / N`` ranks only
(SGLang ``deepseek_v2.py``: ``ColumnParallelLinear(..., tp_size=attn_tp_size)``)
and the token embedding over the same group (``use_attn_tp_group=
is_dp_attention_enabled()``); the MoE/MLP and the LM head stay over all
``tp``. Each GPU therefore holds ``(attention + embedding) x (1/attn_tp - 1/tp)``
more weight bytes than at plain TP: memory the KV pool no longer gets
(the memory model and the simulator both subtract it from A), and attention
weights each decode step reads.
"""

from __future__ import annotations

from typing import Any

__all__ = ["attention_weight_bytes", "embedding_weight_bytes", "replicated_weight_gib"]

GIB = 2**30


def _attention_dtype_bytes(model: Any) -> float:
    # FP8 checkpoints quantize attention too; int4 compressed-tensors checkpoints (Kimi-K2) leave it bf16.
    return 1.0 if str(getattr(model, "quant_method", "") or "").lower() == "fp8" else float(model.dtype_bytes)


def attention_weight_bytes(model: Any) -> float:
    """Bytes of every attention projection of the model (all layers, unsharded)."""
    h, heads = model.hidden_size, model.num_attention_heads
    if model.is_mla:
        v_dim = getattr(model, "v_head_dim", 128) or 128
        nope = model.head_dim - model.qk_rope_head_dim
        q_lora = int(getattr(model, "q_lora_rank", 0) or 0)
        q = (h * q_lora + q_lora * heads * model.head_dim) if q_lora else h * heads * model.head_dim
        per_layer = q + h * (model.kv_lora_rank + model.qk_rope_head_dim)
        per_layer += model.kv_lora_rank * heads * (nope + v_dim) + heads * v_dim * h
    else:
        per_layer = 2 * h * heads * model.head_dim + 2 * h * model.num_kv_heads * model.head_dim
    return float(model.num_layers * per_layer) * _attention_dtype_bytes(model)


def embedding_weight_bytes(model: Any) -> float:
    return float(model.vocab_size * model.hidden_size * model.dtype_bytes)


def replicated_weight_gib(model: Any, tp_size: int, attn_dp_size: int) -> float:
    """GiB per GPU that DP attention ``attn_dp_size`` adds over plain TP ``tp_size`` (0 when off)."""
    if attn_dp_size <= 1 or tp_size <= 1:
        return 0.0
    attn_tp = max(tp_size // attn_dp_size, 1)
    share = 1.0 / attn_tp - 1.0 / tp_size
    return (attention_weight_bytes(model) + embedding_weight_bytes(model)) * share / GIB
