"""What changes release by release in SGLang's automatic values (read from each wheel; file names are inside it).

The flags themselves are in ``flags/release_tables/`` (extracted from the wheels); this
module holds the behaviour boundaries the memory model and the simulator need.
Each boundary names the first release that has it and where it was read.
Adding a release: extract its flags, read its ``server_args.py`` /
``arg_groups/memory_hook.py`` for these rules, and move a boundary if it moved.
"""

from __future__ import annotations

from autotune.sglang.versions import SglangVersion, as_version

__all__ = [
    "eagle_reserve_mib",
    "dsa_budgets_stored_fp8_row",
    "gpt_oss_disables_hybrid_swa",
    "max_bs_capped_by_max_running_requests",
    "mxfp4_pad_align",
    "mamba_extra_buffer_auto",
    "mamba_joint_spec_solve",
    "mamba_pool_padding_slot",
    "mla_flat_prefill_reserve",
    "new_memory_brackets",
    "prefill_graphs_default_on",
    "prefill_graphs_off_reason",
    "shared_graph_pool",
    "standalone_reserve_mib",
]

#: Prefill (piecewise) CUDA graphs on by default ("enabled by default", 0.5.10 server_args.py --disable-piecewise-cuda-graph).
PREFILL_GRAPHS_ON = "0.5.10"
#: 0.5.10 _handle_piecewise_cuda_graph turns them off under speculative decoding; 0.5.11 no longer does.
SPEC_DISABLES_PREFILL_GRAPHS = ("0.5.10", "0.5.10.post1")
#: DP attention and torch.compile turn them off (0.5.10-0.5.13 _handle_piecewise_cuda_graph; 0.5.14 per the
#: release-facts reading).
DP_ATTN_DISABLES_PREFILL_GRAPHS = ("0.5.10", "0.5.14")
#: EAGLE-family reserve in the automatic mem_fraction_static: +2 GiB in 0.5.9, +4 GiB in 0.5.10-0.5.13
#: (server_args.py _handle_gpu_memory_settings), gone from 0.5.14 (draft memory inside the budget).
EAGLE_RESERVE_4G = "0.5.10"
SPEC_RESERVE_GONE = "0.5.14"
#: MLA models reserve a flat 1.5 GiB for prefill graphs instead of 8 MiB per captured size (0.5.10 on).
MLA_FLAT_RESERVE = "0.5.10"
#: The 20-35 GiB bracket (max_bs 48/160, chunk 4096) and the 0.95 fallback when the capacity is unknown:
#: 0.5.20 arg_groups/memory_hook.py (0.5.19 still 24/80, chunk 2048 and 0.88).
NEW_BRACKETS = "0.5.20"
#: decode max_bs := --max-running-requests when that is smaller: 0.5.22 memory_hook.py:184.
MAX_BS_CAP = "0.5.22"
#: Prefill and decode graph backends capture into one shared memory pool, so the second phase reserves only
#: what exceeds the first's scratch: 0.5.22 runner_utils/pool.py get_or_create_global_graph_memory_pool
#: (used by full_cuda_graph_backend.py and tc_piecewise_cuda_graph_backend.py; absent in 0.5.14; SGLang
#: PR #28973 "Share CUDA graph memory pool across prefill and decode").
SHARED_GRAPH_POOL = "0.5.22"
#: MXFP4 MoE experts (GPT-OSS) padded after loading. 0.5.9 ``layers/quantization/mxfp4.py:324-355``: on SM100
#: with the FlashInfer MXFP4 runner (GPT-OSS's default on Blackwell, ``server_args.py:1370-1372``) and on
#: ROCm aiter, each rank's intermediate and the hidden size round up to 256; elsewhere (triton_kernels) the
#: intermediate to 32 only. 0.5.23 ``mxfp4.py:478-508``: 128 on SM100 FlashInfer and the CUTLASS SM90/SM120
#: paths, 256 on aiter. The releases between were not read: the 128 relaxation is placed at 0.5.23.
MXFP4_PAD_128 = "0.5.23"
#: GPT-OSS with the trtllm_mha attention backend (its default on SM100) turns hybrid SWA memory off, every
#: layer in the full pool: 0.5.9 ``server_args.py:1354-1362`` ("Disable hybrid SWA memory for GPT-OSS model
#: with trtllm_mha attention backend"; late-2025 releases did it for GPT-OSS on every backend). 0.5.23's
#: ``arg_groups/model_overrides/gpt_oss.py`` no longer does; the releases between were not read.
GPT_OSS_HYBRID_SWA_ON_TRTLLM = "0.5.23"
#: The Mamba state pool under speculative decoding: the draft's intermediate states solved jointly with the
#: slots inside the memory ratio's budget (0.5.13 ``model_runner_kv_cache_mixin.py:82``, "Joint solve"),
#: where 0.5.12 (``:78-137``) took ``max_running x draft tokens`` states first. Read in the 0.5.12 and 0.5.13 wheels.
MAMBA_JOINT_SPEC_SOLVE = "0.5.13"
#: Each Mamba pool's padding slot charged to the budget (``(slots + 1) x per_req``) and the radix-off slots
#: ``max(1, max_running // dp)``: 0.5.17 ``mem_cache/kv_cache_configurator.py:1816-1960`` (0.5.16 ``:1703-1812``
#: still ``slots x per_req``). Read in the 0.5.16 and 0.5.17 wheels.
MAMBA_PAD_SLOT = "0.5.17"
#: ``--mamba-radix-cache-strategy auto`` becomes ``extra_buffer`` for the architectures that support it when the
#: overlap scheduler or paging is on: 0.5.14 ``server_args.py:4385`` (0.5.13 ``server_args.py:1225``: auto is
#: ``no_buffer``). Read in the 0.5.13 and 0.5.14 wheels.
MAMBA_EXTRA_BUFFER_AUTO = "0.5.14"

#: DSA (DeepSeek V3.2) with an FP8 KV cache stores a 656 B latent row a layer (512 fp8 + 16 scale bytes + 64 bf16
#: rope: 0.5.3.post1 ``mem_cache/memory_pool.py:1138-1144``; 0.5.9 ``memory_pool.py:1407-1418`` fed by
#: ``model_executor/model_runner_kv_cache_mixin.py:212-247,535``). Its KV budget divided by that row from 0.5.17
#: (``model_executor/pool_configurator.py:199-212`` calls ``mem_cache/kv_cache_configurator.py:1985-2036``); up to
#: 0.5.16 it divided by ``(kv_lora_rank + qk_rope_head_dim) x 1 B`` = 576 B plus the indexer (0.5.3.post1
#: ``model_runner.py:1277-1293``, SGLang PR #11309; 0.5.9 ``model_runner_kv_cache_mixin.py:47-80``; 0.5.16
#: ``pool_configurator.py:187-216``), so the pool it then allocated outgrew the budget by 80 B a layer per token.
#: Read in the 0.5.3.post1, 0.5.4, 0.5.9, 0.5.12, 0.5.15, 0.5.16 and 0.5.17 wheels.
DSA_FP8_ROW_BUDGETED = "0.5.17"


def _v(version: str | SglangVersion) -> SglangVersion:
    return as_version(version)


def _between(v: SglangVersion, lo: str, hi: str) -> bool:
    return v.at_least(lo) and not as_version(hi) < v


def prefill_graphs_default_on(version: str | SglangVersion) -> bool:
    return _v(version).at_least(PREFILL_GRAPHS_ON)


def prefill_graphs_off_reason(version: str | SglangVersion, *, speculative: bool, dp_attention: bool,
                              torch_compile: bool = False) -> str | None:
    """Why the release turns its default-on prefill graphs off for this launch (None: it does not)."""
    v = _v(version)
    if speculative and _between(v, *SPEC_DISABLES_PREFILL_GRAPHS):
        return f"SGLang {v} turns prefill graphs off under speculative decoding"
    if (dp_attention or torch_compile) and _between(v, *DP_ATTN_DISABLES_PREFILL_GRAPHS):
        return f"SGLang {v} turns prefill graphs off under {'DP attention' if dp_attention else 'torch.compile'}"
    return None


def eagle_reserve_mib(version: str | SglangVersion) -> int:
    v = _v(version)
    if v.at_least(SPEC_RESERVE_GONE):
        return 0
    return 4096 if v.at_least(EAGLE_RESERVE_4G) else 2048


def standalone_reserve_mib(version: str | SglangVersion) -> int:
    return 0 if _v(version).at_least(SPEC_RESERVE_GONE) else 6144


def mla_flat_prefill_reserve(version: str | SglangVersion) -> bool:
    return _v(version).at_least(MLA_FLAT_RESERVE)


def new_memory_brackets(version: str | SglangVersion) -> bool:
    return _v(version).at_least(NEW_BRACKETS)


def shared_graph_pool(version: str | SglangVersion) -> bool:
    return _v(version).at_least(SHARED_GRAPH_POOL)


def max_bs_capped_by_max_running_requests(version: str | SglangVersion) -> bool:
    return _v(version).at_least(MAX_BS_CAP)


def mxfp4_pad_align(version: str | SglangVersion, *, sm_family: int = 0, rocm: bool = False) -> tuple[int, int]:
    """(intermediate-per-rank, hidden) alignment of MXFP4 expert weights after loading (:data:`MXFP4_PAD_128`)."""
    if rocm:
        return 256, 256
    if _v(version).at_least(MXFP4_PAD_128):
        return 128, 128
    return (256, 256) if sm_family == 100 else (32, 1)


def mamba_joint_spec_solve(version: str | SglangVersion) -> bool:
    return _v(version).at_least(MAMBA_JOINT_SPEC_SOLVE)


def mamba_pool_padding_slot(version: str | SglangVersion) -> bool:
    return _v(version).at_least(MAMBA_PAD_SLOT)


def mamba_extra_buffer_auto(version: str | SglangVersion) -> bool:
    return _v(version).at_least(MAMBA_EXTRA_BUFFER_AUTO)


def gpt_oss_disables_hybrid_swa(version: str | SglangVersion, architecture: str | None, *, sm_family: int = 0,
                                attention_backend: str | None = None) -> bool:
    """Whether SGLang sizes a GPT-OSS pool without hybrid SWA memory (:data:`GPT_OSS_HYBRID_SWA_ON_TRTLLM`)."""
    if architecture != "GptOssForCausalLM" or _v(version).at_least(GPT_OSS_HYBRID_SWA_ON_TRTLLM):
        return False
    backend = attention_backend or ("trtllm_mha" if sm_family == 100 else None)  # the SM100 default
    return backend == "trtllm_mha"


def dsa_budgets_stored_fp8_row(version: str | SglangVersion) -> bool:
    """Whether a DSA model's KV budget divides by the FP8 row as stored (:data:`DSA_FP8_ROW_BUDGETED`)."""
    return _v(version).at_least(DSA_FP8_ROW_BUDGETED)
