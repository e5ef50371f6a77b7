"""Estimates of what is allocated outside weights + KV (reference sections 3.1-3.5), in GiB.

These are deliberately simple, documented estimates. The memory model scales
a calibrated graph measurement by them, and leans towards launching when only
the estimates are known (a wrong prune loses the best config forever).
"""

from __future__ import annotations

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
        total += 24 * MIB
    if torch_symm_mem and gpu.sm in (90, 100) and nvlink and tp_size in (2, 4, 6, 8):
        total += (64 if tp_size <= 4 else 128) * MIB
    return total / GIB


def base_overhead_gib(tp_size: int) -> float:
    """CUDA context (~0.55 GiB) plus NCCL communicator buffers, ~0.15 GiB per peer.

    At TP 8 this is 1.60 GiB, which matches the seed case (P = 94.00 GiB on a
    97,887 MiB card); a calibration launch replaces it with the measured value.
    """
    return 0.55 + 0.15 * max(tp_size - 1, 0)


def decode_graph_gib(
    model: ModelProfile,
    tp_size: int,
    batch_sizes: list[int],
    tokens_per_req: int,
) -> float:
    """Decode CUDA graphs: ~2 MiB bookkeeping per captured size, plus the shared memory
    pool sized by the largest graph's activations (hidden-size tensors and full-vocab logits)."""
    if not batch_sizes:
        return 0.0
    max_tokens = max(batch_sizes) * max(tokens_per_req, 1)
    per_token = model.hidden_size * 2 * 48 + model.vocab_size * 4 / max(min(tp_size, 2), 1)
    return (len(batch_sizes) * 2 * MIB + max_tokens * per_token) / GIB


def prefill_graph_gib(model: ModelProfile, max_tokens: int) -> float:
    """Prefill / piecewise CUDA graphs: ~2 MiB per captured size plus the largest one's activations."""
    sizes = prefill_graph_token_sizes(max_tokens)
    if not sizes:
        return 0.0
    return (len(sizes) * 2 * MIB + max(sizes) * model.hidden_size * 2 * 4) / GIB


def req_to_token_gib(rows: int, context_len: int, draft_tokens: int, version: SglangVersion) -> float:
    """The req_to_token table: (R [+1 in 0.5.23]) x (context + 4 + draft tokens) x 4 B."""
    extra = 1 if version.at_least("0.5.23") else 0
    return (rows + extra) * (context_len + 4 + draft_tokens) * 4 / GIB


def attention_workspace_gib(model: ModelProfile) -> float:
    """FlashInfer workspace: 384 MiB, 512 MiB for Qwen2/Qwen3/MiMo."""
    return (512 if model.architecture.startswith(_QWEN_WORKSPACE) else 384) * MIB / GIB


def activations_gib(model: ModelProfile, tp_size: int, chunked_prefill_size: int, decode_batch: int) -> float:
    """Runtime activations: a prefill chunk's live tensors plus decode logits (bs x vocab x 4 B)."""
    chunk = max(chunked_prefill_size, 1)
    if model.is_moe:
        mlp = model.num_experts_per_tok * model.moe_intermediate_size * 2 * 2
    else:
        mlp = model.intermediate_size // max(tp_size, 1) * 2 * 3
    prefill = chunk * (model.hidden_size * 2 * 12 + mlp)
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
        and gpu.sm in (90, 100)
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
