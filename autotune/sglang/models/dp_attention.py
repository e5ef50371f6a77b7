"""DP attention's weight cost: what each GPU holds whole per attention-TP group instead of 1/tp of it.

With ``--enable-dp-attention --dp-size N`` (``--attn-dp-size N`` from 0.5.22)
the attention layers run over ``attn_tp = tp / N`` ranks. Read from the wheels
(0.5.23 ``models/deepseek_v2.py``, 0.5.9 the same file):

* sharded over the attention-TP group (``parallel_group="attn_tp"``; 0.5.9
  ``tp_size=attn_tp_size``): ``q_b_proj`` (``q_proj`` without a q LoRA),
  ``kv_b_proj``, ``o_proj`` (0.5.23 ``deepseek_v2.py:2078,2087,2145,2154``;
  0.5.9 ``:1130,1140,1178,1188``), in the checkpoint's dtype: FP8 (block-quantized,
  DeepSeek-V3 / Kimi-K2-Instruct) is 1 byte a weight (its 128x128 block scales,
  4 bytes per 16,384 weights, are left out); a compressed-tensors int4
  checkpoint that ignores ``self_attn`` (Kimi-K2-Thinking, the seed's
  ``kimi-k2-class``) keeps them bf16;
* MLA's absorbed copies of ``kv_b_proj``, ``w_kc`` and ``w_vc``: made with
  ``.contiguous()`` from each rank's ``kv_b_proj`` shard after loading and kept
  beside it, in bf16 (an FP8 block-quantized ``kv_b_proj`` is dequantized to
  bf16 first on CUDA) (0.5.23 ``deepseek_common/deepseek_weight_loader.py:703-708,780-786``;
  0.5.9 ``:514-518,570-573``);
* the token embedding (``use_attn_tp_group=is_dp_attention_enabled()``: 0.5.23
  ``layers/vocab_parallel_embedding.py:185``, 0.5.9 ``deepseek_v2.py:2534``);
  the LM head only with ``--enable-dp-lm-head`` (``use_attn_tp_group=enable_dp_lm_head``:
  0.5.23 ``deepseek_v2.py:3296``, 0.5.9 ``:2823``), else over all ``tp``.

Not counted: ``fused_qkv_a_proj_with_mqa`` / ``kv_a_proj_with_mqa`` are
``ReplicatedLinear`` (whole on every rank at any TP: no change), and the dense
FFN layers and shared experts stay over all ``tp`` unless ``--moe-dense-tp-size 1``
or a DeepEP-class all-to-all back-end (not modelled). Each GPU therefore holds
``bytes x (1/attn_tp - 1/tp)`` more than at plain TP: memory the KV pool no
longer gets (the memory model and the simulator both subtract it from A), and
weights each decode step reads.
"""

from __future__ import annotations

from typing import Any

__all__ = ["attn_tp_weight_bytes", "embedding_weight_bytes", "replicated_weight_gib"]

GIB = 2**30
BF16 = 2.0  # bytes of the absorbed w_kc / w_vc copies


def _attention_dtype_bytes(model: Any) -> float:
    # FP8 checkpoints quantize attention too; int4 compressed-tensors checkpoints (Kimi-K2) leave it bf16.
    return 1.0 if str(getattr(model, "quant_method", "") or "").lower() == "fp8" else float(model.dtype_bytes)


def attn_tp_weight_bytes(model: Any) -> float:
    """Bytes (all layers, unsharded) of the attention projections SGLang shards over the attention-TP
    group: what DP attention keeps whole per attention-TP group (MLA: plus the absorbed kv_b copies)."""
    h, heads = model.hidden_size, model.num_attention_heads
    if model.is_mla:
        v_dim = getattr(model, "v_head_dim", 128) or 128
        nope = model.head_dim - model.qk_rope_head_dim
        q_lora = int(getattr(model, "q_lora_rank", 0) or 0)
        q = q_lora * heads * model.head_dim if q_lora else h * heads * model.head_dim  # q_b_proj / q_proj
        kv_b = model.kv_lora_rank * heads * (nope + v_dim)
        per_layer = (q + kv_b + heads * v_dim * h) * _attention_dtype_bytes(model) + kv_b * BF16
    else:
        per_layer = (2 * h * heads * model.head_dim + 2 * h * model.num_kv_heads * model.head_dim) \
            * _attention_dtype_bytes(model)
    return float(model.num_layers * per_layer)


def embedding_weight_bytes(model: Any) -> float:
    return float(model.vocab_size * model.hidden_size * model.dtype_bytes)


def replicated_weight_gib(model: Any, tp_size: int, attn_dp_size: int, *, dp_lm_head: bool = False) -> float:
    """GiB per GPU that DP attention ``attn_dp_size`` adds over plain TP ``tp_size`` (0 when off);
    ``dp_lm_head``: ``--enable-dp-lm-head`` (the LM head over the attention-TP group too)."""
    if attn_dp_size <= 1 or tp_size <= 1:
        return 0.0
    attn_tp = max(tp_size // attn_dp_size, 1)
    share = 1.0 / attn_tp - 1.0 / tp_size
    lm_head = embedding_weight_bytes(model) if dp_lm_head else 0.0  # vocab x hidden, not quantized
    return (attn_tp_weight_bytes(model) + embedding_weight_bytes(model) + lm_head) * share / GIB
