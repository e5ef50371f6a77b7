"""MLA and DSA (sparse-attention indexer) KV cells (SGLang 0.5.23).

* MLA (DeepSeek V2/V3/R1, Kimi K2/K2.5, ``srt/configs/model_config.py:1366-1401``):
  ``cell = (kv_lora_rank + qk_rope_head_dim) x L x bytes``, **not** divided by TP: every attention rank
  holds the whole latent (``srt/model_executor/pool_configurator.py:376-386``). FP4 KV adds one scale per
  16 elements (PC:387-397).
* DSA (DeepSeek V3.2, GLM-5: an MLA architecture with ``index_topk``, MC:191-212): the latent row per
  layer is 656 B in fp8 with CUDA's default back-ends (512 fp8 + 512/128 x 4 scale bytes + 64 bf16 rope)
  or 1152 B in bf16 (``srt/mem_cache/kv_cache_configurator.py:3412-3475``), plus the indexer's
  ``ceil(ihd + ihd/128 x 4)`` uint8 key cache on every layer that computes top-k (PC:560-635), added to
  the cell (PC:400-409). kv "auto" is fp8 on SM >= 100, else bf16 (``srt/arg_groups/overrides.py:491-548``).
  Up to 0.5.16 the budget divided by an fp8 row of 576 B while the pool stored 656 B rows
  (:func:`dsa_budget_cell`, :data:`autotune.sglang.releases.DSA_FP8_ROW_BUDGETED`).
"""

from __future__ import annotations

import math

__all__ = ["DSA_CUDA_PAGE", "mla_cell", "dsa_budget_cell", "dsa_cell", "dsa_kv_is_fp8"]

#: DSA's default page size on CUDA (64 x index_kpool: ``srt/arg_groups/model_overrides/deepseek_v2.py:171``).
DSA_CUDA_PAGE = 64


def mla_cell(kv_lora_rank: int, rope_dim: int, layers: int, kv_bytes: float) -> float:
    row = kv_lora_rank + rope_dim
    if kv_bytes < 1.0:  # fp4: half a byte per element plus one scale byte per 16
        return row * layers * 0.5 + row / 16 * layers
    return row * layers * kv_bytes


def dsa_kv_is_fp8(kv_cache_dtype: str, gpu_sm: int, checkpoint_fp8: bool) -> bool:
    d = (kv_cache_dtype or "auto").lower()
    if d == "auto":
        return gpu_sm >= 100 or checkpoint_fp8
    return d.startswith("fp8")


def dsa_cell(kv_lora_rank: int, rope_dim: int, layers: int, index_head_dim: int, index_layers: int,
             fp8: bool) -> float:
    row = (kv_lora_rank + kv_lora_rank // 128 * 4 + rope_dim * 2) if fp8 else (kv_lora_rank + rope_dim) * 2
    return float(row * layers + _index_row(index_head_dim) * index_layers)


def dsa_budget_cell(kv_lora_rank: int, rope_dim: int, layers: int, index_head_dim: int, index_layers: int,
                    fp8: bool) -> float:
    """The bytes a token SGLang up to 0.5.16 divided its DSA KV budget by: the latent row as
    ``(kv_lora_rank + rope) x kv bytes`` (576 B in fp8, not the 656 B :func:`dsa_cell` stores) plus the
    indexer (0.5.9 ``model_executor/model_runner_kv_cache_mixin.py:47-80``). Equal to :func:`dsa_cell` in bf16."""
    row = (kv_lora_rank + rope_dim) * (1 if fp8 else 2)
    return float(row * layers + _index_row(index_head_dim) * index_layers)


def _index_row(index_head_dim: int) -> int:
    """The indexer's uint8 key row a layer: fp8 keys + one fp32 scale per 128."""
    return math.ceil(index_head_dim + index_head_dim / 128 * 4)
