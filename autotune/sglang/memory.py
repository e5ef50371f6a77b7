"""The memory model: will this launch fit, and how many KV tokens will it get?

SGLang sizes the KV cache as ``rest = A - P x (1 - f)`` (0.5.9
``model_executor/model_runner_kv_cache_mixin.py`` ``profile_max_num_token``; 0.5.23
``mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes``):
P is the free memory per GPU after distributed init, A the free memory after
weights are loaded, f ``mem_fraction_static``. Tokens are
``floor(rest x 2^30 / cell)``. Everything allocated after the pool (graphs,
req_to_token, workspaces, activations, Regime A draft) must fit in the slack
``P x (1 - f)``. P and A come from a calibration launch's own log when there is
one (adjusted for the buffers that differ between the calibration launch and
the candidate), else from the GPU capacity and the weight size.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from autotune.errors import ConfigError
from autotune.sglang import _slack as S
from autotune.sglang import releases as R
from autotune.sglang import rocm
from autotune.sglang.config import ServerConfig, SpeculativeConfig
from autotune.sglang.defaults import (
    auto_chunked_prefill_size,
    auto_cuda_graph_max_bs,
    auto_mem_fraction_static,
    auto_speculative_params,
    default_max_running_requests,
    req_to_token_pool_size,
)
from autotune.sglang.dp_attention import replicated_weight_gib
from autotune.sglang.flags import effective_config
from autotune.sglang.gpus import GpuKind, get_gpu
from autotune.sglang.models import ModelProfile
from autotune.sglang.profiles.dsv4 import DSV4_PAGE
from autotune.sglang.profiles.gqa import SWA_FULL_TOKENS_RATIO
from autotune.sglang.profiles.mla import DSA_CUDA_PAGE
from autotune.sglang.profiles.sizing import kv_cell_bytes, kv_reserved_bytes, weight_bytes_per_gpu
from autotune.sglang.speculative import validate_speculative
from autotune.sglang.versions import SglangVersion, as_version

__all__ = ["Calibration", "Prediction", "VERDICTS", "cell_size_bytes", "predict", "kv_bytes_per_element"]

VERDICTS = ("fits", "kv_oom", "graph_capture_oom", "runtime_oom_risk", "too_few_tokens")
#: The verdicts that prune a candidate before launch (unless uncertain): THE prune rule, used by the driver.
#: The OOM ones are spelled as the failure kinds (autotune.outcome.FailureKind) a launch would end in.
PRUNE_VERDICTS = frozenset({"kv_oom", "graph_capture_oom", "too_few_tokens"})
_DRAFT_IN_CELL = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
#: Uncalibrated graph/activation estimates are scaled by this before judging (lean towards launching).
LEAN = 0.75
_RESERVED_WHAT = {"mamba": "for the Mamba state cache", "dsv4": "for DeepSeek V4's fixed compressed state"}
#: Loader residue per GPU after weights are loaded (what the simulator adds too).
LOADER_RESIDUE_GIB = 0.25


def kv_bytes_per_element(kv_cache_dtype: str, model: ModelProfile) -> float:
    """Bytes per KV element: auto = model dtype (1 if the checkpoint declares FP8 KV), fp8 1, fp4 0.5 + scales."""
    d = (kv_cache_dtype or "auto").lower()
    if d == "auto":
        return 1.0 if model.kv_cache_quant_fp8 else float(model.dtype_bytes)
    if d in ("fp8_e4m3", "fp8_e5m2"):
        return 1.0
    if d == "mxfp8":
        return 1.0 + 1 / 32
    if d in ("bf16", "bfloat16", "fp16", "float16"):
        return 2.0
    if d in ("fp4_e2m1", "nvfp4", "fp4_mx_block16"):
        return 0.5 + 1 / 16
    raise ConfigError(f"kv_cache_dtype: unknown value {kv_cache_dtype!r}")


def _draft_layers(model: ModelProfile, draft: ModelProfile | None, algorithm: str) -> int:
    if draft is not None:
        return draft.num_nextn_predict_layers or draft.num_layers
    if algorithm in ("EAGLE", "NEXTN") and model.num_nextn_predict_layers > 0:
        return model.num_nextn_predict_layers
    return 1


def cell_size_bytes(
    model: ModelProfile,
    *,
    tp_size: int,
    kv_cache_dtype: str = "auto",
    version: str | SglangVersion,
    draft: ModelProfile | None = None,
    spec_algorithm: str | None = None,
    attn_dp_size: int = 1,
    gpu_sm: int = 0,
    swa_ratio: float | None = None,
) -> int:
    """KV bytes per token per GPU (section 1.3), by the model's family (:mod:`autotune.sglang.profiles`).

    MHA/GQA: ``max(1, kv_heads // attn_tp) x (head_dim + v_head_dim) x L x kv_size``
    (KV heads replicated when TP > kv heads). MLA: ``(kv_lora_rank +
    qk_rope_head_dim) x L x kv_size``, not divided by TP; DSA adds its indexer, hybrid SWA its
    window pool at the SWA ratio, DeepSeek V4 its compressed pools; Mamba hybrids count their
    attention layers only. Regime B with an EAGLE-family or STANDALONE draft:
    ``x (1 + L_draft / L_target)``. ``gpu_sm`` decides DSA's kv "auto" (fp8 from SM 100).
    """
    v = as_version(version)
    kv = kv_bytes_per_element(kv_cache_dtype, model)
    attn_tp = max(tp_size // max(attn_dp_size, 1), 1)
    cell = kv_cell_bytes(model, attn_tp=attn_tp, kv_bytes=kv, kv_cache_dtype=kv_cache_dtype, gpu_sm=gpu_sm,
                         swa_ratio=SWA_FULL_TOKENS_RATIO if swa_ratio is None else swa_ratio)
    algo = (spec_algorithm or "").upper()
    if algo in _DRAFT_IN_CELL and v.regime == "B":
        cell = cell * (1 + _draft_layers(model, draft, algo) / model.num_layers)
    return int(cell)


@dataclass
class Calibration:
    """Memory facts measured on a real (or simulated) launch, and the knobs they were measured at.

    ``comm_gib`` / ``draft_w_gib`` are the candidate-dependent terms at the
    calibration launch (filled by :meth:`at`); left ``None`` they are
    recomputed from the recorded knobs.
    """

    p_gib: float | None = None
    a_gib: float | None = None
    kv_tokens: int | None = None
    graph_gib: float | None = None
    source: str | None = None
    tp_size: int | None = None
    mem_fraction_static: float | None = None  # the resolved f the server reported
    f_is_auto: bool | None = None
    cuda_graph_max_bs: int | None = None
    custom_allreduce: bool = True
    enable_torch_symm_mem: bool = False
    speculative_algorithm: str | None = None
    num_draft_tokens: int | None = None
    comm_gib: float | None = None
    draft_w_gib: float | None = None
    attn_dp_size: int = 1  # DP attention at the calibration launch (its replicated weights are in A)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (d or {}).items() if k in names})

    @classmethod
    def at(cls, observed: dict[str, Any], cfg: ServerConfig, *, source: str = "launch",
           resolved_f: float | None = None) -> Calibration:
        """A calibration from a log summary (:func:`autotune.sglang.logparse.summarize`) and its launch's knobs."""
        return cls(
            p_gib=observed.get("p_gib"), a_gib=observed.get("a_gib"), kv_tokens=observed.get("kv_tokens"),
            graph_gib=observed.get("graph_gib"), source=source, tp_size=cfg.tp_size,
            mem_fraction_static=resolved_f if resolved_f is not None else cfg.mem_fraction_static,
            f_is_auto=cfg.mem_fraction_static is None, cuda_graph_max_bs=cfg.cuda_graph_max_bs,
            custom_allreduce=cfg.custom_allreduce, enable_torch_symm_mem=cfg.enable_torch_symm_mem,
            speculative_algorithm=cfg.speculative.algorithm, num_draft_tokens=cfg.speculative.num_draft_tokens,
            attn_dp_size=cfg.attn_dp_size,
        )


@dataclass
class Prediction:
    """The memory model's verdict on one candidate (GiB per GPU)."""

    p_gib: float
    w_gib: float
    a_gib: float
    f: float
    f_is_auto: bool
    kv_gib: float  # rest = A - P(1 - f)
    kv_tokens: int
    cell_bytes: int
    slack_gib: float  # P(1 - f)
    slack_needed_gib: float
    slack_parts: dict[str, float]
    cuda_graph_max_bs: int
    verdict: str
    reason: str
    min_viable_mem_fraction: float
    min_launchable_mem_fraction: float
    uncertain: bool
    pa_estimated: bool = False  # P and A from capacity/weights, not from a calibration launch
    max_running_requests: int = 0
    chunked_prefill_size: int = 0
    graph_batch_sizes: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    server_kv_tokens: int = 0  # KV tokens of the whole server: kv_tokens x DP-attention ranks x --dp-size replicas

    @property
    def should_prune(self) -> bool:
        """Prune before launch: a cannot-fit verdict that is not uncertain (runtime risk never prunes)."""
        return self.verdict in PRUNE_VERDICTS and not self.uncertain

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["should_prune"] = self.should_prune
        return d


def _draft_weight_gib(model: ModelProfile, draft: ModelProfile | None, algorithm: str | None, tp: int) -> float:
    algo = (algorithm or "").upper()
    if not algo or algo == "NGRAM":
        return 0.0
    if draft is not None:
        return draft.weight_bytes / tp / S.GIB
    if model.num_nextn_predict_layers > 0:  # MTP layers inside the target checkpoint
        share = model.num_nextn_predict_layers / (model.num_layers + model.num_nextn_predict_layers)
        return model.weight_bytes * share / tp / S.GIB
    return 0.0


def _min_viable(a: float, p: float) -> tuple[float, float]:
    """(SGLang's "raise above" threshold 1 - A/P to 3 decimals, smallest 3-decimal f with rest > 0)."""
    exact = 1.0 - a / p
    shown = math.ceil(round(exact, 4) * 1000 - 1e-9) / 1000
    launchable = math.floor(exact * 1000 + 1e-9) / 1000 + 0.001
    return round(shown, 3), round(min(launchable, 1.0), 3)


def predict(
    model: ModelProfile,
    gpu: GpuKind | str,
    cfg: ServerConfig,
    *,
    version: str | SglangVersion,
    num_gpus: int | None = None,
    interconnect: str = "pcie",
    calibration: Calibration | None = None,
    draft: ModelProfile | None = None,
    min_tokens: int | None = None,
) -> Prediction:
    """Predict P, W, A, the KV pool and the slack for ``cfg``, and judge it.

    ``min_tokens``: the KV tokens the workload needs (longest request); fewer
    gives ``too_few_tokens``. Uncalibrated graph/activation estimates are
    scaled by :data:`LEAN` before judging, in favour of launching.
    """
    v = as_version(version)
    cfg = effective_config(cfg, v)  # flags given through extra_args count like knobs
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    tp = cfg.tp_size
    if num_gpus is not None and cfg.num_gpus > num_gpus:
        raise ConfigError(f"tp_size: {cfg.tp_size} x dp_size {cfg.dp_size} needs {cfg.num_gpus} GPUs, "
                          f"the machine has {num_gpus}")
    spec = cfg.speculative
    algo = (spec.algorithm or "").upper() or None
    notes: list[str] = []
    cap_gib = g.memory_gib
    comm = S.comm_buffers_gib(
        g, tp, interconnect, custom_allreduce=cfg.custom_allreduce, torch_symm_mem=cfg.enable_torch_symm_mem
    )
    draft_w = _draft_weight_gib(model, draft, algo, tp)
    draft_w_b = draft_w if v.regime == "B" else 0.0
    align = R.mxfp4_pad_align(v, sm_family=g.sm_family, rocm=g.rocm)
    weights = weight_bytes_per_gpu(model, tp, mxfp4_align=align) / S.GIB
    cal = (
        calibration
        if calibration is not None and calibration.p_gib is not None and calibration.a_gib is not None
        else None
    )
    uncertain = cal is None or model.weight_bytes_estimated
    unknown_model = model.is_unknown and cal is None  # never condemned before a launch has calibrated it
    if unknown_model:
        notes.append(f"unknown: calibrated from the first launch ({model.unknown_reason})")
    rescaled = False
    if cal is not None:
        cal_tp = cal.tp_size or tp
        cal_comm = (
            cal.comm_gib
            if cal.comm_gib is not None
            else S.comm_buffers_gib(
                g, cal_tp, interconnect, custom_allreduce=cal.custom_allreduce, torch_symm_mem=cal.enable_torch_symm_mem
            )
        )
        cal_draft = (
            cal.draft_w_gib
            if cal.draft_w_gib is not None
            else (_draft_weight_gib(model, draft, cal.speculative_algorithm, cal_tp) if v.regime == "B" else 0.0)
        )
        cal_p, cal_a = float(cal.p_gib or 0.0), float(cal.a_gib or 0.0)  # both set (filtered above)
        if cal_tp == tp:
            p = cal_p - (comm - cal_comm)
            a = cal_a - (comm - cal_comm) - (draft_w_b - cal_draft)
        else:  # learn the overheads at the calibration TP, apply them at this one
            base = cap_gib - cal_p - cal_comm
            residue = cal_p - cal_a - weight_bytes_per_gpu(model, cal_tp, mxfp4_align=align) / S.GIB - cal_draft
            p = cap_gib - base - comm
            a = p - (weights + residue + draft_w_b)
            uncertain = rescaled = True
            notes.append(f"calibration at TP {cal_tp} rescaled to TP {tp}")
    else:
        p = cap_gib - S.base_overhead_gib(tp) - comm
        a = p - (weights + LOADER_RESIDUE_GIB + draft_w_b)
        notes.append("P and A estimated from capacity and weight size (no calibration)")
    dp_attn = cfg.attn_dp_size
    if dp_attn > 1 or (cal is not None and cal.attn_dp_size > 1):
        cal_rep = replicated_weight_gib(model, cal.tp_size or tp, cal.attn_dp_size) if cal is not None else 0.0
        rep = replicated_weight_gib(model, tp, dp_attn, dp_lm_head=bool(dict(cfg.flags).get("--enable-dp-lm-head")))
        a -= rep - cal_rep
        if dp_attn > 1:
            notes.append(f"DP attention {dp_attn}: attention and embedding weights whole on each of "
                         f"{max(tp // dp_attn, 1)} attention-TP rank(s) (+{rep:.2f} GiB per GPU)")
    w = p - a

    attn_dp = cfg.attn_dp_size
    chunk = cfg.chunked_prefill_size or auto_chunked_prefill_size(g.memory_mib, v)
    max_bs = cfg.cuda_graph_max_bs or auto_cuda_graph_max_bs(g.memory_mib, tp, v, cfg.max_running_requests)
    f_is_auto = cfg.mem_fraction_static is None
    honor = str(cfg.env_value("SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION") or "").lower() in ("1", "true")
    aiter_applied = honor and not f_is_auto
    if f_is_auto:
        f = auto_mem_fraction_static(g.memory_mib, tp_size=tp, version=v, chunked_prefill_size=chunk,
                                     cuda_graph_max_bs=max_bs, speculative_algorithm=algo, is_mla=model.is_mla,
                                     dp_attention_size=attn_dp,
                                     prefill_graph=False if g.rocm else None) * model.vlm_f_factor
        if cal is not None and cal.f_is_auto and cal.mem_fraction_static is not None:
            cal_f = auto_mem_fraction_static(
                g.memory_mib,
                tp_size=cal.tp_size or tp,
                version=v,
                cuda_graph_max_bs=cal.cuda_graph_max_bs,
                speculative_algorithm=cal.speculative_algorithm,
                is_mla=model.is_mla,
            ) * model.vlm_f_factor
            if abs(cal_f - cal.mem_fraction_static) > 0.0005:
                f = cal.mem_fraction_static
                aiter_applied = True  # the logged value is SGLang's final one
                notes.append(
                    f"auto mem_fraction_static taken as {f} (the calibration launch's value; heuristic gave {cal_f})"
                )
    else:
        f = float(cfg.mem_fraction_static)  # type: ignore[arg-type]
    factor = rocm.aiter_f_factor(cfg.attention_backend, model, tp, int(cfg.context_length or model.context_len)
                                 ) if g.rocm and not aiter_applied else 1.0
    if factor != 1.0:
        f *= factor
        notes.append(f"ROCm aiter attention, context > {rocm.AITER_F_CONTEXT_ABOVE}: mem_fraction_static x "
                     f"{factor} = {f:.4f} (SGLang attention_hook.py; SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION "
                     "keeps a given f)")
    if attn_dp > 1 and chunk > 0:
        chunk = max(chunk // attn_dp, 1)  # _handle_data_parallelism: each attention-DP rank prefills its share
        notes.append(f"DP attention {attn_dp}: KV for each attention-DP group's own requests "
                     f"(node KV capacity x{attn_dp}), chunked prefill {chunk} per rank")

    # Attention runs at TP tp/attn_dp under DP attention: an MHA rank holds more heads; MLA's latent is per rank anyway.
    cell = cell_size_bytes(model, tp_size=tp // attn_dp, kv_cache_dtype=cfg.kv_cache_dtype, version=v, draft=draft,
                           spec_algorithm=algo, gpu_sm=g.sm, swa_ratio=_swa_ratio(cfg, model, g, v))
    learned = _learned_cell(model, cal, cfg)
    if learned:
        cell = learned
        notes.append(f"KV cell {cell:,} B learned from the calibration launch (the architecture's rule is unknown)")
    slack = p * (1 - f)
    rest = a - slack
    shown_min, launchable_min = _min_viable(a, p)
    head = f"rest = {a:.2f} - {p:.2f} x (1 - {f:g}) = {rest:.2f} GiB"
    reserved = kv_reserved_bytes(model, rest * S.GIB, tp=tp // attn_dp, max_running_requests=cfg.max_running_requests,
                                 mamba_ratio=_float_flag(cfg, "--mamba-full-memory-ratio"),
                                 max_mamba_cache=_mamba_slots(cfg)) if rest > 0 else 0.0
    if reserved > 0:
        head += f" ({reserved / S.GIB:.2f} GiB of it {_RESERVED_WHAT.get(model.family, 'for the multimodal cache')})"
    tokens = max(int(math.floor((rest * S.GIB - reserved) / cell)), 0) if rest > 0 else 0
    if cfg.max_total_tokens is not None and tokens > cfg.max_total_tokens:
        tokens = cfg.max_total_tokens
    page = _page_size(cfg, model)
    tokens = tokens // page * page
    context = cfg.context_length or model.context_len
    speculative = spec.enabled
    draft_tokens = _resolved_draft_tokens(spec, model, v, notes) if speculative else 0
    mrr = default_max_running_requests(max(tokens, 0), context, v, speculative, cfg.max_running_requests,
                                       dp_size=attn_dp) if tokens else 0

    common: dict[str, Any] = dict(
        p_gib=round(p, 4),
        w_gib=round(w, 4),
        a_gib=round(a, 4),
        f=f,
        f_is_auto=f_is_auto,
        kv_gib=round(rest, 4),
        kv_tokens=tokens,
        cell_bytes=cell,
        slack_gib=round(slack, 4),
        cuda_graph_max_bs=max_bs,
        min_viable_mem_fraction=shown_min,
        min_launchable_mem_fraction=launchable_min,
        max_running_requests=mrr,
        chunked_prefill_size=chunk,
        notes=notes,
        pa_estimated=cal is None,
        server_kv_tokens=tokens * dp_attn * max(cfg.dp_size, 1),
    )
    # With estimated P/A, a negative formula is only trusted beyond a margin (lean towards launching).
    margin = (0.02 * p + (0.15 * weights if model.weight_bytes_estimated else 0.0)) if cal is None or rescaled else 0.0
    if rest <= 0 or tokens <= 0:
        reason = (
            f"{head} < 0; minimum viable mem_fraction_static = {shown_min:.3f}"
            if rest <= 0
            else (f"{head} holds 0 tokens of {cell:,} B; minimum viable mem_fraction_static = {shown_min:.3f}")
        )
        return Prediction(
            **common, slack_needed_gib=0.0, slack_parts={}, verdict="kv_oom", reason=reason,
            uncertain=rest > -margin or unknown_model,
        )
    needed_tokens = max(min_tokens or 0, 7)
    if tokens < needed_tokens:
        reason = f"{head} -> {tokens:,} tokens x {cell:,} B < {needed_tokens:,} tokens needed"
        return Prediction(
            **common, slack_needed_gib=0.0, slack_parts={}, verdict="too_few_tokens", reason=reason, uncertain=uncertain
        )

    rows = req_to_token_pool_size(tokens, context, v, speculative, cfg.max_running_requests)
    tpr = draft_tokens if speculative and draft_tokens else 1
    prefill_on = not cfg.disable_cuda_graph and not g.rocm and _prefill_graphs_on(cfg, v, speculative=speculative,
                                                                   dp_attention=attn_dp > 1)
    prefill_max = min(2048 if model.is_mla else chunk, cfg.max_total_tokens or chunk)
    ladder = [] if cfg.disable_cuda_graph else S.ladder_for(max_bs, speculative=speculative, version=v, req_rows=rows)
    graphs = _graph_estimate(model, v, ladder, speculative, tpr, prefill_on, prefill_max, attn_dp)
    graph_calibrated = False
    if cal is not None and cal.graph_gib is not None and not cfg.disable_cuda_graph:
        cal_tp = cal.tp_size or tp
        cal_spec = bool(cal.speculative_algorithm)
        cal_bs = cal.cuda_graph_max_bs or auto_cuda_graph_max_bs(g.memory_mib, cal_tp, v)
        cal_rows = req_to_token_pool_size(cal.kv_tokens or tokens, context, v, cal_spec, None)
        cal_ladder = S.ladder_for(cal_bs, speculative=cal_spec, version=v, req_rows=cal_rows)
        cal_est = _graph_estimate(
            model, v, cal_ladder, cal_spec, (cal.num_draft_tokens or 1) if cal_spec else 1, prefill_on, prefill_max,
            cal.attn_dp_size,
        )
        if cal_est > 0:
            graphs = cal.graph_gib * graphs / cal_est
            graph_calibrated = True
    parts = {
        "graphs": graphs,
        "req_to_token": S.req_to_token_gib(rows, context, draft_tokens, v),
        "attention_workspace": S.attention_workspace_gib(model),
    }
    if S.fusion_enabled(model, g, tp, cfg.flashinfer_allreduce_fusion):
        parts["allreduce_fusion"] = S.fusion_workspace_gib(model, tp)
    if cfg.enable_symm_mem:
        parts["symm_mem"] = 4.0
    if speculative and v.regime == "A":
        d_cell = (
            cell_size_bytes(draft, tp_size=tp, kv_cache_dtype=cfg.kv_cache_dtype, version=v)
            if draft
            else int(cell / max(model.num_layers, 1) * _draft_layers(model, None, algo or ""))
        )
        parts["draft_weights"] = draft_w
        parts["draft_kv"] = tokens * d_cell / S.GIB
    activations = S.activations_gib(model, tp, chunk, mrr or max_bs)
    lean_graph = 1.0 if graph_calibrated else LEAN
    startup = sum(parts.values()) - graphs + graphs * lean_graph
    total = startup + activations * LEAN
    parts["activations"] = activations
    parts = {k: round(val, 4) for k, val in parts.items()}
    uncertain = uncertain or not graph_calibrated
    listed = ", ".join(f"{k} {val:.2f}" for k, val in parts.items())
    kv_txt = f"{head} -> {tokens:,} tokens x {cell:,} B"
    if startup > slack:
        verdict, reason = (
            "graph_capture_oom",
            (
                f"slack {p:.2f} x (1 - {f:g}) = {slack:.2f} GiB < {startup:.2f} GiB "
                f"allocated after the KV pool at startup ({listed}); {kv_txt}"
            ),
        )
    elif total > slack:
        verdict, reason = (
            "runtime_oom_risk",
            (f"slack {slack:.2f} GiB < {total:.2f} GiB with activations ({listed}); {kv_txt}"),
        )
    else:
        verdict, reason = "fits", f"{kv_txt}; slack {slack:.2f} GiB >= {total:.2f} GiB needed ({listed})"
    return Prediction(
        **common,
        slack_needed_gib=round(total, 4),
        slack_parts=parts,
        verdict=verdict,
        reason=reason,
        uncertain=uncertain,
        graph_batch_sizes=ladder,
    )


def _resolved_draft_tokens(spec: SpeculativeConfig, model: ModelProfile, v: SglangVersion, notes: list[str]) -> int:
    """Draft tokens per request as SGLang will resolve them (auto choice, topk 1 => steps + 1)."""
    try:
        resolved, _ = validate_speculative(spec, model.architecture, v)
        return int(resolved.num_draft_tokens or 1)
    except ConfigError as e:
        notes.append(f"speculative settings SGLang would refuse ({e}); memory estimated with its auto choice")
        return auto_speculative_params(spec.algorithm or "EAGLE", model.architecture)[2]


def _learned_cell(model: ModelProfile, cal: Calibration | None, cfg: ServerConfig) -> int:
    """An unknown architecture's KV bytes per token, from a calibration launch of the same shape (tp,
    DP attention, kv dtype): its ``rest / #tokens``. 0 when there is nothing to learn from."""
    if not model.is_unknown or cal is None or not cal.kv_tokens or cal.mem_fraction_static is None:
        return 0
    if (cal.tp_size or cfg.tp_size) != cfg.tp_size or cal.attn_dp_size != cfg.attn_dp_size:
        return 0
    rest = float(cal.a_gib or 0.0) - float(cal.p_gib or 0.0) * (1 - cal.mem_fraction_static)
    return int(rest * S.GIB / cal.kv_tokens) if rest > 0 else 0


def _swa_ratio(cfg: ServerConfig, model: ModelProfile | None = None, gpu: GpuKind | None = None,
               v: SglangVersion | None = None) -> float | None:
    """``--swa-full-tokens-ratio``; 1.0 under ``--disable-hybrid-swa-memory`` (every layer in the full pool),
    given or set by the release (GPT-OSS on trtllm_mha before 0.5.23: :func:`releases.gpt_oss_disables_hybrid_swa`)."""
    if "--disable-hybrid-swa-memory" in cfg.extra_args or cfg.flag("--disable-hybrid-swa-memory"):
        return 1.0
    if model is not None and gpu is not None and v is not None and R.gpt_oss_disables_hybrid_swa(
            v, model.architecture, sm_family=gpu.sm_family, attention_backend=cfg.attention_backend):
        return 1.0
    return _float_flag(cfg, "--swa-full-tokens-ratio")


def _mamba_slots(cfg: ServerConfig) -> int | None:
    """``--max-mamba-cache-size`` per attention-DP rank (None when not given)."""
    size = _float_flag(cfg, "--max-mamba-cache-size")
    return None if size is None else max(int(size) // max(cfg.attn_dp_size, 1), 1)


def _float_flag(cfg: ServerConfig, name: str) -> float | None:
    """A numeric SGLang flag given as a searched flag or in extra_args (None when absent)."""
    value = cfg.flag(name)
    args = list(cfg.extra_args)
    if value is None and name in args and args.index(name) + 1 < len(args):
        value = args[args.index(name) + 1]
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: {value!r} is not a number") from None


def _page_size(cfg: ServerConfig, model: ModelProfile | None = None) -> int:
    args = list(cfg.extra_args)
    if "--page-size" in args:
        i = args.index("--page-size")
        if i + 1 < len(args) and args[i + 1].isdigit():
            return max(int(args[i + 1]), 1)
    family = model.family if model is not None else ""
    # DeepSeek V4: 256 (model_overrides/deepseek_v4.py:51-61); DSA on CUDA: 64 (model_overrides/deepseek_v2.py:171)
    return DSV4_PAGE if family == "dsv4" else (DSA_CUDA_PAGE if family == "dsa" else 1)


def _prefill_graphs_on(cfg: ServerConfig, v: SglangVersion, *, speculative: bool, dp_attention: bool) -> bool:
    """Prefill (piecewise) graphs: opt-in before 0.5.10, then on unless turned off (by flag or by the release)."""
    args = set(cfg.extra_args)
    if R.prefill_graphs_default_on(v):
        if {"--disable-piecewise-cuda-graph", "--disable-prefill-cuda-graph"} & args:
            return False
        if "--cuda-graph-backend-prefill" in args and "disabled" in args:
            return False
        return R.prefill_graphs_off_reason(v, speculative=speculative, dp_attention=dp_attention) is None
    return "--enable-piecewise-cuda-graph" in args


def _graph_estimate(
    model: ModelProfile,
    version: SglangVersion,
    ladder: list[int],
    speculative: bool,
    tokens_per_req: int,
    prefill_on: bool,
    prefill_max: int,
    attn_dp: int = 1,
) -> float:
    """Decode graphs for ``ladder`` (x1.3 for draft graphs under speculation) plus prefill graphs when on;
    DP attention's padding (``attn_dp`` > 1) once, not scaled for drafts."""
    decode = S.decode_graph_gib(model, ladder, tokens_per_req)
    pad = S.dp_padding_gib(max(ladder, default=0), attn_dp)
    est = decode * 1.3 if speculative and ladder else decode  # draft decode/extend graphs on top of the target's
    if prefill_on:
        est += S.prefill_graph_extra_gib(S.prefill_graph_gib(model, prefill_max), decode + pad, version)
    return est + pad
