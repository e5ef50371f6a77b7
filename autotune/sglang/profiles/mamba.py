"""Hybrid linear-attention / Mamba models: the recurrent-state pool comes out of the budget first.

Per request and layer (0.5.9 and 0.5.23 ``srt/configs/mamba_utils.py:116-126``, the shapes at
``:168-222`` of 0.5.23): the conv state ``(intermediate + 2 x n_groups x state) / tp x (K - 1)`` in bf16
and the SSM state ``heads / tp x head_dim x state`` in fp32 (``--mamba-ssm-dtype`` or the config's
``mamba_ssm_dtype``); ``n_groups`` is rounded up to tp when tp does not divide it.

How many request slots SGLang gives the pool (``max_mamba_cache_size``, per attention-DP rank), and
what it takes out of ``rest`` before the KV pool is sized: :func:`mamba_pool`, by release:

* **0.5.9-0.5.12** (0.5.9 ``srt/model_executor/model_runner_kv_cache_mixin.py:151-207``): under
  speculative decoding ``per_req x (max_running_requests // dp) x D`` is taken first (the draft's
  intermediate states, D = draft tokens); then the slots are ``--max-mamba-cache-size // dp`` when
  given, else ``--max-running-requests // dp`` when the radix cache is off and that is set, else
  ``int(rest x r / (1 + r) / per_req)`` with ``r = --mamba-full-memory-ratio`` (0.9); the KV pool
  gets ``rest - slots x per_req``.
* **0.5.13-0.5.16** (0.5.16 ``srt/mem_cache/kv_cache_configurator.py:1703-1812``): the same three
  branches, the speculative intermediate states solved jointly with the slots inside the ratio's
  budget (``int(budget / (per_req x (1 + D / ratio)))``) and sized by
  ``min(max_running // dp, slots // ratio)`` requests.
* **0.5.17 on** (0.5.23 ``srt/mem_cache/kv_cache_configurator.py:3229-3409``): each pool carries a
  padding slot, so ``(slots + 1) x per_req`` is taken (the ratio branch solves
  ``int((budget - per_req) / per_req)``, with speculation ``int((budget - per_req (1 + D)) /
  (per_req (1 + D / ratio)))``); the radix-off branch is ``max(1, max_running // dp)``.

``ratio`` (state slots a running request may hold, ``_calculate_mamba_ratio``: 0.5.23 KVC:3062-3088,
0.5.12 ``model_runner_kv_cache_mixin.py:186-198``) is 1 with the radix cache off, else 3 plus the
extra buffer's tracking slots (2 with the overlap scheduler, 1 without: 0.5.23
``mem_cache/allocation_sizing.py:11-19``). From 0.5.14 SGLang picks the ``extra_buffer`` strategy
itself for the architectures that support it when the overlap scheduler or paging is on (0.5.23
``arg_groups/overrides.py:453-487``, architectures ``:403-435``; 0.5.14 ``server_args.py:4385``);
before, ``auto`` meant ``no_buffer`` (0.5.9 ``server_args.py:873-877``). The running requests are
capped at ``slots // ratio`` (0.5.23 KVC:3119-3172; 0.5.9 ``model_runner_kv_cache_mixin.py:355-368``),
which also sizes the request table. Only the full-attention layers hold KV
(0.5.23 ``srt/model_executor/pool_configurator.py:228-236``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from autotune.sglang import releases as R
from autotune.sglang.defaults import SPECULATIVE_MAX_RUNNING_REQUESTS
from autotune.sglang.profiles.layout import MambaState
from autotune.sglang.versions import SglangVersion, as_version

__all__ = ["EXTRA_BUFFER_ARCHITECTURES", "MAMBA_FULL_MEMORY_RATIO", "SLOTS_PER_REQUEST", "MambaKnobs", "MambaPool",
           "knobs_from_args", "mamba_pool", "mamba_ratio", "state_bytes_per_request", "ssm_dtype_bytes"]

#: ``--mamba-full-memory-ratio``'s default (0.5.9 ``server_args.py:523``; 0.5.23
#: ``arg_groups/fields/schedule.py:220-226``, fallback 0.9).
MAMBA_FULL_MEMORY_RATIO = 0.9
#: State slots per running request with the radix cache on (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO:
#: 0.5.9 ``model_runner_kv_cache_mixin.py:37``, 0.5.23 KVC:227).
SLOTS_PER_REQUEST = 3
#: Architectures whose radix cache keeps the extra state buffer by default (0.5.23 ``arg_groups/
#: overrides.py:403-435``, ``_MAMBA_EXTRA_BUFFER_ARCHS``, the ones :mod:`.families` profiles).
EXTRA_BUFFER_ARCHITECTURES = frozenset({
    "Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "FalconH1ForCausalLM", "NemotronHForCausalLM",
})
_SSM_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def ssm_dtype_bytes(dtype: str | None) -> int | None:
    """Bytes of one SSM state element for ``--mamba-ssm-dtype`` (None when not given or unknown)."""
    return _SSM_BYTES.get(str(dtype).lower()) if dtype else None


def state_bytes_per_request(m: MambaState, tp: int) -> float:
    """``mamba_cache_per_req``: one request's conv + SSM state over every linear-attention layer."""
    tp = max(int(tp), 1)
    ng = m.n_groups if m.n_groups % tp == 0 or m.n_groups >= tp else tp
    conv = (m.intermediate + 2 * ng * m.state_size) / tp * (m.conv_kernel - 1) * m.conv_bytes
    ssm = m.heads / tp * m.head_dim * m.state_size * m.ssm_bytes
    return float((conv + ssm) * m.layers)


@dataclass(frozen=True)
class MambaKnobs:
    """What a launch sets that moves the state pool (``None``: not passed, SGLang's default)."""

    version: str | SglangVersion = "0.5.23"
    architecture: str = ""
    attn_dp: int = 1
    radix_cache: bool = True  # False: --disable-radix-cache
    max_running_requests: int | None = None  # as SGLang resolved it (speculation sets 48 when unset)
    max_mamba_cache_size: int | None = None  # --max-mamba-cache-size, for the whole server
    full_memory_ratio: float | None = None  # --mamba-full-memory-ratio
    ssm_dtype: str | None = None  # --mamba-ssm-dtype
    draft_tokens: int = 0  # speculative decoding: draft tokens per request (0: off)
    overlap: bool = True  # False: --disable-overlap-schedule
    page_size: int = 1
    strategy: str | None = None  # --mamba-radix-cache-strategy (None: auto)


def knobs_from_args(arg: Callable[[str], Any], *, version: str | SglangVersion, architecture: str, attn_dp: int,
                    max_running_requests: int | None, draft_tokens: int, page_size: int) -> MambaKnobs:
    """The :class:`MambaKnobs` of a launch whose SGLang arguments ``arg(dest)`` returns by their
    ``server_args`` name (None when not passed). Speculative decoding sets ``--max-running-requests``
    to 48 when it is not given (0.5.9 ``server_args.py:2362-2366``; 0.5.23 ``arg_groups/speculative_hook.py``)."""
    mrr = max_running_requests
    if mrr is None and draft_tokens:
        mrr = SPECULATIVE_MAX_RUNNING_REQUESTS
    size, ratio = arg("max_mamba_cache_size"), arg("mamba_full_memory_ratio")
    strategy = arg("mamba_radix_cache_strategy") or arg("mamba_scheduler_strategy")
    return MambaKnobs(
        version=version, architecture=architecture, attn_dp=attn_dp, radix_cache=not arg("disable_radix_cache"),
        max_running_requests=mrr, max_mamba_cache_size=None if size is None else int(float(size)),
        full_memory_ratio=None if ratio is None else float(ratio),
        ssm_dtype=None if arg("mamba_ssm_dtype") is None else str(arg("mamba_ssm_dtype")),
        draft_tokens=int(draft_tokens or 0), overlap=not arg("disable_overlap_schedule"), page_size=page_size,
        strategy=None if strategy is None else str(strategy),
    )


@dataclass(frozen=True)
class MambaPool:
    """The state pool one attention-DP rank gets."""

    slots: int  # max_mamba_cache_size per rank
    reserved_bytes: float  # taken from rest before the KV pool (state slots + speculative intermediates)
    per_request_bytes: float
    ratio: int  # state slots per running request
    rule: str  # the branch that sized it, in words

    @property
    def max_running_cap(self) -> int:
        """The running requests (and request-table rows) the pool allows: ``slots // ratio``."""
        return self.slots // max(self.ratio, 1)


def mamba_ratio(k: MambaKnobs) -> int:
    """State slots per running request (``_calculate_mamba_ratio``)."""
    if not k.radix_cache:
        return 1
    extra = _extra_buffer(k)
    return SLOTS_PER_REQUEST + ((2 if k.overlap else 1) if extra else 0)


def _extra_buffer(k: MambaKnobs) -> bool:
    if k.strategy in ("extra_buffer", "extra_buffer_lazy"):
        return True
    if k.strategy not in (None, "auto") or not R.mamba_extra_buffer_auto(k.version):
        return False
    return k.architecture in EXTRA_BUFFER_ARCHITECTURES and (k.overlap or k.page_size > 1)


def mamba_pool(m: MambaState, tp: int, rest_bytes: float, knobs: MambaKnobs | None = None) -> MambaPool:
    """The slots and the bytes SGLang takes for the state pool out of ``rest_bytes`` (module docstring)."""
    k = knobs or MambaKnobs()
    v = as_version(k.version)
    ssm = ssm_dtype_bytes(k.ssm_dtype)
    state = replace(m, ssm_bytes=ssm) if ssm else m
    s = state_bytes_per_request(state, tp)
    ratio = mamba_ratio(k)
    if s <= 0:
        return MambaPool(0, 0.0, s, ratio, "no linear-attention state")
    dp = max(int(k.attn_dp), 1)
    r = MAMBA_FULL_MEMORY_RATIO if k.full_memory_ratio is None else float(k.full_memory_ratio)
    d = int(k.draft_tokens or 0)
    mrr = k.max_running_requests
    pad = 1 if R.mamba_pool_padding_slot(v) else 0
    per_rank_mrr = max(1, mrr // dp) if mrr is not None and pad else (mrr // dp if mrr is not None else None)
    rest = float(rest_bytes)
    if not R.mamba_joint_spec_solve(v):  # 0.5.9-0.5.12: the intermediates first, then the slots
        inter = s * (mrr // dp) * d if d and mrr is not None else 0.0
        rest -= inter
        if k.max_mamba_cache_size is not None:
            slots, rule = k.max_mamba_cache_size // dp, "--max-mamba-cache-size"
        elif not k.radix_cache and mrr is not None:
            slots, rule = mrr // dp, "--max-running-requests (radix cache off)"
        else:
            slots, rule = max(int(rest * r / (1 + r) // s), 0), f"memory ratio {r:g}"
        return MambaPool(max(slots, 0), inter + max(slots, 0) * s, s, ratio, rule)
    inter = 0.0
    if k.max_mamba_cache_size is not None:
        slots, rule = k.max_mamba_cache_size // dp, "--max-mamba-cache-size"
        if d and per_rank_mrr is not None:
            inter = s * (min(per_rank_mrr, slots // ratio) + pad) * d
    elif not k.radix_cache and mrr is not None:
        slots, rule = int(per_rank_mrr or 0), "--max-running-requests (radix cache off)"
        if d:
            inter = s * (slots + pad) * d
    else:
        budget = max(rest, 0.0) * r / (1 + r)
        rule = f"memory ratio {r:g}"
        if d:
            slots = int((budget - pad * s * (1 + d)) // (s * (1 + d / ratio)))
            inter = s * (min(per_rank_mrr if per_rank_mrr is not None else slots, slots // ratio) + pad) * d
        else:
            slots = int((budget - pad * s) // s)
    slots = max(slots, 0)
    return MambaPool(slots, inter + (slots + pad) * s, s, ratio, rule)
