"""Estimates of what is allocated outside weights + KV, in GiB (CUDA graphs: SGLang's
``model_executor/cuda_graph_runner.py``; custom allreduce: ``distributed/device_communicators/``;
torch symmetric memory and FlashInfer fusion: ``layers/communicator.py``; each figure cited below).

These are deliberately simple, documented estimates. The memory model scales
a calibrated graph measurement by them, and leans towards launching when only
the estimates are known (a wrong prune loses the best config forever).
"""

from __future__ import annotations

from autotune.sglang import releases as R
from autotune.sglang.defaults import decode_graph_batch_sizes, prefill_graph_token_sizes
from autotune.sglang.gpus import GpuKind
from autotune.sglang.models import ModelProfile
from autotune.sglang.versions import SglangVersion

GIB = float(2**30)
MIB = float(2**20)

#: Architectures SGLang 0.5.9 auto-enables FlashInfer allreduce fusion for (SM90/SM100, single node, TP > 1).
FUSION_AUTO_ARCHITECTURES = frozenset(
    {"DeepseekV3ForCausalLM", "GptOssForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM",
     "Qwen3MoeForCausalLM", "KimiK25ForConditionalGeneration"}
)
_QWEN_WORKSPACE = ("Qwen2", "Qwen3", "MiMo")


def comm_buffers_gib(
    gpu: GpuKind, tp_size: int, interconnect: str, *, custom_allreduce: bool, torch_symm_mem: bool
) -> float:
    """Communication buffers allocated *before* P is measured that vary between candidates.

    Custom all-reduce (~24 MiB per rank) only where SGLang keeps it enabled:
    world size 2/4/6/8 and (2 GPUs or full NVLink). Torch symmetric memory
    (64 MiB at 2/4 ranks, 128 MiB at 6/8) only on SM90/SM100 with NVLink
    multicast. NCCL communicators are the same for every candidate of one TP
    size and live in the base overhead.
    """
    total = 0.0
    nvlink = interconnect == "nvlink"
    if custom_allreduce and tp_size in (2, 4, 6, 8) and (tp_size == 2 or nvlink):
        total += (40 if gpu.rocm else 24) * MIB  # ROCm's buffer is 16 MiB, not 8 (custom_all_reduce.py:41-45)
    if torch_symm_mem and not gpu.rocm and gpu.sm_family in (90, 100) and nvlink and tp_size in (2, 4, 6, 8):
        total += (64 if tp_size <= 4 else 128) * MIB
    return total / GIB


def base_overhead_gib(tp_size: int) -> float:
    """CUDA context (~0.55 GiB) plus NCCL communicator buffers, ~0.15 GiB per peer.

    At TP 8 this is 1.60 GiB, which matches the seed case (P = 94.00 GiB on a
    97,887 MiB card); a calibration launch replaces it with the measured value.
    """
    return 0.55 + 0.15 * max(tp_size - 1, 0)


#: Decode CUDA graph memory. Dense part (any model): a pool base, per captured size a graph's private
#: buffers growing with the hidden size, and the largest batch's static activations (16 live tensors).
GRAPH_BASE_MIB = 64.0
GRAPH_PER_SIZE_MIB_PER_4K_HIDDEN = 8.0
GRAPH_LIVE_TENSORS = 16
#: MoE part, per MoE layer. The one published figure: a DeepSeek-V3-class model (MLA MoE, 61 layers,
#: hidden 7168) captures its decode graphs up to bs 256 at TP 8 (H200) in about 6 GB ("DeepSeek uses 6GB"
#: for the decode graph: SGLang PR #5893, issue #16143; Llama-4-Maverick, another MoE: 6.19 GB, issue #8538).
#: The split into a first-capture workspace, a per-size cost and a per-token cost has no published
#: breakdown: all three are [fitted] so that the kimi-k2-class profile (0.5.9 ladder up to 256: 36 sizes)
#: costs 5.99e9 B, that a larger max bs and more sizes cost more, and that the seed case's working
#: baseline (f 0.88, bs 512: 52 sizes, 7.4 GiB) still leaves an 8192-token prefill room.
GRAPH_MOE_FIXED_MIB_PER_LAYER_4K = 23.5
GRAPH_MOE_PER_SIZE_MIB_PER_LAYER_4K = 0.45
GRAPH_MOE_LIVE_TENSORS_PER_LAYER = 4
#: The published point the MoE part is fitted to: ~6 GB (decimal) at bs 256, TP 8.
GRAPH_DSV3_BS256_TP8_BYTES = 6e9
#: DP attention's padding at capture, per GPU: decode max bs x attention-DP size x 3 MiB, 1.5 MiB more above
#: max bs 300. SGLang's own estimate, the reserve its automatic mem_fraction_static sets aside for it ("DP
#: attention needs more padding for some operations", "much more for large cuda graph max bs": 0.5.23
#: ``arg_groups/memory_hook.py:372-378``, 0.5.9 ``server_args.py:1033-1041``); no measurement is published.
DP_PADDING_MIB = 3.0
DP_PADDING_LARGE_MIB = 1.5
DP_PADDING_LARGE_ABOVE_BS = 300

#: Where each memory constant of this module comes from (printed by benchmarks/sim_graph_bs.py).
PROVENANCE: dict[str, tuple[str, str]] = {
    "GRAPH_DSV3_BS256_TP8_BYTES": ("measured", "DeepSeek decode graph ~6 GB at bs 256, H200 TP 8: "
                                   "SGLang PR #5893, issue #16143"),
    "GRAPH_MOE_*": ("fitted", "split of that 6 GB into first-capture / per-size / per-token parts; the seed "
                    "case (f 0.88, bs 512) must still start and serve"),
    "GRAPH_BASE_MIB, GRAPH_PER_SIZE_*, GRAPH_LIVE_TENSORS": ("modelled", "dense-model graph pool"),
    "DP_PADDING_*": ("source", "DP attention's padding = SGLang's own auto-f reserve for it (0.5.23 "
                     "memory_hook.py:372-378); SGLang's estimate, not a measurement"),
    "PREFILL_ACT_*": ("modelled", "live tensors of one prefill chunk (hidden x 12 + active MLP)"),
    "attention workspace 384/512 MiB": ("source", "SGLANG_FLASHINFER_WORKSPACE_SIZE default (SGLang source)"),
}


def dp_padding_gib(max_bs: int, attn_dp: int) -> float:
    """DP attention's padding at decode-graph capture (0 without DP attention), per GPU."""
    if attn_dp <= 1 or max_bs <= 0:
        return 0.0
    per = DP_PADDING_MIB + (DP_PADDING_LARGE_MIB if max_bs > DP_PADDING_LARGE_ABOVE_BS else 0.0)
    return max_bs * attn_dp * per * MIB / GIB


def decode_graph_gib(model: ModelProfile, batch_sizes: list[int], tokens_per_req: int, attn_dp: int = 1) -> float:
    """Decode CUDA graphs of ``batch_sizes`` (each request ``tokens_per_req`` tokens wide), per GPU, with
    DP attention's padding (``attn_dp`` > 1).

    The same per GPU at any TP size: the published figure is TP 8, and MLA attention is replicated.
    """
    if not batch_sizes:
        return 0.0
    h4k = model.hidden_size / 4096
    n, max_tokens = len(batch_sizes), max(batch_sizes) * max(tokens_per_req, 1)
    mib = GRAPH_BASE_MIB + n * GRAPH_PER_SIZE_MIB_PER_4K_HIDDEN * h4k
    live = max_tokens * model.hidden_size * 2 * GRAPH_LIVE_TENSORS
    if model.is_moe:
        layers = model.num_layers
        mib += layers * h4k * (GRAPH_MOE_FIXED_MIB_PER_LAYER_4K + n * GRAPH_MOE_PER_SIZE_MIB_PER_LAYER_4K)
        live += max_tokens * layers * model.hidden_size * 2 * GRAPH_MOE_LIVE_TENSORS_PER_LAYER
    return (mib * MIB + live) / GIB + dp_padding_gib(max(batch_sizes), attn_dp)


def prefill_graph_gib(model: ModelProfile, max_tokens: int) -> float:
    """Prefill / piecewise CUDA graphs: ~2 MiB per captured size plus the largest one's activations."""
    sizes = prefill_graph_token_sizes(max_tokens)
    if not sizes:
        return 0.0
    return (len(sizes) * 2 * MIB + max(sizes) * model.hidden_size * 2 * 4) / GIB


def prefill_graph_extra_gib(prefill_gib: float, decode_gib: float, version: SglangVersion) -> float:
    """What prefill graphs add on top of the decode graphs: all of it, or from 0.5.22 (one shared pool,
    SGLang PR #28973) only what exceeds the decode graphs' pool. Static I/O buffers are neglected."""
    if R.shared_graph_pool(version):
        return max(prefill_gib - decode_gib, 0.0)
    return prefill_gib


def req_to_token_gib(rows: int, context_len: int, draft_tokens: int, version: SglangVersion) -> float:
    """The req_to_token table: (R [+1 in 0.5.23]) x (context + 4 + draft tokens) x 4 B."""
    extra = 1 if version.at_least("0.5.23") else 0
    return (rows + extra) * (context_len + 4 + draft_tokens) * 4 / GIB


def attention_workspace_gib(model: ModelProfile) -> float:
    """FlashInfer workspace: 384 MiB, 512 MiB for Qwen2/Qwen3/MiMo."""
    return (512 if model.architecture.startswith(_QWEN_WORKSPACE) else 384) * MIB / GIB


#: Live bf16 hidden-size tensors per token of a prefill chunk (plus the active MLP / experts' intermediates).
PREFILL_ACT_HIDDEN_TENSORS = 12


def prefill_bytes_per_token(model: ModelProfile, tp_size: int) -> int:
    """Activations one token of a prefill chunk needs at its peak (the simulator's runtime-OOM threshold)."""
    if model.is_moe:
        mlp = model.num_experts_per_tok * model.moe_intermediate_size * 2 * 2
    else:
        mlp = model.intermediate_size // max(tp_size, 1) * 2 * 3
    return int(model.hidden_size * 2 * PREFILL_ACT_HIDDEN_TENSORS + mlp)


def activations_gib(model: ModelProfile, tp_size: int, chunked_prefill_size: int, decode_batch: int) -> float:
    """Runtime activations: a prefill chunk's live tensors plus decode logits (bs x vocab x 4 B)."""
    prefill = max(chunked_prefill_size, 1) * prefill_bytes_per_token(model, tp_size)
    logits = max(decode_batch, 1) * model.vocab_size * 4
    return (prefill + logits) / GIB


def fusion_workspace_gib(model: ModelProfile, tp_size: int) -> float:
    """FlashInfer allreduce-fusion workspace: tp x 2048 x hidden x 2 B x 4 (lamport part capped ~2 GiB)."""
    if tp_size <= 1:
        return 0.0
    one = tp_size * 2048 * model.hidden_size * 2
    return (one + min(3 * one, 2 * GIB)) / GIB


def fusion_enabled(model: ModelProfile, gpu: GpuKind, tp_size: int, explicit: bool, dp_attention: bool = False) -> bool:
    """Whether FlashInfer allreduce fusion will run (explicit flag, or SGLang's auto-enable rule)."""
    if tp_size <= 1:
        return False
    if explicit:
        return True
    return (
        model.architecture in FUSION_AUTO_ARCHITECTURES
        and gpu.sm_family in (90, 100)
        and gpu.name != "h20"
        and not dp_attention
    )


def ladder_for(max_bs: int, *, speculative: bool, version: SglangVersion, req_rows: int) -> list[int]:
    """Decode sizes actually captured: the version's ladder, kept to bs <= req_to_token rows."""
    ladder = decode_graph_batch_sizes(max_bs, speculative=speculative, version=version)
    kept = [b for b in ladder if b <= req_rows]
    if ladder and max(ladder) > req_rows and req_rows not in kept:
        kept.append(req_rows)
    return kept
