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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from autotune.errors import ConfigError
from autotune.limits import shown
from autotune.sglang import releases
from autotune.sglang.defaults import (
    auto_chunked_prefill_size,
    auto_cuda_graph_max_bs,
    auto_mem_fraction_static,
    auto_speculative_params,
    default_max_running_requests,
    req_to_token_pool_size,
)
from autotune.sglang.flags.argv import effective_config
from autotune.sglang.hardware import rocm
from autotune.sglang.hardware.gpus import GpuKind, get_gpu
from autotune.sglang.knobs.config import ServerConfig, SpeculativeConfig
from autotune.sglang.knobs.speculative import validate_speculative
from autotune.sglang.memory import slack
from autotune.sglang.models.dp_attention import replicated_weight_gib
from autotune.sglang.models.dsv4 import DSV4_PAGE
from autotune.sglang.models.mamba import MambaKnobs, MambaPool, knobs_from_args
from autotune.sglang.models.mla import DSA_CUDA_PAGE
from autotune.sglang.models.profile import ModelProfile
from autotune.sglang.models.sizing import kv_cell_bytes, kv_reserved, weight_bytes_per_gpu
from autotune.sglang.versions import SglangVersion, as_version

__all__ = ["Calibration", "Prediction", "VERDICTS", "calibration_problem", "cell_size_bytes", "predict",
           "kv_bytes_per_element"]

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
    raise ConfigError(f"kv_cache_dtype: unknown value {shown(kv_cache_dtype)}")


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
    budget: bool = False,
) -> int:
    """KV bytes per token per GPU (section 1.3), by the model's family (:mod:`autotune.sglang.models.profile`).

    MHA/GQA: ``max(1, kv_heads // attn_tp) x (head_dim + v_head_dim) x L x kv_size``
    (KV heads replicated when TP > kv heads). MLA: ``(kv_lora_rank +
    qk_rope_head_dim) x L x kv_size``, not divided by TP; DSA adds its indexer, hybrid SWA its
    window pool at the SWA ratio, DeepSeek V4 its compressed pools; Mamba hybrids count their
    attention layers only. Regime B with an EAGLE-family or STANDALONE draft:
    ``x (1 + L_draft / L_target)``. ``gpu_sm`` decides DSA's kv "auto" (fp8 from SM 100).
    ``budget``: the bytes the release divides its KV budget by, where they differ from what the pool
    stores (DSA in fp8 before 0.5.17: :data:`autotune.sglang.releases.DSA_FP8_ROW_BUDGETED`).
    """
    v = as_version(version)
    kv = kv_bytes_per_element(kv_cache_dtype, model)
    attn_tp = max(tp_size // max(attn_dp_size, 1), 1)
    cell = kv_cell_bytes(model, attn_tp=attn_tp, kv_bytes=kv, kv_cache_dtype=kv_cache_dtype, gpu_sm=gpu_sm,
                         swa_ratio=swa_ratio, stored_fp8_row=not budget or releases.dsa_budgets_stored_fp8_row(v))
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


#: GiB a measured P may exceed the catalogue's capacity by (rounding of the logged figures).
CAPACITY_TOLERANCE_GIB = 0.05


def calibration_problem(values: dict[str, Any], capacity_gib: float) -> str | None:
    """Why measured memory figures (``p_gib``, ``a_gib``, ``graph_gib``: GiB per GPU; ``kv_tokens``) cannot
    be this GPU's (None when they can): each finite and not negative, P positive and the rest at most
    the GPU's capacity, KV tokens at most one per byte of it. A value outside these is not a
    measurement: stored, it would break every later prediction (1e300 GiB overflows the token count)."""
    cap = capacity_gib + CAPACITY_TOLERANCE_GIB
    for key in ("p_gib", "a_gib", "graph_gib"):
        v = values.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"{key}={shown(v)} is not a number"
        if not math.isfinite(v) or v < 0 or (key == "p_gib" and v == 0):
            return f"{key}={shown(v)} must be a finite number > 0"
        if v > cap:
            return f"{key}={shown(v)} GiB is more than the GPU's memory ({capacity_gib:.2f} GiB)"
    tokens = values.get("kv_tokens")
    if tokens is not None:
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            return f"kv_tokens={shown(tokens)} must be a whole number >= 0"
        if tokens > cap * 2**30:
            return f"kv_tokens={shown(tokens)} is more than one per byte of the GPU's memory ({capacity_gib:.2f} GiB)"
    return None


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
    #: Where kv_tokens can be when the family's pool rule varies by build or release (:func:`kv_rule_range`):
    #: both equal kv_tokens when it does not; None = unknown on that side (no bound known).
    kv_tokens_low: int | None = None
    kv_tokens_high: int | None = None
    kv_range: list[str] = field(default_factory=list)  # why the rule varies, one reason each

    def __post_init__(self) -> None:
        if not self.kv_range:
            self.kv_tokens_low = self.kv_tokens_high = self.kv_tokens

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
        return draft.weight_bytes / tp / slack.GIB
    if model.num_nextn_predict_layers > 0:  # MTP layers inside the target checkpoint
        share = model.num_nextn_predict_layers / (model.num_layers + model.num_nextn_predict_layers)
        return model.weight_bytes * share / tp / slack.GIB
    return 0.0


def _min_viable(a: float, p: float) -> tuple[float, float]:
    """(SGLang's "raise above" threshold 1 - A/P to 3 decimals, smallest 3-decimal f with rest > 0)."""
    exact = 1.0 - a / p
    shown = math.ceil(round(exact, 4) * 1000 - 1e-9) / 1000
    launchable = math.floor(exact * 1000 + 1e-9) / 1000 + 0.001
    return round(shown, 3), round(min(launchable, 1.0), 3)


@dataclass
class _Launch:
    """What every step of :func:`predict` reads: the candidate, resolved once."""

    model: ModelProfile
    gpu: GpuKind
    cfg: ServerConfig  # effective: flags given through extra_args count like knobs
    v: SglangVersion
    interconnect: str
    cal: Calibration | None  # a calibration with both P and A, else None
    draft: ModelProfile | None
    algo: str | None  # the speculative algorithm, upper case; None when off
    notes: list[str]  # the prediction's notes, in the order the steps add them

    @property
    def tp(self) -> int:
        return self.cfg.tp_size


@dataclass
class _PA:
    """Step 1's answer: P and A per GPU (GiB), and what they rest on."""

    p: float
    a: float
    weights: float  # the target's weights per GPU
    draft_w: float  # the draft's weights per GPU (in A from regime B, in the slack in regime A)
    uncertain: bool  # estimated (no calibration, or weights estimated) or rescaled from another TP
    rescaled: bool  # a calibration taken at another TP


@dataclass
class _Fraction:
    """Step 2's answer: f and the automatic sizes it depends on."""

    f: float
    f_is_auto: bool
    chunk: int  # chunked prefill per attention-DP rank
    max_bs: int  # the largest decode CUDA graph


@dataclass
class _Pool:
    """Step 3's answer: the KV pool ``rest = A - P(1 - f)`` and what it holds."""

    rest: float
    slack_gib: float  # P(1 - f)
    cell: int
    budget_cell: int  # what the release divides the budget by (DSA fp8 before 0.5.17); else the cell
    head: str  # "rest = A - P x (1 - f) = ..." (and what is reserved out of it): every reason starts with it
    tokens: int
    low: int | None
    high: int | None
    range_why: list[str]  # why the family's rule varies (then the tokens are a range)
    draft_tokens: int
    mamba: MambaPool | None
    mrr: int  # max_running_requests
    context: int


@dataclass
class _Slack:
    """Step 4's answer: what must fit in the slack ``P(1 - f)`` after the pool."""

    parts: dict[str, float]
    startup: float  # allocated at startup (graphs leaned unless calibrated)
    total: float  # with the leaned activations
    ladder: list[int]
    graph_calibrated: bool


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

    In the order SGLang sizes a launch: P and A (:func:`_p_and_a`), the fraction f
    (:func:`_fraction`), the KV pool (:func:`_kv_pool`; no pool or too few tokens ends it there:
    :func:`_pool_verdict`), what must fit in the slack (:func:`_slack_needs`), the verdict
    (:func:`_slack_verdict`).
    """
    v = as_version(version)
    cfg = effective_config(cfg, v)  # flags given through extra_args count like knobs
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    if num_gpus is not None and cfg.num_gpus > num_gpus:
        raise ConfigError(f"tp_size: {cfg.tp_size} x dp_size {cfg.dp_size} needs {cfg.num_gpus} GPUs, "
                          f"the machine has {num_gpus}")
    cal = (
        calibration
        if calibration is not None and calibration.p_gib is not None and calibration.a_gib is not None
        else None
    )
    x = _Launch(model=model, gpu=g, cfg=cfg, v=v, interconnect=interconnect, cal=cal, draft=draft,
                algo=(cfg.speculative.algorithm or "").upper() or None, notes=[])
    unknown_model = model.is_unknown and cal is None  # never condemned before a launch has calibrated it
    if unknown_model:
        x.notes.append(f"unknown: calibrated from the first launch ({model.unknown_reason})")
    pa = _p_and_a(x)
    fr = _fraction(x)
    pool = _kv_pool(x, pa, fr)
    uncertain = pa.uncertain or bool(pool.range_why)  # the build's rule is not known until a launch shows its pool
    shown_min, launchable_min = _min_viable(pa.a, pa.p)
    common: dict[str, Any] = dict(
        p_gib=round(pa.p, 4),
        w_gib=round(pa.p - pa.a, 4),
        a_gib=round(pa.a, 4),
        f=fr.f,
        f_is_auto=fr.f_is_auto,
        kv_gib=round(pool.rest, 4),
        kv_tokens=pool.tokens,
        cell_bytes=pool.cell,
        slack_gib=round(pool.slack_gib, 4),
        cuda_graph_max_bs=fr.max_bs,
        min_viable_mem_fraction=shown_min,
        min_launchable_mem_fraction=launchable_min,
        max_running_requests=pool.mrr,
        chunked_prefill_size=fr.chunk,
        notes=x.notes,
        pa_estimated=cal is None,
        server_kv_tokens=pool.tokens * cfg.attn_dp_size * max(cfg.dp_size, 1),
        kv_tokens_low=pool.low,
        kv_tokens_high=pool.high,
        kv_range=pool.range_why,
    )
    early = _pool_verdict(x, pa, pool, shown_min, min_tokens, uncertain, unknown_model)
    if early is not None:
        verdict, reason, uncertain = early
        return Prediction(**common, slack_needed_gib=0.0, slack_parts={}, verdict=verdict, reason=reason,
                          uncertain=uncertain)
    sl = _slack_needs(x, pa, fr, pool)
    verdict, reason = _slack_verdict(pa, fr, pool, sl)
    return Prediction(
        **common,
        slack_needed_gib=round(sl.total, 4),
        slack_parts=sl.parts,
        verdict=verdict,
        reason=reason,
        uncertain=uncertain or not sl.graph_calibrated,
        graph_batch_sizes=sl.ladder,
    )


def _p_and_a(x: _Launch) -> _PA:
    """Step 1, P and A: the calibration launch's, adjusted for the buffers that differ from this
    candidate's (at another TP through the overheads learnt at it), else estimated from the GPU's
    capacity and the weight size; then DP attention's weights kept whole per rank out of A."""
    model, g, cfg, v, cal, tp = x.model, x.gpu, x.cfg, x.v, x.cal, x.tp
    comm = slack.comm_buffers_gib(
        g, tp, x.interconnect, custom_allreduce=cfg.custom_allreduce, torch_symm_mem=cfg.enable_torch_symm_mem
    )
    draft_w = _draft_weight_gib(model, x.draft, x.algo, tp)
    draft_w_b = draft_w if v.regime == "B" else 0.0
    align = releases.mxfp4_pad_align(v, sm_family=g.sm_family, rocm=g.rocm)
    weights = weight_bytes_per_gpu(model, tp, mxfp4_align=align) / slack.GIB
    uncertain = cal is None or model.weight_bytes_estimated
    rescaled = False
    if cal is not None:
        cal_tp = cal.tp_size or tp
        cal_comm = (
            cal.comm_gib
            if cal.comm_gib is not None
            else slack.comm_buffers_gib(
                g, cal_tp, x.interconnect, custom_allreduce=cal.custom_allreduce,
                torch_symm_mem=cal.enable_torch_symm_mem
            )
        )
        cal_draft = (
            cal.draft_w_gib
            if cal.draft_w_gib is not None
            else (_draft_weight_gib(model, x.draft, cal.speculative_algorithm, cal_tp) if v.regime == "B" else 0.0)
        )
        cal_p, cal_a = float(cal.p_gib or 0.0), float(cal.a_gib or 0.0)  # both set (filtered by predict)
        if cal_tp == tp:
            p = cal_p - (comm - cal_comm)
            a = cal_a - (comm - cal_comm) - (draft_w_b - cal_draft)
        else:  # learn the overheads at the calibration TP, apply them at this one (NCCL's buffers move with TP)
            residue = cal_p - cal_a - weight_bytes_per_gpu(model, cal_tp, mxfp4_align=align) / slack.GIB - cal_draft
            moved = slack.base_overhead_gib(g, tp, x.interconnect) - slack.base_overhead_gib(g, cal_tp, x.interconnect)
            p = cal_p - moved - (comm - cal_comm)
            a = p - (weights + residue + draft_w_b)
            uncertain = rescaled = True
            x.notes.append(f"calibration at TP {cal_tp} rescaled to TP {tp}")
    else:
        p = g.memory_gib - slack.base_overhead_gib(g, tp, x.interconnect) - comm
        a = p - (weights + LOADER_RESIDUE_GIB + draft_w_b)
        x.notes.append("P and A estimated from capacity and weight size (no calibration)")
    dp_attn = cfg.attn_dp_size
    if dp_attn > 1 or (cal is not None and cal.attn_dp_size > 1):
        cal_rep = replicated_weight_gib(model, cal.tp_size or tp, cal.attn_dp_size) if cal is not None else 0.0
        rep = replicated_weight_gib(model, tp, dp_attn, dp_lm_head=bool(dict(cfg.flags).get("--enable-dp-lm-head")))
        a -= rep - cal_rep
        if dp_attn > 1:
            x.notes.append(f"DP attention {dp_attn}: attention and embedding weights whole on each of "
                           f"{max(tp // dp_attn, 1)} attention-TP rank(s) (+{rep:.2f} GiB per GPU)")
    return _PA(p=p, a=a, weights=weights, draft_w=draft_w, uncertain=uncertain, rescaled=rescaled)


def _fraction(x: _Launch) -> _Fraction:
    """Step 2, f: the study's, else SGLang's automatic value for this GPU and the sizes it depends on
    (the calibration launch's own value where the heuristic would miss it), times ROCm aiter's factor;
    under DP attention each rank prefills its share of the chunk."""
    model, g, cfg, v, cal, tp = x.model, x.gpu, x.cfg, x.v, x.cal, x.tp
    attn_dp = cfg.attn_dp_size
    chunk = cfg.chunked_prefill_size or auto_chunked_prefill_size(g.memory_mib, v)
    max_bs = cfg.cuda_graph_max_bs or auto_cuda_graph_max_bs(g.memory_mib, tp, v, cfg.max_running_requests)
    f_is_auto = cfg.mem_fraction_static is None
    honor = str(cfg.env_value("SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION") or "").lower() in ("1", "true")
    aiter_applied = honor and not f_is_auto
    if f_is_auto:
        f = auto_mem_fraction_static(g.memory_mib, tp_size=tp, version=v, chunked_prefill_size=chunk,
                                     cuda_graph_max_bs=max_bs, speculative_algorithm=x.algo, is_mla=model.is_mla,
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
                x.notes.append(
                    f"auto mem_fraction_static taken as {f} (the calibration launch's value; heuristic gave {cal_f})"
                )
    else:
        f = float(cfg.mem_fraction_static)  # type: ignore[arg-type]
    factor = rocm.aiter_f_factor(cfg.attention_backend, model, tp, int(cfg.context_length or model.context_len)
                                 ) if g.rocm and not aiter_applied else 1.0
    if factor != 1.0:
        f *= factor
        x.notes.append(f"ROCm aiter attention, context > {rocm.AITER_F_CONTEXT_ABOVE}: mem_fraction_static x "
                       f"{factor} = {f:.4f} (SGLang attention_hook.py; SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION "
                       "keeps a given f)")
    if attn_dp > 1 and chunk > 0:
        chunk = max(chunk // attn_dp, 1)  # _handle_data_parallelism: each attention-DP rank prefills its share
        x.notes.append(f"DP attention {attn_dp}: KV for each attention-DP group's own requests "
                       f"(node KV capacity x{attn_dp}), chunked prefill {chunk} per rank")
    return _Fraction(f=f, f_is_auto=f_is_auto, chunk=chunk, max_bs=max_bs)


def _kv_pool(x: _Launch, pa: _PA, fr: _Fraction) -> _Pool:
    """Step 3, the KV pool: ``rest = A - P(1 - f)``, less what SGLang reserves out of it first (a hybrid's
    state pool, DeepSeek V4's compressed state, the multimodal cache), over the cell (learnt from the
    calibration launch where the rule is unknown), capped by ``--max-total-tokens`` and the page; where
    the family's rule varies by build, the range; then max_running_requests."""
    model, g, cfg, v, tp = x.model, x.gpu, x.cfg, x.v, x.tp
    p, a, f = pa.p, pa.a, fr.f
    attn_dp = cfg.attn_dp_size
    spec = cfg.speculative
    # Attention runs at TP tp/attn_dp under DP attention: an MHA rank holds more heads; MLA's latent is per rank anyway.
    cell = cell_size_bytes(model, tp_size=tp // attn_dp, kv_cache_dtype=cfg.kv_cache_dtype, version=v, draft=x.draft,
                           spec_algorithm=x.algo, gpu_sm=g.sm, swa_ratio=_swa_ratio(cfg, model, g, v))
    # What the release divides the budget by; the pool it then allocates holds `cell` a token (DSA fp8 < 0.5.17).
    budget_cell = cell_size_bytes(model, tp_size=tp // attn_dp, kv_cache_dtype=cfg.kv_cache_dtype, version=v,
                                  draft=x.draft, spec_algorithm=x.algo, gpu_sm=g.sm,
                                  swa_ratio=_swa_ratio(cfg, model, g, v), budget=True)
    slack_gib = p * (1 - f)
    rest = a - slack_gib
    head = f"rest = {a:.2f} - {p:.2f} x (1 - {f:g}) = {rest:.2f} GiB"
    speculative = spec.enabled
    draft_tokens = _resolved_draft_tokens(spec, model, v, x.notes) if speculative else 0
    page = _page_size(cfg, model)
    res = kv_reserved(model, rest * slack.GIB, tp=tp // attn_dp, max_running_requests=cfg.max_running_requests,
                      mamba=mamba_knobs(cfg, model, v, draft_tokens, page)) if rest > 0 else None
    reserved = res.bytes if res is not None else 0.0
    pool = res.mamba if res is not None else None
    varies = rule_varies(model)
    learned = _learned_cell(model, x.cal, cfg, varies, lambda rest_b: kv_reserved(
        model, rest_b, tp=tp // attn_dp, max_running_requests=cfg.max_running_requests,
        mamba=mamba_knobs(cfg, model, v, draft_tokens, page)).bytes)
    if learned:
        cell = budget_cell = learned
        x.notes.append(f"KV cell {cell:,} B learned from the calibration launch (the "
                       f"{'architecture' if model.is_unknown else 'build'}'s rule is unknown)")
    if reserved > 0:
        head += f" ({reserved / slack.GIB:.2f} GiB of it {_RESERVED_WHAT.get(model.family, 'for the multimodal cache')}"
        head += (f": {pool.slots} state slots x {pool.per_request_bytes / 2**20:.1f} MiB by {pool.rule})"
                 if pool is not None else ")")
    tokens = max(int(math.floor((rest * slack.GIB - reserved) / budget_cell)), 0) if rest > 0 else 0
    if pool is not None and pool.max_running_cap <= 0:  # SGLang: "Not enough GPU memory for hybrid ... state cache"
        tokens = 0

    def finish(n: int) -> int:  # --max-total-tokens, then the page
        n = min(n, cfg.max_total_tokens) if cfg.max_total_tokens is not None else n
        return n // page * page

    tokens = finish(tokens)
    low: int | None = tokens
    high: int | None = tokens
    range_why: list[str] = []
    if varies and not learned and rest > 0 and tokens > 0:
        def tokens_at(swa_ratio: float) -> int:
            c = cell_size_bytes(model, tp_size=tp // attn_dp, kv_cache_dtype=cfg.kv_cache_dtype, version=v,
                                draft=x.draft, spec_algorithm=x.algo, gpu_sm=g.sm, swa_ratio=swa_ratio)
            return finish(max(int(math.floor((rest * slack.GIB - reserved) / c)), 0))

        low, high, range_why = kv_rule_range(model, cfg, g, v, tokens, tokens_at)
        if range_why:
            x.notes.append("KV tokens " + _range_text(low, high) + ": " + "; ".join(range_why))
    context = cfg.context_length or model.context_len
    mrr = default_max_running_requests(max(tokens, 0), context, v, speculative, cfg.max_running_requests,
                                       dp_size=attn_dp) if tokens else 0
    if pool is not None and mrr > pool.max_running_cap:
        x.notes.append(f"max_running_requests capped at {pool.max_running_cap} by the state pool "
                       f"({pool.slots} slots // {pool.ratio} a request)")
        mrr = pool.max_running_cap
    return _Pool(rest=rest, slack_gib=slack_gib, cell=cell, budget_cell=budget_cell, head=head, tokens=tokens, low=low, high=high,
                 range_why=range_why, draft_tokens=draft_tokens, mamba=pool, mrr=mrr, context=context)


def _pool_verdict(x: _Launch, pa: _PA, pool: _Pool, shown_min: float, min_tokens: int | None, uncertain: bool,
                  unknown_model: bool) -> tuple[str, str, bool] | None:
    """(verdict, reason, uncertain) when the pool alone decides: no pool (``kv_oom``) or fewer tokens than
    the workload needs (``too_few_tokens``); None when the slack decides. With estimated P and A a negative
    formula is only trusted beyond a margin (lean towards launching)."""
    p, rest, tokens, cell, head = pa.p, pool.rest, pool.tokens, pool.cell, pool.head
    margin = (0.02 * p + (0.15 * pa.weights if x.model.weight_bytes_estimated else 0.0)) \
        if x.cal is None or pa.rescaled else 0.0
    if rest <= 0 or tokens <= 0:
        reason = (
            f"{head} < 0; minimum viable mem_fraction_static = {shown_min:.3f}"
            if rest <= 0
            else (f"{head} holds 0 tokens of {cell:,} B; minimum viable mem_fraction_static = {shown_min:.3f}")
        )
        return "kv_oom", reason, rest > -margin or unknown_model
    needed_tokens = max(min_tokens or 0, 7)
    if tokens < needed_tokens:
        return "too_few_tokens", f"{head} -> {tokens:,} tokens x {cell:,} B < {needed_tokens:,} tokens needed", uncertain
    return None


def _slack_needs(x: _Launch, pa: _PA, fr: _Fraction, pool: _Pool) -> _Slack:
    """Step 4, what is allocated after the pool and must fit in the slack: CUDA graphs (scaled from the
    calibration launch's measurement when there is one), the request table, workspaces, the regime-A
    draft (its weights and KV), activations of a chunk."""
    model, g, cfg, v, cal, tp = x.model, x.gpu, x.cfg, x.v, x.cal, x.tp
    tokens, context, draft_tokens = pool.tokens, pool.context, pool.draft_tokens
    speculative = cfg.speculative.enabled
    attn_dp = cfg.attn_dp_size
    chunk, max_bs = fr.chunk, fr.max_bs
    rows = req_to_token_pool_size(tokens, context, v, speculative, cfg.max_running_requests)
    if pool.mamba is not None:
        rows = min(rows, max(pool.mamba.max_running_cap, 1))
    tpr = draft_tokens if speculative and draft_tokens else 1
    prefill_on = not cfg.disable_cuda_graph and not g.rocm and _prefill_graphs_on(cfg, v, speculative=speculative,
                                                                   dp_attention=attn_dp > 1)
    prefill_max = min(2048 if model.is_mla else chunk, cfg.max_total_tokens or chunk)
    ladder = [] if cfg.disable_cuda_graph else slack.ladder_for(max_bs, speculative=speculative, version=v, req_rows=rows)
    graphs = _graph_estimate(model, v, ladder, speculative, tpr, prefill_on, prefill_max, attn_dp)
    graph_calibrated = False
    if cal is not None and cal.graph_gib is not None and not cfg.disable_cuda_graph:
        cal_tp = cal.tp_size or tp
        cal_spec = bool(cal.speculative_algorithm)
        cal_bs = cal.cuda_graph_max_bs or auto_cuda_graph_max_bs(g.memory_mib, cal_tp, v)
        cal_rows = req_to_token_pool_size(cal.kv_tokens or tokens, context, v, cal_spec, None)
        cal_ladder = slack.ladder_for(cal_bs, speculative=cal_spec, version=v, req_rows=cal_rows)
        cal_est = _graph_estimate(
            model, v, cal_ladder, cal_spec, (cal.num_draft_tokens or 1) if cal_spec else 1, prefill_on, prefill_max,
            cal.attn_dp_size,
        )
        if cal_est > 0:
            graphs = cal.graph_gib * graphs / cal_est
            graph_calibrated = True
    parts = {
        "graphs": graphs,
        "req_to_token": slack.req_to_token_gib(rows, context, draft_tokens, v),
        "attention_workspace": slack.attention_workspace_gib(model),
    }
    if pool.cell > pool.budget_cell:  # the pool's rows outgrow the budget they were counted against: out of the slack
        parts["kv_past_budget"] = tokens * (pool.cell - pool.budget_cell) / slack.GIB
        x.notes.append(f"KV tokens counted at {pool.budget_cell:,} B, the pool holds {pool.cell:,} B a token: "
                       f"{parts['kv_past_budget']:.2f} GiB past the budget (DSA's fp8 rows before SGLang 0.5.17)")
    if slack.fusion_enabled(model, g, tp, cfg.flashinfer_allreduce_fusion):
        parts["allreduce_fusion"] = slack.fusion_workspace_gib(model, tp)
    if cfg.enable_symm_mem:
        parts["symm_mem"] = 4.0
    if speculative and v.regime == "A":
        draft = x.draft
        d_cell = (
            cell_size_bytes(draft, tp_size=tp, kv_cache_dtype=cfg.kv_cache_dtype, version=v)
            if draft
            else int(pool.cell / max(model.num_layers, 1) * _draft_layers(model, None, x.algo or ""))
        )
        parts["draft_weights"] = pa.draft_w
        parts["draft_kv"] = tokens * d_cell / slack.GIB
    activations = slack.activations_gib(model, tp, chunk, pool.mrr or max_bs)
    lean_graph = 1.0 if graph_calibrated else LEAN
    startup = sum(parts.values()) - graphs + graphs * lean_graph
    total = startup + activations * LEAN
    parts["activations"] = activations
    parts = {k: round(val, 4) for k, val in parts.items()}
    return _Slack(parts=parts, startup=startup, total=total, ladder=ladder, graph_calibrated=graph_calibrated)


def _slack_verdict(pa: _PA, fr: _Fraction, pool: _Pool, sl: _Slack) -> tuple[str, str]:
    """Step 5, the verdict on the slack: the startup allocations do not fit (``graph_capture_oom``), the
    activations under load may not (``runtime_oom_risk``), or everything fits."""
    p, f, slack_gib, startup, total = pa.p, fr.f, pool.slack_gib, sl.startup, sl.total
    listed = ", ".join(f"{k} {val:.2f}" for k, val in sl.parts.items())
    kv_txt = f"{pool.head} -> {pool.tokens:,} tokens x {pool.cell:,} B"
    if startup > slack_gib:
        return (
            "graph_capture_oom",
            (
                f"slack {p:.2f} x (1 - {f:g}) = {slack_gib:.2f} GiB < {startup:.2f} GiB "
                f"allocated after the KV pool at startup ({listed}); {kv_txt}"
            ),
        )
    if total > slack_gib:
        return (
            "runtime_oom_risk",
            (f"slack {slack_gib:.2f} GiB < {total:.2f} GiB with activations ({listed}); {kv_txt}"),
        )
    return "fits", f"{kv_txt}; slack {slack_gib:.2f} GiB >= {total:.2f} GiB needed ({listed})"


def _resolved_draft_tokens(spec: SpeculativeConfig, model: ModelProfile, v: SglangVersion, notes: list[str]) -> int:
    """Draft tokens per request as SGLang will resolve them (auto choice, topk 1 => steps + 1)."""
    try:
        resolved, _ = validate_speculative(spec, model.architecture, v)
        return int(resolved.num_draft_tokens or 1)
    except ConfigError as e:
        notes.append(f"speculative settings SGLang would refuse ({e}); memory estimated with its auto choice")
        return auto_speculative_params(spec.algorithm or "EAGLE", model.architecture)[2]


def _learned_cell(model: ModelProfile, cal: Calibration | None, cfg: ServerConfig, varies: bool = False,
                  reserved_at: Callable[[float], float] | None = None) -> int:
    """KV bytes per token learned from a calibration launch of the same shape (tp, DP attention): an unknown
    architecture's, or a family's whose rule varies by build (:func:`rule_varies`): the launch's
    ``(rest - reserved) / #tokens``. 0 when there is nothing to learn from."""
    if not (model.is_unknown or varies) or cal is None or not cal.kv_tokens or cal.mem_fraction_static is None:
        return 0
    if (cal.tp_size or cfg.tp_size) != cfg.tp_size or cal.attn_dp_size != cfg.attn_dp_size:
        return 0
    rest = (float(cal.a_gib or 0.0) - float(cal.p_gib or 0.0) * (1 - cal.mem_fraction_static)) * slack.GIB
    rest -= reserved_at(rest) if reserved_at is not None and not model.is_unknown and rest > 0 else 0.0
    return int(rest / cal.kv_tokens) if rest > 0 else 0


def rule_varies(model: ModelProfile) -> bool:
    """Whether the family's pool rule varies by build or release beyond what the launch's knobs say:
    DeepSeek V4 (its SWA ratio, request-cap mode and platform layouts)."""
    return model.family == "dsv4"


def kv_rule_range(model: ModelProfile, cfg: ServerConfig, gpu: GpuKind, v: SglangVersion, tokens: int,
                  tokens_at: Callable[[float], int]) -> tuple[int | None, int | None, list[str]]:
    """(low, high, why): where the KV tokens can be for a family whose rule varies by build or release;
    ``tokens_at(swa_ratio)`` sizes the pool at another ``--swa-full-tokens-ratio``. None = unknown."""
    low: int | None = tokens
    high: int | None = tokens
    why: list[str] = []
    if model.family != "dsv4":
        return low, high, why
    if _float_flag(cfg, "--swa-full-tokens-ratio") is None:
        low = min(tokens, tokens_at(0.8))
        why.append("0.5.23 sets --swa-full-tokens-ratio 0.1 for DeepSeek V4 only when it is not given "
                   "(arg_groups/model_overrides/deepseek_v4.py:44-49); a build without that override sizes the SWA "
                   "pool at SGLang's generic 0.8 (0.5.9 server_args.py:339)")
        if cfg.max_running_requests is not None and v.at_least("0.5.23"):
            high = None
            why.append("with --max-running-requests and no ratio, 0.5.23 sizes the SWA pool from the request cap "
                       "instead (model_executor/pool_configurator.py:1328-1351): not modelled, the top is unknown")
    if gpu.rocm:
        low = None
        why.append("on ROCm the pool's layout is the platform's (0.5.23 mem_cache/deepseek_v4_memory_pool.py:198-228; "
                   "the unified ring of SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton, pool_configurator.py:1085-1095, "
                   "1225-1241; a ROCm build's 'compressed' backend): not modelled, the low end is unknown")
    return low, high, why


def _range_text(low: int | None, high: int | None) -> str:
    return f"{'?' if low is None else f'{low:,}'}..{'?' if high is None else f'{high:,}'}"


def _swa_ratio(cfg: ServerConfig, model: ModelProfile | None = None, gpu: GpuKind | None = None,
               v: SglangVersion | None = None) -> float | None:
    """``--swa-full-tokens-ratio``; 1.0 under ``--disable-hybrid-swa-memory`` (every layer in the full pool),
    given or set by the release (GPT-OSS on trtllm_mha before 0.5.23: :func:`releases.gpt_oss_disables_hybrid_swa`)."""
    if "--disable-hybrid-swa-memory" in cfg.extra_args or cfg.flag("--disable-hybrid-swa-memory"):
        return 1.0
    if model is not None and gpu is not None and v is not None and releases.gpt_oss_disables_hybrid_swa(
            v, model.architecture, sm_family=gpu.sm_family, attention_backend=cfg.attention_backend):
        return 1.0
    return _float_flag(cfg, "--swa-full-tokens-ratio")


def mamba_knobs(cfg: ServerConfig, model: ModelProfile, v: SglangVersion, draft_tokens: int, page: int) -> MambaKnobs:
    """What ``cfg`` sets that sizes a hybrid model's state pool (:mod:`autotune.sglang.models.mamba`):
    searched flags and extra_args, by their ``server_args`` names."""
    def arg(dest: str) -> Any:
        flag = "--" + dest.replace("_", "-")
        return _bool_flag(cfg, flag) if dest.startswith("disable_") else _str_flag(cfg, flag)

    return knobs_from_args(arg, version=v, architecture=model.architecture, attn_dp=cfg.attn_dp_size,
                           max_running_requests=cfg.max_running_requests, draft_tokens=draft_tokens, page_size=page)


def _bool_flag(cfg: ServerConfig, name: str) -> bool:
    """A bare SGLang flag given as a searched flag (True) or in extra_args."""
    return bool(cfg.flag(name)) or name in cfg.extra_args


def _str_flag(cfg: ServerConfig, name: str) -> str | None:
    """A flag's value given as a searched flag or in extra_args (None when absent)."""
    value = cfg.flag(name)
    args = list(cfg.extra_args)
    if value is None and name in args and args.index(name) + 1 < len(args):
        value = args[args.index(name) + 1]
    return None if value is None else str(value)


def _float_flag(cfg: ServerConfig, name: str) -> float | None:
    """A numeric SGLang flag given as a searched flag or in extra_args (None when absent)."""
    value = _str_flag(cfg, name)
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: {shown(value)} is not a number") from None


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
    if releases.prefill_graphs_default_on(v):
        if {"--disable-piecewise-cuda-graph", "--disable-prefill-cuda-graph"} & args:
            return False
        if "--cuda-graph-backend-prefill" in args and "disabled" in args:
            return False
        return releases.prefill_graphs_off_reason(v, speculative=speculative, dp_attention=dp_attention) is None
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
    decode = slack.decode_graph_gib(model, ladder, tokens_per_req)
    pad = slack.dp_padding_gib(max(ladder, default=0), attn_dp)
    est = decode * 1.3 if speculative and ladder else decode  # draft decode/extend graphs on top of the target's
    if prefill_on:
        est += slack.prefill_graph_extra_gib(slack.prefill_graph_gib(model, prefill_max), decode + pad, version)
    return est + pad
