"""What SGLang does differently on AMD Instinct GPUs (ROCm / HIP), as autotune needs it.

Each rule cites the SGLang 0.5.23 file it is read from (``srt/`` below is
``python/sglang/srt/`` of the release):

- Attention back-end default: ``aiter`` for MHA; for MLA ``aiter`` only when the KV
  heads per rank are 16 or 128, else ``triton`` (``arg_groups/model_override_base.py:326-345``).
  FlashInfer, FA3/FA4, FlashMLA, CUTLASS MLA and the TRT-LLM kernels are CUDA builds.
- ``aiter`` with a context over 8192 tokens multiplies ``mem_fraction_static`` by 0.85, a
  user-given one too, unless ``SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION`` is set
  (``arg_groups/attention_hook.py:243-268``).
- Prefill (breakable) CUDA graphs are CUDA-only by default
  (``model_executor/cuda_graph_config.py:119-123``: ``BREAKABLE if is_cuda() else DISABLED``).
- Custom allreduce: the buffer is 16 MiB (8 MiB on CUDA; ``distributed/device_communicators/
  custom_all_reduce.py:41-45``); the "more than two PCIe-only GPUs" rule holds on ROCm too, with
  xGMI links counted as NVLink (``custom_all_reduce_utils.py:442-505``, ``is_full_nvlink`` asks
  amdsmi), and the P2P test is skipped ("p2p is always enabled between XGMI connected GPUs").
  Instinct nodes are a full xGMI mesh, so custom allreduce is live at TP 2-8. Quick allreduce
  (quantized, gfx94x/gfx95x) is a complement that stays off unless ``ROCM_QUICK_REDUCE_QUANTIZATION``
  names a level (``quick_all_reduce.py:28-38, 168-190``).
- FlashInfer allreduce fusion is never applied: ``_is_sm90_supported = _is_cuda and ...``
  (``layers/layer_boundary/residual/add_norm.py:53-54``); aiter has its own fusion.
- FP8 on gfx94x (MI300X/MI325X) is ``float8_e4m3fnuz`` (``kernels/ops/quantization/fp8_kernel.py:95-103``):
  one byte like e4m3fn, so the KV cell and the weight bytes do not change; gfx950 uses e4m3fn.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AITER_F_FACTOR", "CUSTOM_AR_MAX_MIB", "CUDA_ONLY_ATTENTION", "CUDA_ONLY_KNOBS", "aiter_f_factor",
           "default_attention_backend", "fp8_is_fnuz", "is_rocm"]

#: f x 0.85 under aiter with a context over 8192 (attention_hook.py:243-268).
AITER_F_FACTOR = 0.85
AITER_F_CONTEXT_ABOVE = 8192
#: The custom allreduce IPC buffer (custom_all_reduce.py:41-45); CUDA's is 8 MiB.
CUSTOM_AR_MAX_MIB = 16
#: Attention back-ends built for CUDA only (no ROCm kernels in SGLang 0.5.23).
CUDA_ONLY_ATTENTION = frozenset({"flashinfer", "fa3", "fa4", "flashmla", "cutlass_mla", "trtllm_mla", "trtllm_mha"})
#: Knobs (and values) that exist for CUDA only, with the reason ``knobs.rules`` prints.
CUDA_ONLY_KNOBS: dict[str, str] = {
    "flashinfer_allreduce_fusion": ("ROCm: FlashInfer allreduce fusion is CUDA-only (add_norm.py:53-54: "
                                    "_is_sm90_supported = _is_cuda and ...)"),
    "enable_torch_symm_mem": ("ROCm: torch symmetric-memory allreduce is CUDA-only (torch_symm_mem.py:24-26: "
                              "torch_symm_mem_available only if _is_cuda)"),
    "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "ROCm: the PCIe-IPC allreduce is a FlashInfer (CUDA) kernel (pcie_ipc_ar.py)",
}


def is_rocm(gpu: Any) -> bool:
    """Whether ``gpu`` (a :class:`~autotune.sglang.hardware.gpus.GpuKind`, or anything with ``vendor``) is AMD."""
    return getattr(gpu, "vendor", "nvidia") == "amd"


def default_attention_backend(model: Any, tp_size: int) -> str:
    """SGLang's attention back-end on ROCm when none is given (model_override_base.py:326-345)."""
    if not model.is_mla:
        return "aiter"
    heads = max(int(model.num_kv_heads) // max(tp_size, 1), 1)
    return "aiter" if heads in (16, 128) else "triton"


def aiter_f_factor(backend: str | None, model: Any, tp_size: int, context_len: int) -> float:
    """The factor SGLang applies to mem_fraction_static on ROCm (1.0 when it does not)."""
    chosen = backend or default_attention_backend(model, tp_size)
    return AITER_F_FACTOR if chosen == "aiter" and context_len > AITER_F_CONTEXT_ABOVE else 1.0


def fp8_is_fnuz(gpu: Any) -> bool:
    """FP8 weights and KV are e4m3fnuz on gfx94x (same byte size as e4m3fn)."""
    return is_rocm(gpu) and str(getattr(gpu, "gfx", "")).startswith("gfx94")
