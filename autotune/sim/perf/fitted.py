"""Which published sets each fitted constant of the speed model was fitted on (issue 32).

``benchmarks/sim_speed_fit.py`` chose the constants marked **fitted** in :mod:`autotune.sim.perf.gpu`,
:mod:`autotune.sim.perf.model` and :mod:`autotune.sim.perf.knobs` on these sets of ``tests/data/published_speed``
only: the sets ``holdout.yaml`` lists were never evaluated while fitting. A fitted constant is a calibration,
not a validation; the held-out sets are what ``benchmarks/sim_vs_published.py`` validates against.
"""

from __future__ import annotations

from autotune.sglang.hardware.gpus import GPUS

#: Every fitted set with a modelled point: (the GPU kind it ran on, a MoE model, speculative decoding, an
#: attention backend named in its flags).
FITTED: dict[str, tuple[str, bool, bool, bool]] = {
    "amd-blog-2025-09-deepseek-v3-mtp-mi300x-random": ("mi300x", True, True, True),
    "amd-blog-2025-09-deepseek-v3-mtp-mi300x-sharegpt": ("mi300x", True, True, True),
    "cookbook-llama31-70b-a100-tp8-conc-1k1k": ("a100-80", False, False, False),
    "datacrunch-llama33-70b-h200-tp4-offline-lengths": ("h200", False, False, False),
    "datacrunch-llama33-70b-h200-tp4-rate-random1k": ("h200", False, False, False),
    "datacrunch-llama33-70b-h200-tp4-rate-sharegpt": ("h200", False, False, False),
    "gpustack-dsr1-0528-h200-dpattn-random-lengths": ("h200", True, False, False),
    "gpustack-dsr1-0528-h200-tp8-sharegpt-options": ("h200", True, True, False),
    "gpustack-glm-4.6-fp8-h200-tp4-random-lengths": ("h200", True, False, False),
    "gpustack-glm-4.6-h200-quant-tp-ep": ("h200", True, False, False),
    "gpustack-qwen3-14b-a100-sharegpt": ("a100-80", False, False, False),
    "gpustack-qwen3-14b-fp8-h100-sharegpt-attention-backend": ("h100", False, False, True),
    "gpustack-qwen3-14b-h100-sharegpt-fp8": ("h100", False, False, False),
    "gpustack-qwen3-235b-a22b-2507-h100-tp8-sharegpt": ("h100", True, False, False),
    "gpustack-qwen3-32b-h100-sharegpt": ("h100", False, False, False),
    "gpustack-qwen3-8b-fp8-h100-c4-attention-backend": ("h100", False, False, True),
    "gpustack-qwen3-8b-h100-c4-cuda-graph-max-bs": ("h100", False, False, False),
    "gpustack-qwen3-8b-h100-c4-fp8": ("h100", False, False, False),
    "lmsys-blog-2025-08-gpt-oss-120b-b200-tp4-bs1-quant": ("b200", True, False, False),
    "lmsys-blog-2025-08-gpt-oss-120b-h100-tp8-bs1-quant": ("h100", True, False, True),
    "sgl-cookbook-deepseek-v3-mi300x-tp8": ("mi300x", True, True, False),
    "sgl-cookbook-deepseek-v3.2-exp-b200": ("b200", True, True, False),
    "sgl-cookbook-dsr1-0528-fp8-b200-tp8-1k1k": ("b200", True, False, False),
    "sgl-cookbook-dsr1-0528-fp8-b200-tp8-1k8k": ("b200", True, False, False),
    "sgl-cookbook-dsr1-0528-fp8-b200-tp8-8k1k": ("b200", True, False, False),
    "sgl-cookbook-gpt-oss-120b-b200-tp8-sharegpt": ("b200", True, False, False),
    "sgl-cookbook-kimi-k2-b200-dpattn": ("b200", True, False, False),
    "sgl-cookbook-kimi-k2-mi300x-tp8-1k1k": ("mi300x", True, False, False),
    "sgl-cookbook-qwen3-235b-a22b-2507-b200-tp8-1k1k": ("b200", True, False, False),
    "sgl-cookbook-qwen3-235b-a22b-2507-b200-tp8-1k8k": ("b200", True, False, False),
    "sgl-cookbook-qwen3-235b-a22b-2507-b200-tp8-8k1k": ("b200", True, False, False),
    "sgl-cookbook-qwen3-next-80b-a3b-b200-tp8-sharegpt": ("b200", True, False, False),
    "sglang-attnbench-llama31-8b-h200-1k1k": ("h200", False, False, True),
    "sglang-attnbench-llama31-8b-h200-8k1k": ("h200", False, False, True),
    "sglang-pr4521-deepseek-v3-h200-dp4-ep8-rate40": ("h200", True, False, False),
    "sglang-pr7631-deepseek-v3-0324-h20-tp8": ("h20", True, False, False),
    "sglang-pr9359-gpt-oss-120b-b200-dp4-ep4": ("b200", True, False, True),
    "sglang-v030-llama31-70b-h100-tp4-rate-sharegpt": ("h100", False, False, False),
    "sglang-v030-llama31-8b-a100-rate-sharegpt": ("a100-80", False, False, False),
}
#: The global constants (kernel floor, GEMM and prefill shares, eager launch, request path, scheduler cost per
#: request) were fitted on all of them.
FITTED_SETS: tuple[str, ...] = tuple(FITTED)
#: The catalogue's AMD kinds (their routed experts run ROCm's kernels: perf/gpu.py MOE_SHARE_AMD).
AMD_KINDS = frozenset(name for name, g in GPUS.items() if g.rocm)
#: The routed experts' grouped-GEMM share on NVIDIA kinds: the MoE ones there.
MOE_SETS: tuple[str, ...] = tuple(s for s, (g, moe, _, _) in FITTED.items() if moe and g not in AMD_KINDS)
#: The same share on AMD kinds (perf/gpu.py MOE_SHARE_AMD).
AMD_MOE_SETS: tuple[str, ...] = tuple(s for s, (g, moe, _, _) in FITTED.items() if moe and g in AMD_KINDS)
#: The speculative cycle's fixed cost (not identifiable on them: left modelled).
SPECULATIVE_SETS: tuple[str, ...] = tuple(s for s, (_, _, spec, _) in FITTED.items() if spec)
#: FP8 GEMMs' achieved share against BF16's (perf/gpu.py FP8_GEMM_RELATIVE): the sets whose checkpoint is FP8, as
#: the fit found them (``benchmarks/sim_speed_fit.py`` ``_is_fp8``).
FP8_SETS: tuple[str, ...] = (
    "amd-blog-2025-09-deepseek-v3-mtp-mi300x-random", "amd-blog-2025-09-deepseek-v3-mtp-mi300x-sharegpt",
    "gpustack-dsr1-0528-h200-dpattn-random-lengths", "gpustack-dsr1-0528-h200-tp8-sharegpt-options",
    "gpustack-glm-4.6-fp8-h200-tp4-random-lengths", "gpustack-glm-4.6-h200-quant-tp-ep",
    "gpustack-qwen3-14b-fp8-h100-sharegpt-attention-backend", "gpustack-qwen3-14b-h100-sharegpt-fp8",
    "gpustack-qwen3-8b-fp8-h100-c4-attention-backend", "gpustack-qwen3-8b-h100-c4-fp8",
    "sgl-cookbook-deepseek-v3-mi300x-tp8", "sgl-cookbook-deepseek-v3.2-exp-b200",
    "sgl-cookbook-dsr1-0528-fp8-b200-tp8-1k1k", "sgl-cookbook-dsr1-0528-fp8-b200-tp8-1k8k",
    "sgl-cookbook-dsr1-0528-fp8-b200-tp8-8k1k", "sgl-cookbook-kimi-k2-b200-dpattn", "sgl-cookbook-kimi-k2-mi300x-tp8-1k1k",
    "sglang-pr4521-deepseek-v3-h200-dp4-ep8-rate40", "sglang-pr7631-deepseek-v3-0324-h20-tp8",
)
#: The attention backends' KV-read factors on Hopper.
ATTENTION_BACKEND_SETS: tuple[str, ...] = tuple(s for s, (_, _, _, attn) in FITTED.items() if attn)
#: A GPU kind's HBM share, for the kinds with at least three fitted sets.
MIN_SETS_PER_GPU = 3
GPU_SETS: dict[str, tuple[str, ...]] = {
    g: ids for g in sorted({v[0] for v in FITTED.values()})
    if len(ids := tuple(s for s, v in FITTED.items() if v[0] == g)) >= MIN_SETS_PER_GPU
}
