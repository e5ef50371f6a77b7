"""The study file: pydantic models, ``extra="forbid"``, one-line errors with the dotted path.

A study file is YAML (loaded with ``yaml.safe_load``, within the bounds of :mod:`autotune.safe_yaml`)::

    name: demo
    n_trials: 30
    server: {backend: sim, sglang_version: "0.5.9", model_path: models/kimi-k2-class, tp_size: 8}
    hardware: {gpu: rtx-pro-6000, num_gpus: 8, interconnect: pcie}
    search_space: {mem_fraction_static: {low: 0.5, high: 0.95, step: 0.01}, ...}
    workload: {input_len: 512, output_len: 256, num_prompts: 512, concurrency: [256]}
    objective: {metric: output_throughput, direction: maximize}

Relative paths (``storage`` default, ``model_path``, draft model, dataset) are
resolved against the study file's directory, so a study runs from any cwd.
"""

from __future__ import annotations

import errno
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from autotune.errors import ConfigError
from autotune.limits import (
    MAX_CHOICES,
    MAX_GPU_HOURS,
    MAX_KNOB_INT,
    MAX_PROMPTS,
    MAX_SEED,
    MAX_SEND_S,
    MAX_SEQUENCE_TOKENS,
    MAX_SIM_FACTOR,
    MAX_STUDY_FLAGS,
    MAX_STUDY_S,
    MAX_WAIT_S,
    MIN_TIME_SCALE,
    STUDY_BYTES,
    clip,
    shown,
)
from autotune.load.spec import GOODPUT_KEYS, LoadTimeouts, load_problem
from autotune.load.workloads import Workload
from autotune.objective import Direction, Objective, check_slo_key
from autotune.redact import (
    REDACTED,
    abbreviated_secret_flags,
    is_secret_name,
    redact_argv,
    redact_value,
    secret_argv_positions,
)

_W = TypeVar("_W", bound="WorkloadSpec")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")

# Metrics a study may optimise: bench_serving's key names.
OBJECTIVE_METRICS = {
    "output_throughput": "maximize",
    "goodput": "maximize",  # requests/s meeting workload.goodput_slo
    "cache_hit_rate": "maximize",
    "total_throughput": "maximize",
    "request_throughput": "maximize",
    "input_throughput": "maximize",
    "mean_ttft_ms": "minimize",
    "median_ttft_ms": "minimize",
    "p99_ttft_ms": "minimize",
    "mean_tpot_ms": "minimize",
    "median_tpot_ms": "minimize",
    "p99_tpot_ms": "minimize",
    "mean_itl_ms": "minimize",
    "median_itl_ms": "minimize",
    "p99_itl_ms": "minimize",
    "mean_e2e_latency_ms": "minimize",
    "p99_e2e_latency_ms": "minimize",
}
SPECULATIVE_ALGORITHMS = ("none", "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def launch_text(value: str, what: str, *, echo: bool = True) -> str:
    """``value`` when it can travel in a server's argv or environment: printable text (a NUL byte
    makes ``exec`` fail at the first launch, with a trial left RUNNING; a newline or an escape
    sequence is a copy-paste accident, and mangles the logged command). ``echo=False``: the error
    gives the character's position, not the value (an environment variable may hold a secret)."""
    if not value.isprintable():
        at, bad = next((i, c) for i, c in enumerate(value) if not c.isprintable())
        where = f"in {shown(value)}" if echo else f"at position {at} of the value"
        raise ValueError(f"{what}: non-printable character {bad!r} {where}")
    return value


_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SamplerSpec(_Model):
    # "auto": chosen by the space (autotune.study.search.samplers.choose_sampler says which and why).
    kind: Literal["auto", "tpe", "random", "grid", "gp"] = "auto"
    seed: int | None = Field(default=0, ge=0, le=MAX_SEED)  # optuna's samplers take 0 .. 2**32 - 1
    n_startup_trials: int = Field(default=8, ge=0)


class ExecutorSpec(_Model):
    kind: Literal["inline", "ray"] = "ray"  # Ray by default: a local instance, or a cluster
    address: str | None = None  # existing Ray cluster; None = a local instance (or RAY_ADDRESS)
    max_parallel: int | None = Field(default=None, ge=1)  # trials in flight; None = as many as GPUs allow
    num_cpus: int | None = Field(default=None, ge=1)  # for a local Ray instance
    num_gpus: int | None = Field(default=None, ge=0)  # declared GPUs for a local Ray instance
    resources: dict[str, float] = Field(default_factory=dict)  # node resources each trial reserves


class SimSpec(_Model):
    time_scale: float = Field(default=10.0, ge=MIN_TIME_SCALE, le=MAX_SIM_FACTOR)
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    faults: list[str] = Field(default_factory=list)


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine: localhost, 127.0.0.0/8, ::1."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ServerSpec(_Model):
    backend: Literal["sim", "sglang"] = "sim"
    # cpu: real SGLang on CPU (autotune.sglang.hardware.cpu): its flags and env var are added to every
    # launch, and server.python defaults to `autotune sglang-env install --device cpu`'s venv.
    device: Literal["cuda", "cpu"] = "cuda"
    sglang_version: str = "0.5.9"
    model_path: str
    tp_size: int = Field(default=1, ge=1, le=64)
    dp_size: int = Field(default=1, ge=1, le=64)
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    startup_timeout_s: float = Field(default=900.0, gt=0, le=MAX_WAIT_S)
    # Servers listen on loopback. Another host (0.0.0.0, a routable address) lets other machines
    # reach every server of the study, so the study must say so: expose: true (run then warns).
    expose: bool = False
    host: str = "127.0.0.1"
    python: str | None = None  # interpreter that runs sglang.launch_server; default: this one
    sim: SimSpec = Field(default_factory=SimSpec)

    @field_validator("sglang_version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", v):
            raise ValueError(f"must look like 0.5.9, got {shown(v)}")
        return v

    @field_validator("host")
    @classmethod
    def _loopback_unless_exposed(cls, v: str, info: ValidationInfo) -> str:
        if not is_loopback(v) and not info.data.get("expose"):
            raise ValueError("listens beyond loopback: other machines could reach every server of the "
                             "study; set server.expose: true to allow it")
        return v

    @model_validator(mode="after")
    def _device(self) -> ServerSpec:
        if self.device == "cpu" and self.backend != "sglang":
            raise ValueError("device 'cpu' runs real SGLang on CPU: set backend: sglang")
        return self

    @field_validator("extra_args")
    @classmethod
    def _extra(cls, v: list[str]) -> list[str]:
        secret = secret_argv_positions(v)  # the value of --api-key: never echoed, even when wrong
        for i, a in enumerate(v):
            launch_text(a, "argument", echo=i not in secret)
            full = abbreviated_secret_flags(a)  # --api-ke KEY: argparse's --api-key, whose value nothing hides
            if full:
                raise ValueError(f"{a.partition('=')[0]!r} abbreviates the secret flag {' or '.join(full)}, which "
                                 f"SGLang's parser would take it for: write it out: {full[0]}")
            if i in secret:
                continue
            if a in ("--port", "--host", "--model-path", "--tp-size") or a.startswith(("--port=", "--host=")):
                raise ValueError(f"{a!r} is set by autotune; use the study's own field instead")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not _ENV_NAME_RE.fullmatch(name):
                raise ValueError(f"environment variable {shown(name)}: must look like SOME_VAR")
            launch_text(value, name, echo=False)
        return v

    @field_validator("python")
    @classmethod
    def _python(cls, v: str | None) -> str | None:
        return None if v is None else launch_text(v, "python")


class HardwareSpec(_Model):
    # A catalogue name, a custom description (autotune.sglang.hardware.gpus.custom_gpu_name), or
    # "auto" in the YAML: read from the node before validation (autotune.node.study_file.load_study).
    gpu: str
    num_gpus: int = Field(default=1, ge=1, le=1024)
    interconnect: Literal["pcie", "nvlink"] = "nvlink"  # nvlink: the GPUs' own fabric (NVLink, or AMD's xGMI)

    @field_validator("interconnect", mode="before")
    @classmethod
    def _xgmi(cls, v: Any) -> Any:
        # AMD Instinct's xGMI (Infinity Fabric) mesh plays NVLink's part everywhere autotune looks
        # (SGLang's is_full_nvlink asks amdsmi for XGMI links: custom_all_reduce_utils.py).
        return "nvlink" if isinstance(v, str) and v.lower() in ("xgmi", "infinity-fabric") else v

    @field_validator("gpu")
    @classmethod
    def _known(cls, v: str) -> str:
        from autotune.sglang.hardware.gpus import get_gpu

        try:
            get_gpu(v)
        except ConfigError as exc:
            raise ValueError(str(exc).removeprefix("gpu: ")) from None
        return v


class FloatRange(_Model):
    low: float
    high: float
    step: float | None = None

    @model_validator(mode="after")
    def _check(self) -> FloatRange:
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError("low and high must be finite")
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        if self.step is not None and self.step <= 0:
            raise ValueError(f"step must be > 0, got {self.step}")
        return self


class IntRange(_Model):
    low: int = Field(ge=-MAX_KNOB_INT, le=MAX_KNOB_INT)
    high: int = Field(ge=-MAX_KNOB_INT, le=MAX_KNOB_INT)
    step: int = 1

    @model_validator(mode="after")
    def _check(self) -> IntRange:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        if self.step <= 0:
            raise ValueError(f"step must be > 0, got {self.step}")
        return self


class IntChoices(_Model):
    choices: list[int] = Field(min_length=1, max_length=MAX_CHOICES)

    @field_validator("choices")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        bad = [c for c in v if not 0 < c <= MAX_KNOB_INT]
        if bad:
            raise ValueError(f"choices must be > 0 and <= {MAX_KNOB_INT}, got {shown(bad[0])}")
        return list(dict.fromkeys(v))


class BoolChoices(_Model):
    choices: list[bool] = Field(min_length=1, max_length=MAX_CHOICES)


class StrChoices(_Model):
    choices: list[str] = Field(min_length=1, max_length=MAX_CHOICES)

    @field_validator("choices")
    @classmethod
    def _printable(cls, v: list[str]) -> list[str]:
        return [launch_text(c, "choice") for c in v]


class MemFractionRange(FloatRange):
    @model_validator(mode="after")
    def _unit(self) -> MemFractionRange:
        if not (0.0 < self.low <= 1.0 and 0.0 < self.high <= 1.0):
            raise ValueError(f"must lie in (0, 1], got low={self.low} high={self.high}")
        return self


class SpeculativeSpace(_Model):
    algorithm: StrChoices = Field(default_factory=lambda: StrChoices(choices=["none"]))
    draft_model_path: str | None = None
    num_steps: IntRange | IntChoices | None = None
    eagle_topk: IntRange | IntChoices | None = None
    num_draft_tokens: IntRange | IntChoices | None = None

    @field_validator("algorithm")
    @classmethod
    def _algos(cls, v: StrChoices) -> StrChoices:
        for a in v.choices:
            if a not in SPECULATIVE_ALGORITHMS:
                raise ValueError(f"unknown algorithm {shown(a)}; known: {', '.join(SPECULATIVE_ALGORITHMS)}")
        return v

    @model_validator(mode="after")
    def _draft(self) -> SpeculativeSpace:
        needs = {"EAGLE", "EAGLE3", "STANDALONE"} & set(self.algorithm.choices)
        if needs and not self.draft_model_path:
            raise ValueError(f"draft_model_path is required for {sorted(needs)[0]}")
        return self


class AnyChoices(_Model):
    """Choices of a flag or environment variable searched by name (bool, int, float or text)."""

    choices: list[StrictBool | StrictInt | StrictFloat | str] = Field(min_length=1, max_length=MAX_CHOICES)

    @field_validator("choices")
    @classmethod
    def _values(cls, v: list[Any]) -> list[Any]:
        for c in v:
            if isinstance(c, str):
                launch_text(c, "choice")
            elif isinstance(c, float) and not math.isfinite(c):
                raise ValueError(f"choices must be finite, got {c}")
            elif isinstance(c, int) and not isinstance(c, bool) and abs(c) > MAX_KNOB_INT:
                raise ValueError(f"choices must lie within +-{MAX_KNOB_INT}, got {shown(c)}")
        return v


_LAYOUT_RE = re.compile(r"tp(\d+)(?:-dp(\d+))?(?:-ep(\d+))?")


def parse_layout(text: str) -> tuple[int, int, int]:
    """``"tp4-dp2"`` -> (tp 4, dp 2, ep 1); ``"tp8-ep8"`` -> (8, 1, 8). ValueError on anything else."""
    m = _LAYOUT_RE.fullmatch(text.strip().lower())
    if not m or int(m.group(1)) < 1:
        raise ValueError(f"layout {shown(text)}: expected tpN[-dpM][-epK], e.g. tp8, tp4-dp2, tp8-ep8")
    tp, dp, ep = (int(g) if g else 1 for g in m.groups())
    if dp < 1 or ep < 1 or tp % ep:
        raise ValueError(f"layout {shown(text)}: dp and ep must be >= 1 and ep must divide tp")
    return tp, dp, ep


class LayoutChoices(_Model):
    """TP x DP x EP per trial on one node: ``tp8``, ``tp4-dp2`` (two TP-4 replicas in one server), ``tp8-ep8``."""

    choices: list[str] = Field(min_length=1, max_length=MAX_CHOICES)

    @field_validator("choices")
    @classmethod
    def _layouts(cls, v: list[str]) -> list[str]:
        for item in v:
            parse_layout(item)
        return list(dict.fromkeys(x.strip().lower() for x in v))


class SearchSpace(_Model):
    mem_fraction_static: MemFractionRange | None = None
    cuda_graph_max_bs: IntChoices | None = None
    custom_allreduce: BoolChoices | None = None
    speculative: SpeculativeSpace | None = None
    # More knobs, as users need them.
    chunked_prefill_size: IntChoices | None = None
    max_running_requests: IntChoices | None = None
    max_total_tokens: IntChoices | None = None  # the KV pool's cap (always set on CPU)
    flashinfer_allreduce_fusion: BoolChoices | None = None
    enable_torch_symm_mem: BoolChoices | None = None
    kv_cache_dtype: StrChoices | None = None
    attention_backend: StrChoices | None = None
    # Any flag or environment variable by name (autotune.sglang.knobs.catalogue says what it knows of each).
    flags: dict[str, AnyChoices] = Field(default_factory=dict)
    env: dict[str, AnyChoices] = Field(default_factory=dict)
    layout: LayoutChoices | None = None  # overrides server.tp_size / dp_size per trial

    @field_validator("flags")
    @classmethod
    def _flag_names(cls, v: dict[str, AnyChoices]) -> dict[str, AnyChoices]:
        for name in v:
            if not re.fullmatch(r"--[a-z0-9][a-z0-9-]*", name):
                raise ValueError(f"flag {shown(name)}: must look like --some-flag")
            if name in ("--port", "--host", "--model-path", "--tp-size", "--dp-size"):
                raise ValueError(f"flag {name!r} is set by autotune; use the study's own field instead")
            refused = searched_secret("flags", name)
            if refused:
                raise ValueError(f"{name}: {refused}")
        return v

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, AnyChoices]) -> dict[str, AnyChoices]:
        for name in v:
            if not _ENV_NAME_RE.fullmatch(name):
                raise ValueError(f"environment variable {shown(name)}: must look like SOME_VAR")
            refused = searched_secret("env", name)
            if refused:
                raise ValueError(f"{name}: {refused}")
        return v


def searched_secret(kind: Literal["flags", "env"], name: str) -> str | None:
    """Why ``search_space.<kind>.<name>`` cannot be searched, or None: a secret (the rule of
    :mod:`autotune.redact`) would be stored as a trial parameter and its distribution, and shown by
    every command that shows a candidate. A secret is fixed for a study: ``server.extra_args`` or
    ``server.env``, which hand it to the server and hide it everywhere else."""
    home = "server.extra_args" if kind == "flags" else "server.env"
    why = "its values would be stored as trial parameters"
    if is_secret_name(name):
        return f"a secret cannot be searched: {why}; set it in {home}"
    full = abbreviated_secret_flags(name) if kind == "flags" else []
    if full:
        return (f"abbreviates the secret flag {' or '.join(full)}, and a secret cannot be searched: {why}; "
                f"set it, written out, in {home}")
    return None


def _searched_secret(data: dict[str, Any]) -> str | None:
    """The first secret among ``search_space.flags`` / ``search_space.env`` of the raw study, as one
    line that names it and none of its values (checked before validation: an error of the model
    would show the values it received)."""
    space = data.get("search_space")
    if not isinstance(space, dict):
        return None
    for kind in ("flags", "env"):
        knobs = space.get(kind)
        if isinstance(knobs, dict):
            for name in knobs:
                refused = searched_secret(kind, name) if isinstance(name, str) else None
                if refused:
                    return f"search_space.{kind}.{clip(name)}: {refused}"
    return None


class RateSearchSpec(_Model):
    """Per launch, the highest Poisson request rate (req/s) whose load point meets the SLO,
    by bisection between ``low`` and ``high`` in ``steps`` load points."""

    low: float = Field(gt=0)
    high: float = Field(gt=0)
    steps: int = Field(default=4, ge=1, le=12)

    @model_validator(mode="after")
    def _order(self) -> RateSearchSpec:
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be < high ({self.high})")
        return self


class WorkloadSpec(_Model):
    backend: Literal["sglang", "openai", "openai-chat"] = "sglang"
    input_len: int = Field(default=1024, ge=1, le=MAX_SEQUENCE_TOKENS)
    output_len: int = Field(default=256, ge=1, le=MAX_SEQUENCE_TOKENS)
    range_ratio: float = Field(default=1.0, gt=0, le=1)
    num_prompts: int | None = Field(default=512, ge=1, le=MAX_PROMPTS)
    duration_s: float | None = Field(default=None, gt=0, le=MAX_SEND_S)
    concurrency: list[int] = Field(default_factory=lambda: [64], min_length=1)
    request_rate: float | None = Field(default=None, gt=0)
    rate_search: RateSearchSpec | None = None  # needs objective.slo
    warmup_requests: int = Field(default=4, ge=0, le=MAX_PROMPTS)
    flush_cache: bool = True
    dataset_path: str | None = None
    # The traffic, by kind (autotune.load.workloads): random, sharegpt, generated-shared-prefix,
    # multi-turn, trace, file. None: random prompts of input_len / output_len / range_ratio.
    dataset: Workload | None = None
    # Model directory or tokenizer.json for exact text-prompt lengths (default: the server's
    # model_path when it holds a tokenizer.json; else one token per word, noted in the metrics).
    tokenizer: str | None = None
    # Per-request ceilings for goodput (ttft_ms, tpot_ms, e2e_latency_ms): requests/s that met them.
    goodput_slo: dict[str, float] = Field(default_factory=dict)
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    # Per-request limits of the load generator (wall seconds): a short between_tokens_s ends a
    # load point on a hung server sooner (default 600 s to the first token, 60 s between tokens).
    timeouts: LoadTimeouts = Field(default_factory=lambda: LoadTimeouts.model_validate({}))

    @field_validator("concurrency")
    @classmethod
    def _conc(cls, v: list[int]) -> list[int]:
        bad = [c for c in v if c < 1]
        if bad:
            raise ValueError(f"concurrency levels must be >= 1, got {bad[0]}")
        return v

    @field_validator("goodput_slo")
    @classmethod
    def _goodput(cls, v: dict[str, float]) -> dict[str, float]:
        # the load generator's own rule (autotune.load.spec.LoadSpec), checked before the first launch
        for key, ceiling in v.items():
            if key not in GOODPUT_KEYS:
                raise ValueError(f"unknown key {shown(key)}; known: ttft_ms, tpot_ms, e2e_latency_ms")
            if not ceiling > 0:
                raise ValueError(f"{key} ceiling must be > 0, got {ceiling}")
        return v

    @model_validator(mode="after")
    def _bounded(self) -> WorkloadSpec:
        finite = self.dataset is not None and self.dataset.kind != "random"
        if self.num_prompts is None and self.duration_s is None and not finite:
            raise ValueError("set num_prompts or duration_s (or both)")
        if finite and "num_prompts" not in self.model_fields_set:
            object.__setattr__(self, "num_prompts", None)  # the dataset's own size, not the 512 default
        # the load generator's own rule (autotune.load.spec.LoadSpec), for every rate a load point may take
        rates = [("request_rate", self.request_rate)]
        if self.rate_search is not None:  # the lowest rate its bisection may try
            rates.append(("rate_search.low", self.rate_search.low))
        for field, rate in rates:
            problem = load_problem(num_prompts=self.num_prompts, warmup_requests=self.warmup_requests,
                                   input_len=self.input_len, dataset=self.dataset, dataset_path=self.dataset_path,
                                   request_rate=rate, duration_s=self.duration_s, rate_field=field)
            if problem:
                raise ValueError(problem)
        return self


_MIX_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")


class MixWorkloadSpec(WorkloadSpec):
    """One workload of a mix: its own traffic and load points, a ``name`` (its points are
    ``<name>.c<N>``), a ``weight`` in the weighted objective, and optionally its own SLO
    ceilings (default: objective.slo), which must hold for it."""

    name: str
    weight: float = Field(default=1.0, gt=0)
    slo: dict[str, float] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _mix_name(cls, v: str) -> str:
        if not _MIX_NAME_RE.match(v):
            raise ValueError(f"must start with a letter, then letters, digits, '_' or '-' (32 at most), got {shown(v)}")
        return v

    @field_validator("slo")
    @classmethod
    def _mix_slo(cls, v: dict[str, float]) -> dict[str, float]:
        return ObjectiveSpec._slo(v)


class ObjectiveSpec(_Model):
    metric: str = "output_throughput"
    direction: Literal["maximize", "minimize"] | None = None
    # Ceilings on latency metrics (p99_ttft_ms: 2000, ...): a trial's value is its best load
    # point that meets them; misses go to the sampler as a constraint.
    slo: dict[str, float] = Field(default_factory=dict)

    @field_validator("slo")
    @classmethod
    def _slo(cls, v: dict[str, float]) -> dict[str, float]:
        for key, ceiling in v.items():
            check_slo_key(key)
            if not ceiling > 0:
                raise ValueError(f"{key} ceiling must be > 0, got {ceiling}")
        return v

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        if v not in OBJECTIVE_METRICS:
            raise ValueError(f"unknown metric {shown(v)}; known: {', '.join(OBJECTIVE_METRICS)}")
        return v

    @property
    def resolved_direction(self) -> str:
        return self.direction or OBJECTIVE_METRICS[self.metric]

    def as_objective(self) -> Objective:
        """What a trial is measured against (:class:`autotune.objective.Objective`)."""
        return Objective(self.metric, Direction(self.resolved_direction), dict(self.slo))


class SearchSpec(_Model):
    """How the budget is spent (see docs: staged search, confirmation of the winner)."""

    # "auto": a designed start (autotune.study.search.initial_design), then stages that end when they
    # stop improving and whose order the data may overturn (autotune.study.search.policy);
    # "fixed": base knobs for stage1_fraction of the budget, then speculative on the best base;
    # "off": the sampler alone.
    stages: Literal["auto", "fixed", "off"] = "auto"
    stage1_fraction: float = Field(default=0.6, gt=0, lt=1)  # "auto": the most stage 1 may take
    # Designed starting points after the baseline (None: sized from n_trials; 0: none).
    initial_design: int | None = Field(default=None, ge=0, le=64)
    # "auto": a stage ends after this many of its trials brought no gain (None: from n_trials).
    patience: int | None = Field(default=None, ge=1, le=1000)
    # At the end, run the top configurations and the baseline again and report the
    # winner with median and spread.
    confirm_top: int = Field(default=2, ge=0, le=20)
    repeats: int = Field(default=1, ge=0, le=10)
    # When SGLang's defaults (the baseline) launch: "last" (default) as the last search trial,
    # right before the confirmation re-runs, so the search's first launch is already a candidate
    # that can win and the defaults are measured back to back with the winner (the fairer A/B);
    # "first": as trial 0 (a study stopped by its wall time or GPU budget still has it; also what
    # a grid sampler and stages "fixed" do).
    baseline: Literal["first", "last"] = "last"
    # Named launch points run right after the baseline (SGLang's automatic values), so the report
    # shows the gain against them too, e.g. the value a node was started with by hand:
    # {"seed's start": {"mem_fraction_static": 0.88}}. Their params override the baseline's.
    references: dict[str, dict[str, Any]] = Field(default_factory=dict)
    early_stopping: EarlyStoppingSpec = Field(default_factory=lambda: EarlyStoppingSpec())


class EarlyStoppingSpec(_Model):
    """Stop a load point when its throughput so far is clearly worse than earlier trials'."""

    enabled: bool = True
    margin: float = Field(default=0.15, gt=0, lt=1)  # below the median at the same step by more than this
    n_startup_trials: int = Field(default=4, ge=1)
    n_warmup_steps: int = Field(default=2, ge=0)  # steps are 1 s snapshots of the load point


SearchSpec.model_rebuild()


class BudgetSpec(_Model):
    """Stop when any limit is reached (n_trials is the study's own)."""

    wall_time_s: float | None = Field(default=None, gt=0, le=MAX_STUDY_S)
    gpu_hours: float | None = Field(default=None, gt=0, le=MAX_GPU_HOURS)  # modelled on the simulated backend


class CalibrationSpec(_Model):
    """A launch's measured memory (``autotune calibrate`` stores the same): P the free memory before
    the weights, A after them, both GiB per GPU; finite, A within P (the GPU's capacity: StudySpec)."""

    p_gib: float = Field(gt=0, allow_inf_nan=False)
    a_gib: float = Field(gt=0, allow_inf_nan=False)
    kv_tokens: int | None = Field(default=None, ge=0, le=2**40)
    graph_gib: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _within_p(self) -> CalibrationSpec:
        if self.a_gib > self.p_gib:
            raise ValueError(f"a_gib ({self.a_gib}) is memory left after the weights: it cannot exceed "
                             f"p_gib ({self.p_gib})")
        return self


def storage_url_problem(url: str) -> str | None:
    """Why a storage URL's user name and password cannot be read one way only, or None.

    SQLAlchemy (and so the driver) ends the password at the URL's FIRST '@'; autotune's rule for
    hiding it (:mod:`autotune.redact`) at the LAST. A raw '@' in the password (``p@ss``) makes
    the rest of it the host the driver names in its errors: such a URL is refused, never echoed
    past what both rules hide. An '@' in the query (``?options=a@b``) is the query's."""
    _scheme, sep, rest = url.partition("://")
    at = rest.find("@")
    if not sep or at < 0 or rest.startswith("/"):  # no userinfo; sqlite:////a@b.db is a file name
        return None
    if "@" in rest[at + 1:].partition("?")[0]:
        return ("the user name or password holds a raw '@': percent-encode it ('@' as %40, "
                "'/' as %2F, ':' as %3A)")
    user, colon, _password = rest[:at].partition(":")
    if colon and "/" in user:  # u/x:pw@host: SQLAlchemy reads host 'u' and the password as the database
        return "the user name holds a raw '/': percent-encode it ('/' as %2F, '@' as %40)"
    return None


class StudySpec(_Model):
    name: str
    storage: str | None = None
    n_trials: int = Field(default=20, ge=1, le=100000)
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec)
    server: ServerSpec
    hardware: HardwareSpec
    search_space: SearchSpace = Field(default_factory=SearchSpace)
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    # A workload mix: each workload is measured on the same launch, the trial's value is the
    # weighted mean of their values, and each SLO must hold. Instead of ``workload``.
    workloads: list[MixWorkloadSpec] | None = Field(default=None, min_length=2)
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    search: SearchSpec = Field(default_factory=SearchSpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    calibration: CalibrationSpec | None = None
    # Earlier study files this study starts from (paths relative to this file; their storage is only read):
    # what carries over and why is decided per study (autotune.study.warm_start).
    warm_start: list[str] = Field(default_factory=list)
    run_dir: str | None = None  # per-trial artifacts; default: <study dir>/runs/<name>

    # Set by load_study_spec: the file it came from (not a YAML key).
    source_path: str | None = Field(default=None, exclude=True)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"must be letters, digits, '_', '-' or '.', got {shown(v)}")
        return v

    @field_validator("storage")
    @classmethod
    def _storage_userinfo(cls, v: str | None) -> str | None:
        problem = storage_url_problem(v) if v else None
        if problem:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _rate_search_needs_slo(self) -> StudySpec:
        if self.workload.rate_search is not None and not self.objective.slo:
            raise ValueError("workload.rate_search needs objective.slo: the rate it finds is the highest that meets it")
        return self

    @model_validator(mode="after")
    def _goodput_needs_slo(self) -> StudySpec:
        if self.objective.metric == "goodput":
            for where, wl in self.named_workloads():
                if not wl.goodput_slo:
                    raise ValueError(f"objective.metric goodput needs {where}.goodput_slo "
                                     "(ttft_ms, tpot_ms, e2e_latency_ms)")
        return self

    @model_validator(mode="after")
    def _one_kind_of_workload(self) -> StudySpec:
        if self.workloads is None:
            return self
        if "workload" in self.model_fields_set:
            raise ValueError("set workload (one) or workloads (a mix), not both")
        names = [w.name for w in self.workloads]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"workloads: names must be unique, {shown(dup[0])} repeats")
        for i, w in enumerate(self.workloads):
            if w.rate_search is not None and not (w.slo or self.objective.slo):
                raise ValueError(f"workloads[{i}].rate_search needs an SLO (its own slo or objective.slo)")
        return self

    @property
    def has_slo(self) -> bool:
        """An SLO bounds the trials' value: objective.slo, or a mix workload's own slo."""
        return bool(self.objective.slo) or any(w.slo for w in self.workloads or ())

    def named_workloads(self) -> list[tuple[str, WorkloadSpec]]:
        """(dotted path, workload) of every workload the study measures: ``workload``, or each of the mix."""
        if self.workloads:
            return [(f"workloads[{i}]", w) for i, w in enumerate(self.workloads)]
        return [("workload", self.workload)]

    @model_validator(mode="after")
    def _calibration_fits_the_gpu(self) -> StudySpec:
        if self.calibration is None:
            return self
        from autotune.sglang.hardware.gpus import get_gpu
        from autotune.sglang.memory.predictor import calibration_problem

        problem = calibration_problem(self.calibration.model_dump(), get_gpu(self.hardware.gpu).memory_gib)
        if problem:
            raise ValueError(f"calibration: {problem} ({self.hardware.gpu})")
        return self

    @model_validator(mode="after")
    def _flag_count(self) -> StudySpec:
        fixed = {str(a).split("=", 1)[0] for a in self.server.extra_args if str(a).startswith("--") and a != "--"}
        sp = self.search_space
        n = len(fixed | set(sp.flags)) + len(sp.env)
        if n > MAX_STUDY_FLAGS:
            raise ValueError(f"the study sets or searches {n:,} flags and environment variables (server.extra_args "
                             f"{len(fixed):,}, search_space.flags {len(sp.flags):,}, search_space.env {len(sp.env):,}), "
                             f"more than {MAX_STUDY_FLAGS}: SGLang has about 600 flags in all")
        return self

    @model_validator(mode="after")
    def _fits(self) -> StudySpec:
        need = self.server.tp_size * self.server.dp_size
        if self.search_space.layout is not None:
            for item in self.search_space.layout.choices:
                tp, dp, _ = parse_layout(item)
                if tp * dp > self.hardware.num_gpus:
                    raise ValueError(f"search_space.layout {shown(item)} needs {tp * dp} GPUs, more than "
                                     f"hardware.num_gpus = {self.hardware.num_gpus}")
        if need > self.hardware.num_gpus:
            raise ValueError(
                f"server.tp_size x dp_size = {need} needs more GPUs than hardware.num_gpus = {self.hardware.num_gpus}"
            )
        return self

    # ---- resolved paths -------------------------------------------------
    @property
    def base_dir(self) -> Path:
        return Path(self.source_path).resolve().parent if self.source_path else Path.cwd()

    @overload
    def resolve_path(self, p: str) -> str: ...
    @overload
    def resolve_path(self, p: None) -> None: ...

    def resolve_path(self, p: str | None) -> str | None:
        """``p`` against the study file's directory (None stays None). A path that cannot be
        resolved (a symlink loop, a directory that cannot be read) is a :class:`ConfigError`
        naming the study's field that holds it (:meth:`path_fields`)."""
        if p is None:
            return None
        path = Path(p).expanduser()
        if path.is_absolute():
            return str(path)
        try:
            return str((self.base_dir / path).resolve())
        except (RuntimeError, OSError) as exc:  # Python 3.11: RuntimeError("Symlink loop from ...")
            field = next((name for name, value in self.path_fields() if value == p), "path")
            why = "a symlink loop" if isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP \
                else (getattr(exc, "strerror", None) or type(exc).__name__)
            raise ConfigError(f"{field}: cannot be resolved, {why} (got {shown(p)})") from None

    def path_fields(self) -> list[tuple[str, str]]:
        """(dotted field, value) of every relative or absolute file path the study names."""
        out: list[tuple[str, str]] = [("server.model_path", self.server.model_path)]
        draft = self.search_space.speculative.draft_model_path if self.search_space.speculative else None
        if draft:
            out.append(("search_space.speculative.draft_model_path", draft))
        if self.storage and "://" not in self.storage:
            out.append(("storage", self.storage))
        out += [(f"warm_start[{i}]", w) for i, w in enumerate(self.warm_start)]
        if self.run_dir:
            out.append(("run_dir", self.run_dir))
        for where, wl in self.named_workloads():
            path = getattr(wl.dataset, "path", None) if wl.dataset is not None else None
            out += [(f"{where}.{name}", str(value)) for name, value in
                    (("dataset_path", wl.dataset_path), ("dataset.path", path), ("tokenizer", wl.tokenizer))
                    if value]
        return out

    def check_paths(self) -> None:
        """Resolve every path the study names, so one that cannot be (a symlink loop) is one line
        naming its field when the study is loaded, not a traceback where it is first used."""
        for _field, value in self.path_fields():
            self.resolve_path(value)

    @property
    def storage_url(self) -> str:
        if self.storage:
            if "://" in self.storage:
                return self.storage
            return f"sqlite:///{self.resolve_path(self.storage)}"
        return f"sqlite:///{self.base_dir / (self.name + '.db')}"

    @property
    def run_path(self) -> Path:
        if self.run_dir:
            return Path(self.resolve_path(self.run_dir) or ".")
        return self.base_dir / "runs" / self.name


def resolve_workload(spec: StudySpec, workload: _W) -> _W:
    """``workload`` with its file paths resolved against the study file, for the trial request:
    ``dataset_path``, the dataset's ``path``, and ``tokenizer`` (default: the server's model
    directory when it holds a tokenizer.json)."""
    update: dict[str, Any] = {}
    if workload.dataset_path:
        update["dataset_path"] = spec.resolve_path(workload.dataset_path)
    data = workload.dataset
    path = getattr(data, "path", None)
    if data is not None and path is not None:
        update["dataset"] = data.model_copy(update={"path": Path(spec.resolve_path(str(path)) or ".")})
    tok = spec.resolve_path(workload.tokenizer) if workload.tokenizer else None
    if tok is None and spec.server.model_path:
        model_dir = Path(spec.resolve_path(spec.server.model_path) or ".")
        if (model_dir / "tokenizer.json").is_file():
            tok = str(model_dir)
    update["tokenizer"] = tok
    return workload.model_copy(update=update)


def format_validation_error(exc: ValidationError, data: Any = None) -> str:
    """One line: the first error's dotted path, what is wrong, and the value received."""
    errors = exc.errors()
    first = errors[0]
    loc = ".".join(str(p) for p in first["loc"] if not str(p).startswith(("function-after", "union")))
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown key"
    value = first.get("input")
    if any(is_secret_name(str(p)) for p in first["loc"]) and not isinstance(value, (bool, int, float, type(None))):
        value = REDACTED  # server.env.HF_TOKEN: a text (or a list of them) is not shown; a number is
    elif _secret_argument(first["loc"], data):
        value = REDACTED  # server.extra_args[1], the value of --api-key: not shown, whatever it is
    elif isinstance(value, (list, tuple)) and all(isinstance(a, str) for a in value):
        value = redact_argv(value)  # server.extra_args: [..., '--api-key', '***', ...]
    elif isinstance(value, (str, dict, list, tuple)):
        value = redact_value(value)
    more = f" [and {len(errors) - 1} more]" if len(errors) > 1 else ""
    if not loc:  # a rule across fields: its message names them, and the value is the whole study
        return f"{clip(msg, 300)}{more}"
    got = "" if first["type"] == "missing" else f" (got {shown(value)})"
    if got and msg.endswith(got.strip(" ()")):  # a validator that said it already: "..., got 'latest'"
        got = ""
    if loc == "server.env" or loc.startswith("server.env."):  # variables may hold secrets: their names only
        got = f" (got the variables {shown(list(value))})" if isinstance(value, dict) else ""
    return f"{clip(loc)}: {clip(msg, 300)}{got}{more}"  # 300: an unknown GPU's hint and the known names


def _secret_argument(loc: tuple[Any, ...], data: Any) -> bool:
    """Whether the error's place is an element of ``server.extra_args`` that holds a secret (the
    value after ``--api-key``)."""
    if len(loc) != 3 or tuple(loc[:2]) != ("server", "extra_args") or not isinstance(loc[2], int):
        return False
    args = data.get("server", {}).get("extra_args") if isinstance(data, dict) else None
    if not isinstance(args, list) or not isinstance(data.get("server"), dict):
        return False
    return loc[2] in secret_argv_positions([str(a) for a in args])


def _bad_text(data: Any) -> str | None:
    """The dotted path of the first string (key or value) holding a NUL byte or a lone surrogate:
    neither can reach a file name, an argv, the environment or the study's storage."""
    stack: list[tuple[str, Any, bool]] = [("", data, False)]
    while stack:
        where, value, secret = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                name = f"{where}.{key}" if where else str(key)
                if isinstance(key, str) and _unwritable(key):
                    return f"{clip(name)}: a NUL byte or a lone surrogate in the key (got {shown(key)})"
                secret_key = isinstance(key, str) and (is_secret_name(key) or bool(abbreviated_secret_flags(key)))
                stack.append((name, item, secret or secret_key))
        elif isinstance(value, list):
            hidden = secret_argv_positions([str(a) for a in value]) if where == "server.extra_args" else set()
            stack.extend((f"{where}[{i}]", item, secret or i in hidden) for i, item in enumerate(value))
        elif isinstance(value, str) and _unwritable(value):
            if secret or where.startswith("server.env."):  # a secret's position, not its value
                at = next(i for i, c in enumerate(value) if c == "\x00" or "\ud800" <= c <= "\udfff")
                return f"{clip(where)}: a NUL byte or a lone surrogate at position {at} of the value"
            return f"{clip(where)}: a NUL byte or a lone surrogate (got {shown(value)})"
    return None


def _unwritable(text: str) -> bool:
    return "\x00" in text or any("\ud800" <= c <= "\udfff" for c in text)


#: Fills a study's hardware block in before validation (``hardware: auto`` read from the node, a GPU
#: described by its figures): :func:`autotune.node.auto.resolve_study_data`, passed by
#: :func:`autotune.node.study_file.load_study`. The study model itself reads no node.
HardwareResolver = Callable[[dict[str, Any]], dict[str, Any]]


def parse_study(data: Any, *, source_path: str | None = None, hardware: HardwareResolver | None = None) -> StudySpec:
    """Validate already-loaded YAML data. Raises ConfigError with one line.

    ``hardware``: resolves the hardware block first (see :data:`HardwareResolver`); without it
    ``hardware: auto`` is refused with one line saying where it is read."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source_path or 'study'}: the study file must be a mapping, got {type(data).__name__}")
    prefix = f"{source_path}: " if source_path else ""
    bad = _bad_text(data) or _searched_secret(data)
    if bad:
        raise ConfigError(prefix + bad)
    if hardware is not None:
        data = hardware(data)
    elif _reads_the_node(data.get("hardware")):
        raise ConfigError(prefix + "hardware.gpu: 'auto' is read from the node where a command loads the study "
                          "(autotune.node.study_file.load_study); name the GPU here")
    try:
        spec = StudySpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(prefix + format_validation_error(exc, data)) from None
    spec = spec.model_copy(update={"source_path": source_path})
    try:
        spec.check_paths()
    except ConfigError as exc:
        raise ConfigError(prefix + str(exc)) from None
    return spec


def _reads_the_node(hw: Any) -> bool:
    return hw == "auto" or (isinstance(hw, dict) and hw.get("gpu", "auto") == "auto")


def load_study_spec(path: str | Path, *, hardware: HardwareResolver | None = None) -> StudySpec:
    """Load and validate a study file: a regular UTF-8 file of at most ``STUDY_BYTES``, YAML within
    :mod:`autotune.safe_yaml`'s bounds (``hardware``: as :func:`parse_study`)."""
    from autotune.files import read_text
    from autotune.safe_yaml import load_yaml

    p = Path(path)
    if not os.path.lexists(p):
        raise ConfigError(f"study file not found: {shown(str(path), 200)}")
    data = load_yaml(read_text(p, "study file", STUDY_BYTES), str(path))
    return parse_study(data, source_path=str(p), hardware=hardware)
