"""What each GPU kind achieves, not what its datasheet says (private to :mod:`autotune.sim.perf.model`).

The catalogue (:mod:`autotune.sglang.gpus`) holds datasheet figures: HBM bandwidth and dense BF16
tensor throughput. Kernels reach a share of them that differs by kind (memory controller, SM count,
clocks), so the speed model reads the shares here, one row per kind. Each figure says what it is:

* **published**: a public microbenchmark of that kind (cited on its line);
* **modelled**: carried over from a like kind, or a physical estimate: no microbenchmark found;
* **fitted**: chosen on the published serving points of ``tests/data/published_speed`` (the
  fitted ones only, never a held-out set: :mod:`autotune.sim.perf.fitted` names them) by
  ``benchmarks/sim_speed_fit.py``. A fitted figure is a calibration, not a validation.

Columns:

* ``hbm``: share of the datasheet bandwidth that weight and KV streaming reaches in decode.
  Hopper: FlashMLA's dense decode kernel reaches 3000 GB/s on H800 SXM5 (3.35 TB/s HBM3, same
  memory as H100 SXM): 0.90 at best (https://github.com/deepseek-ai/FlashMLA README, "up to
  3000 GB/s in memory-bound configuration"); the same benchmark on an H100 SXM printed 2826 GB/s,
  0.84 (https://github.com/ai-bot-pro/achatbot/pull/123). GEMV-shaped weight reads of a whole
  decoder are below a tuned attention kernel's best: 0.85.
* ``gemm``: share of the dense (BF16, or FP8/FP4 where the weights are: see
  :func:`gemm_peak_factor`) tensor peak that decode-sized GEMMs reach (0.55, the model's
  former single figure, **modelled**).
* ``prefill``: the same for prefill's large GEMMs (0.6, **modelled**).
* ``attention``: share of the BF16 peak that a compute-bound attention kernel reaches. FlashMLA
  decode: 660 TFLOPS on H800 SXM5 (989 dense): 0.67 (FlashMLA README); on H20 (148 TFLOPS dense)
  FlashMLA decode at two query tokens ran 117-130 TFLOPS: 0.85
  (https://github.com/deepseek-ai/FlashMLA/issues/30), and FlashAttention-3 forward 126 TFLOPS
  (https://github.com/Dao-AILab/flash-attention/issues/1310): a GPU with little compute per byte
  is easy to saturate.
* ``eager``: the CPU's eager launch per layer on such a node, as a multiple of
  ``forward.EAGER_CPU_PER_LAYER_S`` (prefill runs eager).
* ``moe``: the share of the dense GEMMs' bandwidth that the routed experts' grouped GEMM reaches
  (SGLang's Triton fused MoE: many small per-expert GEMMs over a few padded rows each).
* ``kernel_floor_s``: the least a small kernel (norm, rope, top-k, a GEMM over a few rows) costs
  on the GPU when replayed from a CUDA graph: launch latency inside the graph plus a kernel's
  ramp-up and tail (**modelled**: a few microseconds, the order NVIDIA's CUDA graphs post measures for
  short kernels replayed from a graph, https://developer.nvidia.com/blog/cuda-graphs/).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from autotune.sglang.hardware.rocm import is_rocm

__all__ = ["GPU_SPEED", "GpuSpeed", "gemm_peak_factor", "gemm_speed_factor", "gpu_speed", "w8a8_fp8"]


@dataclass(frozen=True)
class GpuSpeed:
    """Achievable shares of one GPU kind's datasheet figures (module docstring)."""

    hbm: float
    gemm: float
    prefill: float
    attention: float
    kernel_floor_s: float
    moe: float  # the routed experts' grouped GEMM: share of the dense GEMMs' bandwidth it reaches
    eager: float  # the CPU's eager launch per layer (forward.EAGER_CPU_PER_LAYER_S) x this on such a node
    kind: str  # where the row comes from: "published", "modelled", "fitted" (the fields fitted: its source)
    source: str


#: [fitted on fitted.FITTED_SETS, 39 sets] the kernel floor, the GEMM and prefill shares and the eager launch x4
#: (prefill runs eager; SGLang's Python launch path is slower than the former 150 / 300 us a layer).
KERNEL_FLOOR_S = 9e-6
GEMM_SHARE = 0.55
PREFILL_SHARE = 0.45
EAGER_SCALE = 4.0
#: [fitted on fitted.MOE_SETS, the 20 MoE sets on NVIDIA kinds] the routed experts' grouped GEMM streams at 0.8 of
#: the dense share (0.65 while one share served both vendors: the AMD sets held it down).
MOE_SHARE = 0.8
#: [fitted on fitted.AMD_MOE_SETS, 4 sets on MI300X] the same share on AMD kinds (0.65), fitted apart: on ROCm the
#: routed experts run other kernels than CUDA's Triton fused MoE (SGLang 0.5.9 layers/quantization/fp8.py:98-103
#: takes aiter's ``fused_moe`` under ``SGLANG_USE_AITER`` on HIP; otherwise the Triton kernel compiled for CDNA).
MOE_SHARE_AMD = 0.65
_FITTED = "kernel floor, GEMM/prefill/MoE shares, eager launch fitted (fitted.py)"
_HOPPER_HBM = "FlashMLA decode 3000 GB/s on H800 SXM5 (README), 2826 GB/s on H100 SXM (achatbot PR #123)"
_ATTN = "attention: FlashMLA 660 TFLOPS on H800 SXM5 (README)"


def _fitted(hbm: float, attention: float, source: str, moe: float = MOE_SHARE) -> GpuSpeed:
    return GpuSpeed(hbm, GEMM_SHARE, PREFILL_SHARE, attention, KERNEL_FLOOR_S, moe, EAGER_SCALE, "fitted",
                    f"{source}; {_FITTED}")


#: The default row: every kind without its own (its datasheet figures still differ): Hopper's published HBM
#: share, the fitted rest.
DEFAULT = _fitted(0.85, 0.67, f"hbm: {_HOPPER_HBM} (published); {_ATTN}")
#: Kinds whose row stays as the seed case (8 x RTX PRO 6000 over PCIe, measured there) was fitted with: no
#: published point of them was fitted, and their constants keep that node's observations (its PCIe allreduce
#: constants in perf/comm.py were chosen with these, its batch-1 TPOT is held in tests/test_sim_perf.py).
SEED_CALIBRATED = frozenset({"rtx-pro-6000", "rtx-5090"})
GPU_SPEED: dict[str, GpuSpeed] = {
    # hbm [fitted on fitted.GPU_SETS[kind]]; one kernel floor for all (a floor per kind was tried and not taken:
    # docs/simulator-speed.md, "Refitted after the second stream")
    "h100": _fitted(0.92, 0.67, f"hbm fitted (the published FlashMLA figures: {_HOPPER_HBM}); {_ATTN}"),
    "h200": _fitted(0.75, 0.67, f"hbm fitted; {_ATTN}"),
    "b200": _fitted(0.85, 0.67, "hbm fitted; attention: Hopper's"),
    "a100-80": _fitted(0.75, 0.67, "hbm fitted; attention: Hopper's"),
    "mi300x": _fitted(0.65, 0.67, "hbm and MoE share (AMD's) fitted; attention: Hopper's", moe=MOE_SHARE_AMD),
    # one fitted set only: hbm stays H100's published benchmark
    "h20": _fitted(0.85, 0.85, "attention: FlashMLA 117-130 of 148 TFLOPS (FlashMLA issue #30), FA3 126 TFLOPS "
                   "(flash-attention issue #1310) (published); hbm: H100's benchmark (modelled)"),
    "rtx-pro-6000": GpuSpeed(0.80, 0.55, 0.6, 0.67, 3e-6, 1.0, 1.0, "modelled",
                             "GDDR7; as the seed case was fitted with (the former single figures)"),
    "rtx-5090": GpuSpeed(0.80, 0.55, 0.6, 0.67, 3e-6, 1.0, 1.0, "modelled", "GDDR7, as RTX PRO 6000"),
}


def gpu_speed(gpu: Any) -> GpuSpeed:
    """The achievable-share row of a GPU kind (a catalogue kind, or a custom one: the default row)."""
    row = GPU_SPEED.get(str(getattr(gpu, "name", "")))
    if row is not None:
        return row
    return replace(DEFAULT, moe=MOE_SHARE_AMD) if is_rocm(gpu) else DEFAULT


#: Methods whose GEMMs run FP8 x FP8 on tensor cores (activations quantised per token group on the fly).
FP8_METHODS = frozenset({"fp8", "modelopt_fp8", "w8a8_fp8", "fbgemm_fp8", "ptpc_fp8"})


#: [fitted on fitted.FP8_SETS] What block-scaled FP8 GEMMs reach of the FP8 peak, as a multiple of what BF16 GEMMs
#: reach of theirs (1.0: the datasheets' 2x holds in practice). SGLang's block-FP8 path quantises every activation
#: per token group before the GEMM and rescales per 128 x 128 block inside it; the one published comparison in the
#: fitted sets on one model and GPU (GPUStack, Qwen3-14B on H100) measured FP8's median TTFT 1.24x lower than
#: BF16's.
FP8_GEMM_RELATIVE = 0.6


def w8a8_fp8(model: Any, gpu: Any) -> bool:
    """This checkpoint's GEMMs run FP8 x FP8 on ``gpu``'s FP8 tensor cores, each after quantising its activations.

    An FP8 checkpoint on a GPU without FP8 tensor cores (A100) runs weight-only: SGLang 0.5.9
    ``layers/quantization/fp8.py:240-244`` switches to Marlin there, whose GEMM reads FP8 weights and computes in
    BF16 ("Activations not quantized for marlin", ``fp8.py:582``): no activation quantisation, BF16's peak."""
    return str(getattr(model, "quant_method", None) or "").lower() in FP8_METHODS and gemm_peak_factor(model, gpu) == 2.0


def gemm_speed_factor(model: Any, gpu: Any) -> float:
    """:func:`gemm_peak_factor` with FP8's achieved share against BF16's (``FP8_GEMM_RELATIVE``)."""
    peak = gemm_peak_factor(model, gpu)
    return peak * FP8_GEMM_RELATIVE if w8a8_fp8(model, gpu) else peak


def gemm_peak_factor(model: Any, gpu: Any) -> float:
    """The tensor peak of this checkpoint's GEMMs as a multiple of the BF16 dense peak.

    FP8 checkpoints run W8A8 GEMMs (SGLang's block-FP8 path: DeepGEMM / CUTLASS / Triton) on FP8 tensor
    cores, twice the BF16 dense peak on every kind that has them (Ada, Hopper, Blackwell: NVIDIA's
    datasheets; MI300X/MI355X: AMD's) **[published datasheets]**; NVFP4 checkpoints W4A4 on Blackwell,
    four times. Weight-only quantisation (AWQ, GPTQ, MXFP4 experts dequantised) computes in BF16: 1.
    """
    method = str(getattr(model, "quant_method", None) or "").lower()
    amd = is_rocm(gpu)
    sm = int(getattr(gpu, "sm", 0) or 0)
    fp8_cores = (amd and getattr(gpu, "gfx", "") in ("gfx942", "gfx950")) or sm >= 89
    if method in FP8_METHODS and fp8_cores:
        return 2.0
    if method == "modelopt_fp4" and sm >= 100:
        return 4.0
    return 1.0
