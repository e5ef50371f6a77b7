"""What a model's KV cache looks like to SGLang's pool configurator: one record per checkpoint.

The family decides which branch of SGLang 0.5.23's ``srt/model_executor/pool_configurator.py`` sizes
the pool: MHA/GQA (:mod:`.gqa`, PC:491-531), hybrid sliding-window (:mod:`.gqa`, PC:656-921), MLA and
DSA (:mod:`.mla`, PC:359-409, 560-635), DeepSeek V4 (:mod:`.dsv4`, PC:1067-1712) and the Mamba /
linear-attention hybrids (:mod:`.mamba`, ``srt/mem_cache/kv_cache_configurator.py:3229-3409``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["KvLayout", "MambaState", "FAMILIES"]

FAMILIES = ("mha", "swa", "mla", "dsa", "dsv4", "mamba")


@dataclass(frozen=True)
class MambaState:
    """Per-layer recurrent state of a Mamba2 / gated-delta-net mixer (``srt/configs/mamba_utils.py``)."""

    layers: int
    intermediate: int  # conv channels besides the groups: Mamba2 heads x head_dim, GDN v_heads x v_dim
    n_groups: int  # Mamba2 n_groups, GDN k_heads
    state_size: int  # Mamba2 ssm_state_size, GDN k_dim
    heads: int  # Mamba2 heads, GDN v_heads
    head_dim: int  # Mamba2 head_dim, GDN v_dim
    conv_kernel: int = 4
    conv_bytes: int = 2  # bf16 conv state
    ssm_bytes: int = 4  # fp32 temporal state (--mamba-ssm-dtype / the config's mamba_ssm_dtype)


@dataclass(frozen=True)
class KvLayout:
    family: str = "mha"
    full_layers: int = 0  # layers in the full-attention pool
    swa_layers: int = 0  # sliding-window layers (hybrid-SWA pool)
    sliding_window: int = 0
    swa_kv_heads: int = 0  # SWA layers' own KV heads / dims (MiMo-V2's swa_*; 0 = as the full layers)
    swa_head_dim: int = 0
    swa_v_head_dim: int = 0
    index_head_dim: int = 0  # DSA indexer (0: none)
    index_layers: int = 0  # DSA layers that compute top-k
    mamba: MambaState | None = None
    compress_ratios: tuple[int, ...] = field(default_factory=tuple)  # DeepSeek V4, per layer (0 = none)
