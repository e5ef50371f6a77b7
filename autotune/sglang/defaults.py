"""SGLang's automatic values, per version (0.5.9 ``server_args.py``;
0.5.23 ``arg_groups/memory_hook.py`` and ``arg_groups/pipeline.py``; each rule cites its lines below).

These are what a server picks for the knobs the user did not pass: the
baseline trial is "SGLang's defaults", and the memory model needs the same
numbers to predict a launch. All sizes are MiB unless a name says otherwise.
"""

from __future__ import annotations

from autotune.sglang import releases as R
from autotune.sglang.versions import SglangVersion, as_version

__all__ = [
    "auto_chunked_prefill_size",
    "auto_cuda_graph_max_bs",
    "auto_mem_fraction_static",
    "decode_graph_batch_sizes",
    "prefill_graph_token_sizes",
    "default_max_running_requests",
    "req_to_token_pool_size",
    "auto_speculative_params",
    "reserved_mib",
    "SPECULATIVE_MAX_RUNNING_REQUESTS",
]

_GIB_MIB = 1024
#: Speculative decoding sets the default of --max-running-requests to this (all versions).
SPECULATIVE_MAX_RUNNING_REQUESTS = 48

_V = as_version


def _new_brackets(version: SglangVersion) -> bool:
    """0.5.20 changed the 20-35 GiB bracket and the unknown-capacity fallback (releases.NEW_BRACKETS)."""
    return R.new_memory_brackets(version)


def auto_chunked_prefill_size(gpu_mem_mib: int | None, version: str | SglangVersion) -> int:
    """Default ``--chunked-prefill-size`` for a card of ``gpu_mem_mib`` (section 2.1)."""
    v = _V(version)
    if gpu_mem_mib is None:
        return 4096
    if gpu_mem_mib < 20 * _GIB_MIB:
        return 2048
    if gpu_mem_mib < 35 * _GIB_MIB:
        return 4096 if _new_brackets(v) else 2048
    if gpu_mem_mib < 60 * _GIB_MIB:
        return 4096
    if gpu_mem_mib < 160 * _GIB_MIB:
        return 8192
    return 16384


def auto_cuda_graph_max_bs(gpu_mem_mib: int | None, tp_size: int, version: str | SglangVersion,
                           max_running_requests: int | None = None) -> int:
    """Default decode ``cuda_graph_max_bs`` (section 2.1; the column depends on tp < 4).

    From 0.5.22 a smaller ``--max-running-requests`` caps it (memory_hook.py:184).
    """
    v = _V(version)
    value = _bracket_max_bs(gpu_mem_mib, tp_size, v)
    if max_running_requests is not None and R.max_bs_capped_by_max_running_requests(v):
        value = min(value, max(max_running_requests, 1))
    return value


def _bracket_max_bs(gpu_mem_mib: int | None, tp_size: int, v: SglangVersion) -> int:
    small_tp = tp_size < 4
    if gpu_mem_mib is None:
        return 160
    if gpu_mem_mib < 20 * _GIB_MIB:
        return 8
    if gpu_mem_mib < 35 * _GIB_MIB:
        if _new_brackets(v):
            return 48 if small_tp else 160
        if v < _V("0.5.9"):
            return 16 if small_tp else 80
        return 24 if small_tp else 80
    if gpu_mem_mib < 60 * _GIB_MIB:
        return 32 if small_tp else 160
    if gpu_mem_mib < 160 * _GIB_MIB:
        return 256 if small_tp else 512
    return 512


def prefill_graph_token_sizes(max_tokens: int) -> list[int]:
    """Prefill / piecewise CUDA graph token sizes up to ``max_tokens`` (58 entries for 8192)."""
    sizes = list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
    sizes += list(range(576, 1025, 64)) + list(range(1280, 4097, 256))
    sizes += list(range(4608, max(max_tokens, 4608) + 1, 512))
    return [s for s in sizes if s <= max_tokens]


def _prefill_graph_on_by_default(version: SglangVersion, speculative: bool = False, dp_attention: bool = False) -> bool:
    """Prefill (piecewise) graphs: opt-in in 0.5.9, on by default from 0.5.10 unless the release turns them off."""
    if not R.prefill_graphs_default_on(version):
        return False
    return R.prefill_graphs_off_reason(version, speculative=speculative, dp_attention=dp_attention) is None


def reserved_mib(
    gpu_mem_mib: int,
    *,
    tp_size: int,
    pp_size: int = 1,
    version: str | SglangVersion,
    chunked_prefill_size: int,
    cuda_graph_max_bs: int,
    speculative_algorithm: str | None = None,
    is_mla: bool = False,
    dp_attention_size: int = 1,
    prefill_graph: bool | None = None,
    max_total_tokens: int | None = None,
) -> float:
    """The MiB SGLang's heuristic keeps out of the static pool (section 2.2)."""
    v = _V(version)
    reserved = 512.0 + max(chunked_prefill_size, 2048) * 1.5 + cuda_graph_max_bs * 2
    reserved += tp_size * pp_size / 8 * 1024
    if dp_attention_size > 1:
        reserved += cuda_graph_max_bs * dp_attention_size * 3
        if cuda_graph_max_bs > 300:
            reserved += cuda_graph_max_bs * dp_attention_size * 1.5
    if prefill_graph is None:
        prefill_graph = _prefill_graph_on_by_default(v, bool(speculative_algorithm), dp_attention_size > 1)
    if prefill_graph:
        if is_mla and R.mla_flat_prefill_reserve(v):
            reserved += 1.5 * 1024  # server_args / memory_hook: MLA prefill graph reserve (0.5.10 on)
        else:
            cap = 2048 if is_mla else chunked_prefill_size
            if max_total_tokens is not None:
                cap = min(cap, max_total_tokens)
            reserved += len(prefill_graph_token_sizes(cap)) * 8
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    algo = (speculative_algorithm or "").upper()
    if algo == "STANDALONE":  # removed in 0.5.14: draft memory is inside the budget there
        reserved += R.standalone_reserve_mib(v)
    elif algo and algo != "NGRAM":  # EAGLE family: +2 GiB in 0.5.9, +4 GiB in 0.5.10-0.5.13
        reserved += R.eagle_reserve_mib(v)
    return reserved


def auto_mem_fraction_static(
    gpu_mem_mib: int | None,
    *,
    tp_size: int,
    pp_size: int = 1,
    version: str | SglangVersion,
    chunked_prefill_size: int | None = None,
    cuda_graph_max_bs: int | None = None,
    speculative_algorithm: str | None = None,
    is_mla: bool = False,
    dp_attention_size: int = 1,
    prefill_graph: bool | None = None,
    max_total_tokens: int | None = None,
) -> float:
    """SGLang's automatic ``mem_fraction_static`` (section 2.2), rounded to 3 decimals.

    ``chunked_prefill_size`` / ``cuda_graph_max_bs`` default to their automatic
    values. Unknown capacity falls back to 0.88 (before 0.5.20) or 0.95.
    ``prefill_graph`` defaults to what the version does on CUDA (opt-in in 0.5.9).
    """
    v = _V(version)
    if gpu_mem_mib is None or gpu_mem_mib <= 0:
        return 0.95 if _new_brackets(v) else 0.88
    if chunked_prefill_size is None:
        chunked_prefill_size = auto_chunked_prefill_size(gpu_mem_mib, v)
    if cuda_graph_max_bs is None:
        cuda_graph_max_bs = auto_cuda_graph_max_bs(gpu_mem_mib, tp_size, v)
    reserved = reserved_mib(
        gpu_mem_mib,
        tp_size=tp_size,
        pp_size=pp_size,
        version=v,
        chunked_prefill_size=chunked_prefill_size,
        cuda_graph_max_bs=cuda_graph_max_bs,
        speculative_algorithm=speculative_algorithm,
        is_mla=is_mla,
        dp_attention_size=dp_attention_size,
        prefill_graph=prefill_graph,
        max_total_tokens=max_total_tokens,
    )
    return round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)


def decode_graph_batch_sizes(
    max_bs: int,
    *,
    speculative: bool,
    version: str | SglangVersion,
    disable_padding: bool = False,
) -> list[int]:
    """The decode batch sizes SGLang captures CUDA graphs for (section 3.1)."""
    v = _V(version)
    if max_bs <= 0:
        return []
    if disable_padding:
        return list(range(1, max_bs + 1))
    if speculative:
        sizes = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4))
        sizes += list(range(72, 257, 8)) + list(range(272, max(max_bs, 272) + 1, 16))
    else:
        sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 497, 16))
        sizes += list(range(512, max(max_bs, 512) + 1, 32))
    sizes = [s for s in sizes if s <= max_bs]
    if v.at_least("0.5.15") and (not sizes or sizes[-1] != max_bs):
        sizes.append(max_bs)
    return sizes


def req_to_token_pool_size(
    kv_tokens: int,
    context_len: int,
    version: str | SglangVersion,
    speculative: bool,
    user: int | None = None,
) -> int:
    """Rows of the req_to_token table (``R`` of section 1.4)."""
    v = _V(version)
    if user is None and speculative:
        user = SPECULATIVE_MAX_RUNNING_REQUESTS
    estimate = min(max(int(kv_tokens / max(context_len, 1) * 512), 2048), 4096)
    if v.regime == "A" and user is not None:
        return user
    return estimate if user is None else min(estimate, max(user, 1))


def default_max_running_requests(
    kv_tokens: int,
    context_len: int,
    version: str | SglangVersion,
    speculative: bool,
    user: int | None = None,
    *,
    dp_size: int = 1,
) -> int:
    """The ``max_running_requests`` a server reports (section 1.4).

    ``user`` is ``--max-running-requests`` (None = unset; speculative decoding
    then defaults it to 48). ``dp_size`` divides a user value (0.5.9: dp_size;
    0.5.23: the attention-DP size, pass that).
    """
    v = _V(version)
    if user is None and speculative:
        user = SPECULATIVE_MAX_RUNNING_REQUESTS
    estimate = min(max(int(kv_tokens / max(context_len, 1) * 512), 2048), 4096)
    half = kv_tokens // 2
    if v.regime == "A":
        pool = user if user is not None else estimate
        wanted = half if user is None else user // max(dp_size, 1)
        return min(wanted, pool)
    if user is None:
        return min(estimate, half)
    return min(max(1, user // max(dp_size, 1)), half)


_AUTO_5_4_8 = frozenset({"LlamaForCausalLM", "Grok1ForCausalLM", "Grok1ModelForCausalLM"})


def auto_speculative_params(
    algorithm: str,
    architecture: str,
    *,
    version: str | SglangVersion | None = None,
) -> tuple[int, int, int]:
    """(num_steps, eagle_topk, num_draft_tokens) SGLang picks when steps are unset (section 4).

    NGRAM: topk is the BFS breadth (10), 12 draft tokens, steps = draft // topk.
    """
    algo = algorithm.upper()
    if algo == "NGRAM":
        return (12 // 10, 10, 12)
    if algo == "STANDALONE":
        return (3, 1, 4)
    if architecture in _AUTO_5_4_8:
        return (5, 4, 8)
    return (3, 1, 4)
