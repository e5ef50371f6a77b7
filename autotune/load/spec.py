"""What one load point asks for: :class:`LoadSpec` and its :class:`LoadTimeouts`.

The fields follow SGLang's ``bench_serving`` where it has an equivalent
(``--max-concurrency``, ``--request-rate``, ``--num-prompts``, ``--random-input-len``,
``--random-output-len``, ``--random-range-ratio``, ``--warmup-requests``,
``--flush-cache``, ignore_eos on by default), so a load point can be reproduced
with either tool.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from autotune.errors import ConfigError
from autotune.limits import (
    MAX_PROMPT_TOKENS,
    MAX_PROMPTS,
    MAX_SEED,
    MAX_SEND_S,
    MAX_SEQUENCE_TOKENS,
    MAX_WAIT_S,
    clip,
    shown,
)
from autotune.load.workloads import (
    GeneratedSharedPrefixWorkload,
    MultiTurnWorkload,
    RandomWorkload,
    TraceWorkload,
    Workload,
)

# Per-request SLO keys of goodput (vLLM's --goodput names accepted as aliases).
GOODPUT_KEYS = {"ttft_ms": "ttft_ms", "ttft": "ttft_ms", "tpot_ms": "tpot_ms", "tpot": "tpot_ms",
                "e2e_latency_ms": "e2e_ms", "e2el": "e2e_ms", "e2e_ms": "e2e_ms"}

Backend = Literal["sglang", "openai", "openai-chat"]

# The request path each backend posts to.
ENDPOINTS: dict[str, str] = {
    "sglang": "/generate",
    "openai": "/v1/completions",
    "openai-chat": "/v1/chat/completions",
}


def url_problem(url: str) -> str | None:
    """Why ``url`` is not a server's base URL (None when it is): http(s), a host, a port that parses,
    no whitespace or control characters. A malformed URL is bad input (exit 2), not an unreachable
    server (exit 1)."""
    if not url.startswith(("http://", "https://")):
        return "must start with http:// or https://"
    if not url.isprintable() or any(c.isspace() for c in url):
        return "holds whitespace or a control character"
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError: out of range or not a number
    except ValueError as exc:
        return f"not a URL ({clip(str(exc), 60)})"
    if "@" in parts.netloc:  # aiohttp refused it with a ValueError traceback when --api-key was given too
        return ("holds a user name or password (user:password@host); a key is sent as a bearer token instead "
                "(bench's --api-key)")
    if not parts.hostname:
        return "names no host"
    if port == 0:
        return "port 0 is not a server's port"
    return None


def load_problem(*, num_prompts: int | None, warmup_requests: int, input_len: int, dataset: object,
                 dataset_path: object, request_rate: float | None, duration_s: float | None,
                 rate_field: str = "request_rate") -> str | None:
    """Why a load point of these fields cannot be run (None when it can): the one rule both
    :class:`LoadSpec` and the study's workload (``autotune.spec.WorkloadSpec``) apply, so ``plan`` refuses
    what the load generator would.

    * Synthetic prompts (no ``dataset_path``, no dataset or a ``random`` one) are built before the load
      point starts, its warm-up's too: ``(num_prompts + warmup_requests) x input_len`` tokens at most
      :data:`~autotune.limits.MAX_PROMPT_TOKENS` (a workload kind's own counts are its model's rule).
    * At a finite ``request_rate`` its requests are sent in ``requests / request_rate`` seconds (or its
      ``duration_s`` when shorter): at most :data:`~autotune.limits.MAX_SEND_S`. A trace keeps its own times.
    """
    synthetic = dataset.input_len if isinstance(dataset, RandomWorkload) else (
        input_len if dataset is None and dataset_path is None else None)
    if synthetic is not None:
        tokens = ((num_prompts or 0) + warmup_requests) * synthetic
        if tokens > MAX_PROMPT_TOKENS:  # every synthetic prompt is built before the load point starts
            field = "dataset.input_len" if dataset is not None else "input_len"
            return (f"(num_prompts + warmup_requests) x {field} = ({num_prompts or 0:,} + {warmup_requests:,}) x "
                    f"{synthetic:,} = {tokens:,} prompt tokens, more than the {MAX_PROMPT_TOKENS:,} a load point builds")
    if request_rate is not None and not math.isinf(request_rate) and not isinstance(dataset, TraceWorkload):
        if isinstance(dataset, GeneratedSharedPrefixWorkload):
            own: int | None = dataset.num_groups * dataset.prompts_per_group
        elif isinstance(dataset, MultiTurnWorkload):
            own = dataset.num_conversations  # the rate paces the conversations' starts
        else:
            own = None
        n = num_prompts or own or 1  # a data set of unknown size: at least the wait for its second request
        span = n / request_rate
        if span > MAX_SEND_S and (duration_s is None or duration_s > MAX_SEND_S):
            what = "num_prompts" if num_prompts else "the workload's requests"
            return (f"{rate_field}={shown(request_rate)}: {what} / request_rate = {n:,} / {request_rate:g} = "
                    f"{span:.3g} s of sending, more than the {MAX_SEND_S:,} s (a week) a load point may take "
                    "(a higher request_rate, or a duration_s)")
    return None


def shown_url(url: object) -> str:
    """``url`` as an error echoes it: its userinfo (a password, a token as the user name) hidden as ``***``."""
    text = url if isinstance(url, str) else str(url)
    return shown(re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@", r"\1***@", text[:4096]))


class LoadTimeouts(BaseModel):
    """Per-request time limits, in wall seconds. ``None`` disables a limit.

    ``first_token_s`` bounds the wait from sending a request to the first chunk that
    carries tokens (queueing and prefill included); ``between_tokens_s`` bounds the
    wait between two reads that carry tokens once they flow (bytes without a token, such
    as comments or a line that never ends, do not reset it). Together they turn a hung
    server into failed requests instead of a hung load point.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    connect_s: float | None = Field(10.0, gt=0, le=MAX_WAIT_S)
    first_token_s: float | None = Field(600.0, gt=0, le=MAX_WAIT_S)
    between_tokens_s: float | None = Field(60.0, gt=0, le=MAX_WAIT_S)
    total_s: float | None = Field(None, gt=0, le=MAX_WAIT_S)


class LoadSpec(BaseModel):
    """One load point. Validated on construction; unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Backend = "sglang"
    base_url: str | None = None

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        problem = None if v is None else url_problem(v)
        if problem:
            raise ValueError(problem)
        return v
    api_key: str | None = None
    model: str | None = None  # served model name; fetched from /v1/models when None (openai backends)
    concurrency: int | None = Field(None, ge=1)  # closed loop; None = pure open loop
    request_rate: float = Field(math.inf, gt=0)  # Poisson arrivals per second; inf = all at once
    num_prompts: int | None = Field(None, ge=1, le=MAX_PROMPTS)
    duration_s: float | None = Field(None, gt=0, le=MAX_SEND_S)  # stop dispatching after this long (modelled s)
    warmup_requests: int = Field(1, ge=0, le=MAX_PROMPTS)
    flush_cache: bool = False
    input_len: int = Field(1024, ge=1, le=MAX_SEQUENCE_TOKENS)
    output_len: int = Field(1024, ge=1, le=MAX_SEQUENCE_TOKENS)
    range_ratio: float = Field(1.0, ge=0.0, le=1.0)
    seed: int = Field(1, ge=0, le=MAX_SEED)
    dataset_path: Path | None = None
    # Synthetic sglang prompts draw ids from [low, high); None = 1000-30000, or the served
    # model's own safe range when /get_model_info names a local model (load.prompts.token_id_range).
    token_id_range: tuple[int, int] | None = None
    # The traffic (autotune.load.workloads): None = random prompts of input_len/output_len/range_ratio
    # (or dataset_path's JSONL); a kind with its own lengths overrides those fields.
    dataset: Workload | None = None
    tokenizer: Path | None = None  # model dir or tokenizer.json: exact prompt lengths for text prompts
    # Goodput: a request counts when it meets every ceiling (ttft_ms, tpot_ms, e2e_latency_ms).
    goodput_slo: dict[str, float] = Field(default_factory=dict)
    ignore_eos: bool = True
    timeouts: LoadTimeouts = LoadTimeouts.model_validate({})  # (not LoadTimeouts(): mypy sees no defaults)
    snapshot_interval_s: float = Field(2.0, gt=0)  # wall seconds between on_snapshot calls
    abort_after_consecutive_failures: int = Field(64, ge=1)

    @model_validator(mode="after")
    def _bounded(self) -> LoadSpec:
        for key, ceiling in self.goodput_slo.items():
            if key not in GOODPUT_KEYS:
                raise ValueError(f"goodput_slo key {shown(key)}: known keys are ttft_ms, tpot_ms, e2e_latency_ms")
            if not ceiling > 0:
                raise ValueError(f"goodput_slo {key}={ceiling}: must be > 0")
        if self.dataset is not None and self.dataset_path is not None:
            raise ValueError("set dataset_path (a JSONL of prompts) or dataset (a workload kind), not both")
        finite = self.dataset is not None and self.dataset.kind != "random"
        if self.num_prompts is None and self.duration_s is None and not finite:
            raise ValueError("num_prompts or duration_s must be set (a load point needs a bound)")
        if self.token_id_range is not None and not 0 <= self.token_id_range[0] < self.token_id_range[1]:
            raise ValueError(f"token_id_range must be 0 <= low < high, got {self.token_id_range}")
        if self.concurrency is None and math.isinf(self.request_rate) and self.num_prompts is None and not finite:
            raise ValueError("an unbounded burst needs num_prompts: set concurrency, request_rate or num_prompts")
        problem = load_problem(num_prompts=self.num_prompts, warmup_requests=self.warmup_requests,
                               input_len=self.input_len, dataset=self.dataset, dataset_path=self.dataset_path,
                               request_rate=self.request_rate, duration_s=self.duration_s)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def endpoint(self) -> str:
        return ENDPOINTS[self.backend]


def build_spec(**fields: object) -> LoadSpec:
    """Build a :class:`LoadSpec`, turning pydantic's errors into a one-line ConfigError.

    The message names the first bad field (dotted path) and the value received.
    """
    try:
        return LoadSpec(**fields)  # type: ignore[arg-type]
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if not loc:
            raise ConfigError(f"load spec: {msg}") from None
        got = shown_url(err.get("input")) if loc == "base_url" else shown(err.get("input"))
        raise ConfigError(f"{clip(loc)}={got}: {clip(msg, 200)}") from None
