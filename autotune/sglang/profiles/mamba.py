"""Hybrid linear-attention / Mamba models: the recurrent state comes out of the budget first
(SGLang 0.5.23 ``srt/mem_cache/kv_cache_configurator.py:3229-3409``, ``_handle_max_mamba_cache``).

Per request and layer (``srt/configs/mamba_utils.py:116-126,168-222``): the conv state
``(intermediate + 2 x n_groups x state) / tp x (K - 1)`` in bf16 and the SSM state
``heads / tp x head_dim x state`` in fp32; ``n_groups`` is rounded up to tp when tp does not divide it.
Then ``M = floor((rest x r/(1 + r) - s) / s)`` request slots with ``r = --mamba-full-memory-ratio``
(0.9), and the KV pool gets ``rest - (M + 1) x s``: only the full-attention layers hold KV
(``srt/model_executor/pool_configurator.py:228-236``).
"""

from __future__ import annotations

import math

from autotune.sglang.profiles.layout import MambaState

__all__ = ["MAMBA_FULL_MEMORY_RATIO", "state_bytes_per_request", "mamba_reserve_bytes"]

MAMBA_FULL_MEMORY_RATIO = 0.9


def state_bytes_per_request(m: MambaState, tp: int) -> float:
    tp = max(int(tp), 1)
    ng = m.n_groups if m.n_groups % tp == 0 or m.n_groups >= tp else tp
    conv = (m.intermediate + 2 * ng * m.state_size) / tp * (m.conv_kernel - 1) * m.conv_bytes
    ssm = m.heads / tp * m.head_dim * m.state_size * m.ssm_bytes
    return float((conv + ssm) * m.layers)


def mamba_reserve_bytes(m: MambaState, tp: int, rest_bytes: float, ratio: float = MAMBA_FULL_MEMORY_RATIO,
                        max_slots: int | None = None) -> float:
    """Bytes the Mamba state cache takes before the KV pool is sized (0 when nothing is left);
    ``max_slots``: ``--max-mamba-cache-size`` per attention-DP rank (KVC:3303-3309), else the ratio split."""
    s = state_bytes_per_request(m, tp)
    if rest_bytes <= 0 or s <= 0:
        return 0.0
    slots = max_slots if max_slots is not None else max(math.floor((rest_bytes * ratio / (1 + ratio) - s) / s), 0)
    return (slots + 1) * s
