"""MHA / GQA and hybrid sliding-window KV cells (SGLang 0.5.23).

* ``cell = n_kv x (head_dim + v_head_dim) x L x bytes`` (``srt/model_executor/pool_configurator.py:491-531``),
  ``n_kv = max(1, kv_heads // attn_tp)``: with attention TP above the KV heads every rank keeps one head
  (``srt/configs/model_config.py:1700-1711``).
* Hybrid-SWA models (GPT-OSS, ``model_config.py:2651-2690``) keep two pools: ``full`` tokens over the
  full-attention layers and ``r x full`` over the sliding-window ones, ``r = --swa-full-tokens-ratio``
  (0.8: ``srt/arg_groups/fields/schedule.py:150-161``), so one full token costs
  ``full_per x L_full + r x swa_per x L_swa`` (PC:656-921). Gemma 2/3 and Mistral's ``sliding_window`` are
  sized as full attention on every layer (``srt/arg_groups/model_overrides/gemma2_gemma3.py:13-26``).
"""

from __future__ import annotations

__all__ = ["SWA_FULL_TOKENS_RATIO", "gqa_cell", "swa_cell"]

SWA_FULL_TOKENS_RATIO = 0.8


def _per_layer(kv_heads: int, head_dim: int, v_head_dim: int, attn_tp: int, kv_bytes: float) -> float:
    return max(1, kv_heads // max(attn_tp, 1)) * (head_dim + v_head_dim) * kv_bytes


def gqa_cell(kv_heads: int, head_dim: int, v_head_dim: int, layers: int, attn_tp: int, kv_bytes: float) -> float:
    return _per_layer(kv_heads, head_dim, v_head_dim, attn_tp, kv_bytes) * layers


def swa_cell(kv_heads: int, head_dim: int, v_head_dim: int, full_layers: int, swa_layers: int, attn_tp: int,
             kv_bytes: float, ratio: float = SWA_FULL_TOKENS_RATIO, swa_heads: tuple[int, int, int] | None = None) -> float:
    """``swa_heads``: (kv heads, head_dim, v_head_dim) of the SWA layers when they differ
    (``swa_num_key_value_heads`` / ``swa_head_dim`` / ``swa_v_head_dim``: ``model_config.py:1357-1365,1713-1724``)."""
    per = _per_layer(kv_heads, head_dim, v_head_dim, attn_tp, kv_bytes)
    swa_per = _per_layer(*swa_heads, attn_tp, kv_bytes) if swa_heads else per
    if full_layers == 0:  # all-SWA models use no ratio
        return swa_per * swa_layers
    return per * full_layers + ratio * swa_per * swa_layers
