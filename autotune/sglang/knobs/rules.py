"""Where a knob cannot matter, and what SGLang refuses or overrides: the rules, quoted from SGLang.

:func:`dead_reason` / :func:`dead_value_reason`: a knob (or one of its values)
that cannot change anything on this node and release, with the one line that
says why. The space loses it before the study starts
(:mod:`autotune.space_prune`).

:func:`resolve` runs on every candidate before launch: combinations SGLang
would silently override are resolved the way SGLang resolves them (with a
note), combinations it refuses become the candidate's ``invalid`` reason
(pruned as ``invalid_args``, never launched).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from autotune.sglang.hardware.rocm import CUDA_ONLY_ATTENTION, CUDA_ONLY_KNOBS, is_rocm
from autotune.sglang.knobs.catalogue import Knob, exists_in, releases
from autotune.sglang.knobs.config import ServerConfig
from autotune.sglang.versions import SglangVersion, as_version

__all__ = ["NodeContext", "dead_reason", "dead_value_reason", "resolve"]

_CUSTOM_AR_RULE = ("SGLang turns custom allreduce off itself: \"Custom allreduce is disabled because it's not "
                   "supported on more than two PCIe-only GPUs\" (custom_all_reduce.py)")
_FUSION_RULE = ("FlashInfer allreduce fusion runs on SM90/SM100 only "
                "(communicator.apply_flashinfer_allreduce_fusion: _is_sm90_supported or _is_sm100_supported)")
_MIXED_SPEC_RULE = "\"Mixed chunked prefill is disabled because of using eagle speculative decoding.\" (server_args.py)"
_DP_RULE = "SGLang asserts tp_size % dp_size == 0 under DP attention (_handle_data_parallelism)"
_SM_ATTENTION = {"fa3": (80, 86, 89, 90), "flashmla": (90, 100), "cutlass_mla": (100,), "trtllm_mla": (100,),
                 "trtllm_mha": (100,), "fa4": (100,)}
_ROCM_ATTENTION = ("aiter", "wave")  # AMD kernel libraries (attention_registry.py registers them for HIP)
_ROCM_DEFAULT_ATTN = "SGLang's ROCm back-ends are aiter / triton (default aiter: model_override_base.py:326-345)"
_STATE_POOL_KNOBS = ("--max-mamba-cache-size", "--mamba-full-memory-ratio", "--mamba-ssm-dtype")
_NVLINK_A2A = {"deepep", "mooncake", "nixl", "mori", "deepep_v2", "pplx", "flashinfer", "megamoe", "flashinfer_megamoe"}


@dataclass(frozen=True)
class NodeContext:
    """What decides whether a knob can matter: release, GPU, interconnect, TP size, model."""

    version: SglangVersion
    sm: int
    interconnect: str
    tp_size: int
    is_moe: bool
    is_mla: bool = False
    fp8: bool = False
    rocm: bool = False  # an AMD GPU: SGLang's HIP paths (autotune.sglang.hardware.rocm)
    hybrid_state: bool = False  # a Mamba / linear-attention hybrid: a state pool beside the KV pool

    @classmethod
    def of(cls, version: str | SglangVersion, gpu: Any, interconnect: str, tp_size: int, model: Any) -> NodeContext:
        quant = str(getattr(model, "quant_method", "") or "")
        sm = int(getattr(gpu, "sm_family", getattr(gpu, "sm", 0)))  # B300's 10.3 is SGLang's "SM100"
        return cls(version=as_version(version), sm=sm, interconnect=interconnect,
                   tp_size=tp_size, is_moe=bool(getattr(model, "num_experts", 0)), is_mla=bool(model.is_mla),
                   fp8="fp8" in quant.lower(), rocm=is_rocm(gpu),
                   hybrid_state=getattr(model, "family", "") == "mamba")


def dead_reason(knob: Knob | None, name: str, ctx: NodeContext, tp_sizes: tuple[int, ...] = ()) -> str | None:
    """Why knob ``name`` cannot matter here (None: it can). ``tp_sizes``: every TP the space can take."""
    tps = tp_sizes or (ctx.tp_size,)
    if knob is None:
        return None  # unknown: the release's parser decides, per candidate
    if not exists_in(knob, ctx.version):
        rel = releases(knob)
        where = f"{rel[0]}..{rel[-1]}" if rel else "no release autotune has read"
        return f"SGLang {ctx.version} has no {name} (it exists in {where})"
    if knob.name == "custom_allreduce":
        if max(tps) <= 1:
            return "one GPU per server: there is no allreduce"
        if ctx.interconnect == "pcie" and min(tps) > 2:
            return f"TP {'/'.join(map(str, tps))} on PCIe: {_CUSTOM_AR_RULE}"
    if ctx.rocm and knob.name in CUDA_ONLY_KNOBS:
        return CUDA_ONLY_KNOBS[knob.name]
    if knob.name == "flashinfer_allreduce_fusion" and ctx.sm not in (90, 100):
        return f"SM{ctx.sm}: {_FUSION_RULE}"
    if knob.name == "enable_torch_symm_mem" and ctx.interconnect == "pcie":
        return "PCIe: torch symmetric memory needs NVLink multicast (SGLang falls back to NCCL)"
    if knob.name == "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE":
        if ctx.interconnect != "pcie":
            return "NVLink node: the PCIe-IPC kernels target hosts where every peer transfer crosses the root complex"
        if not any(t in (2, 4, 8) for t in tps):
            return "\"The kernels build IPC channels for these world sizes only\": 2, 4, 8 (pcie_ipc_ar.py)"
    if knob.name in ("--ep-size", "--moe-a2a-backend", "--moe-runner-backend") and not ctx.is_moe:
        return f"{name}: the model has no experts"
    if knob.name in _STATE_POOL_KNOBS and not ctx.hybrid_state:
        return f"{name} sizes the Mamba / linear-attention state pool; the model has none"
    if knob.name == "--attn-dp-size" and max(tps) <= 1:
        return "one GPU per server: nothing to split attention over"
    if knob.name in ("NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE") and max(tps) <= 1:
        return "one GPU per server: NCCL moves nothing"
    return None


def dead_value_reason(knob: Knob | None, value: Any, ctx: NodeContext, tp_sizes: tuple[int, ...] = ()) -> str | None:
    """Why one value of a live knob cannot run here (None: it can)."""
    tps = tp_sizes or (ctx.tp_size,)
    if knob is None:
        return None
    if knob.name == "--attn-dp-size" and isinstance(value, int) and value > 1 and all(t % value for t in tps):
        return f"{value} divides no TP size of the space ({'/'.join(map(str, tps))}): {_DP_RULE}"
    if knob.name == "--moe-a2a-backend" and value in _NVLINK_A2A and ctx.interconnect == "pcie":
        return f"{value} exchanges tokens over NVLink/RDMA buffers; a single PCIe node has neither"
    if ctx.rocm:
        why = _rocm_value_reason(knob.name, value)
        if why:
            return why
    elif knob.name == "attention_backend" and value in _ROCM_ATTENTION:
        return f"{value} is AMD's ROCm kernel library; this node is CUDA"
    elif knob.name == "--moe-a2a-backend" and value == "mori":
        return "mori is AMD's ROCm all-to-all library (moe_hook.py:543); this node is CUDA"
    if knob.name in ("--moe-runner-backend", "--fp8-gemm-backend") and value == "deep_gemm" and ctx.sm == 120:
        return "DeepGEMM has no SM120 kernels: it crashed on RTX PRO 6000 where Triton worked (SGLang issue #18870)"
    if knob.name == "attention_backend" and value in _SM_ATTENTION and ctx.sm not in _SM_ATTENTION[value]:
        return f"{value} kernels exist for SM{'/SM'.join(map(str, _SM_ATTENTION[value]))} only, not SM{ctx.sm}"
    if knob.name == "--ep-size" and isinstance(value, int) and value > 1 and all(t % value for t in tps):
        return f"{value} divides no TP size of the space: experts are split over ep ranks inside the TP group"
    return None


def _rocm_value_reason(name: str, value: Any) -> str | None:
    """A value that has no ROCm build (None: it runs on AMD too)."""
    if name == "attention_backend" and value in CUDA_ONLY_ATTENTION:
        return f"ROCm: {value} is a CUDA kernel; {_ROCM_DEFAULT_ATTN}"
    if name in ("--moe-runner-backend", "--fp8-gemm-backend") and (value == "deep_gemm"
                                                                   or str(value).startswith("flashinfer")):
        return f"ROCm: {value} is a CUDA library (DeepGEMM / FlashInfer have no ROCm build); aiter or triton run there"
    if name == "--moe-a2a-backend" and value in ("deepep", "deepep_v2", "nixl", "pplx", "flashinfer"):
        return f"ROCm: {value} is built on NVSHMEM/CUDA; AMD's all-to-all back-end is mori (moe_hook.py:543)"
    return None


def resolve(cfg: ServerConfig, version: str | SglangVersion) -> tuple[ServerConfig, list[str], str | None]:
    """SGLang's own overrides applied up front, and its refusals: ``(config, notes, invalid)``."""
    notes: list[str] = []
    flags = dict(cfg.flags)
    if cfg.speculative.enabled and flags.get("--enable-mixed-chunk"):
        flags["--enable-mixed-chunk"] = False
        notes.append(f"--enable-mixed-chunk dropped under speculative decoding: {_MIXED_SPEC_RULE}")
    if flags.get("--torch-compile-max-bs") is not None and not flags.get("--enable-torch-compile", False):
        flags.pop("--torch-compile-max-bs")
        notes.append("--torch-compile-max-bs dropped: torch.compile is off (the limit would change nothing)")
    a2a = flags.get("--moe-a2a-backend")
    if a2a in ("deepep", "mooncake", "flashinfer") and cfg.ep_size != cfg.tp_size:
        notes.append(f"ep_size set to tp_size {cfg.tp_size}: \"{a2a} MoE is enabled. The expert parallel size is "
                     "adjusted to be the same as the tensor parallel size\" (_handle_a2a_moe)")
        cfg = replace(cfg, ep_size=cfg.tp_size)
    cfg = replace(cfg, flags=tuple(flags.items()))
    if cfg.attn_dp_size > 1 and cfg.tp_size % cfg.attn_dp_size:
        return cfg, notes, f"attn_dp_size {cfg.attn_dp_size} does not divide tp_size {cfg.tp_size}: {_DP_RULE}"
    if cfg.attn_dp_size > 1 and cfg.dp_size > 1:
        return cfg, notes, (f"DP attention {cfg.attn_dp_size} with {cfg.dp_size} plain DP replicas: in SGLang one "
                            "--dp-size is both (enable_dp_attention turns the replicas into attention-DP ranks)")
    if cfg.ep_size > 1 and cfg.tp_size % cfg.ep_size:
        return cfg, notes, f"ep_size {cfg.ep_size} does not divide tp_size {cfg.tp_size} (moe_tp_size = tp / ep)"
    if cfg.env_value("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE") in ("1", "true", "True") and cfg.tp_size not in (2, 4, 8):
        notes.append(f"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE at TP {cfg.tp_size}: the kernels serve world 2/4/8 only; NCCL")
    return cfg, notes, None
