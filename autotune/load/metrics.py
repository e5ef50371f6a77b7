"""bench_serving's metrics, computed once at the end of a load point with numpy.

Definitions (SGLang ``bench_serving.calculate_metrics``):

* ``duration``: first dispatch to last completion (warm-up excluded).
* TTFT: send to the first chunk that carries tokens. E2E: send to the end of the
  stream (``[DONE]``). TPOT per request: ``(e2e - ttft) / (n - 1)`` for ``n > 1``.
* ITL: the gaps between token-carrying reads; a read carrying ``k`` tokens
  contributes ``k`` equal gaps of ``gap / k``.
* ``concurrency``: sum of E2E latencies / duration (mean requests in flight).
* ``max_output_tokens_per_s`` / ``max_concurrent_requests``: peaks over 1-second buckets.
* Token counts are the server's (``meta_info`` / ``usage``).

All durations are converted to modelled time by multiplying by ``time_scale``
(rates are divided by it); the client's own figures (CPU, loop lag) stay in wall time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# A run counts as client-bound when the client's event-loop thread used this share of
# one core, or its loop lag p99 exceeded this many wall milliseconds.
CLIENT_BOUND_CPU_SHARE = 0.8
CLIENT_BOUND_LAG_P99_MS = 10.0


@dataclass(slots=True)
class RequestTrace:
    """One request as the client saw it, in wall ``perf_counter`` seconds."""

    start: float
    input_len: int | None  # intended prompt length (None: unknown text)
    output_len: int  # requested max tokens
    end: float = 0.0
    times: list[float] = field(default_factory=list)  # reads that carried tokens
    counts: list[int] = field(default_factory=list)  # tokens carried by each of those reads
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tokens_from_server: bool = True
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _stats(name: str, values: np.ndarray, out: dict[str, Any]) -> None:
    has = values.size > 0
    out[f"mean_{name}"] = float(values.mean()) if has else 0.0
    out[f"median_{name}"] = float(np.median(values)) if has else 0.0
    out[f"std_{name}"] = float(values.std()) if has else 0.0
    for q in (90, 95, 99):
        out[f"p{q}_{name}"] = float(np.percentile(values, q)) if has else 0.0


def error_kind(message: str) -> str:
    """A short class for an error message, used to summarise failures."""
    return message.split(":", 1)[0][:80]


def compute_metrics(
    traces: list[RequestTrace],
    *,
    t0: float,
    duration_wall: float,
    time_scale: float,
    client_cpu_s: float,
    loop_lags_s: list[float],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Return ``(metrics, records)`` for the measured requests of one load point."""
    x = time_scale
    ok = [t for t in traces if t.ok]
    failed = [t for t in traces if not t.ok]
    duration = duration_wall * x

    ttft, e2e, tpot, itl_parts = [], [], [], []
    token_times, token_counts, spans = [], [], []
    records: list[dict[str, Any]] = []
    for t in traces:
        rec: dict[str, Any] = {
            "start_s": (t.start - t0) * x,
            "prompt_tokens": t.prompt_tokens,
            "completion_tokens": t.completion_tokens,  # the server's own count (usage / meta_info)
            "streamed_tokens": int(sum(t.counts)),  # what the stream delivered, counted by the client
            "output_len": t.output_len,
            "error": t.error,
        }
        if t.ok and t.times:
            times = np.asarray(t.times)
            counts = np.asarray(t.counts)
            first_ms = (times[0] - t.start) * 1000 * x
            lat_ms = (t.end - t.start) * 1000 * x
            gaps = np.diff(times) * 1000 * x
            itl = np.repeat(gaps / counts[1:], counts[1:]) if gaps.size else np.empty(0)
            n = t.completion_tokens or int(counts.sum())
            ttft.append(first_ms)
            e2e.append(lat_ms)
            itl_parts.append(itl)
            if n > 1:
                tpot.append((lat_ms - first_ms) / (n - 1))
            token_times.append((times - t0) * x)
            token_counts.append(counts)
            spans.append(((t.start - t0) * x, (t.end - t0) * x))
            rec.update(ttft_ms=first_ms, e2e_ms=lat_ms, itl_ms=itl.tolist())
        else:
            rec.update(ttft_ms=None, e2e_ms=(t.end - t.start) * 1000 * x if t.end else None, itl_ms=[])
        records.append(rec)

    in_tokens = sum(t.prompt_tokens or 0 for t in ok)
    out_tokens = sum(t.completion_tokens or 0 for t in ok)
    per_s = 1.0 / duration if duration > 0 else 0.0
    m: dict[str, Any] = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(failed),
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "request_throughput": len(ok) * per_s,
        "input_throughput": in_tokens * per_s,
        "output_throughput": out_tokens * per_s,
        "total_throughput": (in_tokens + out_tokens) * per_s,
    }
    _stats("e2e_latency_ms", np.asarray(e2e), m)
    _stats("ttft_ms", np.asarray(ttft), m)
    _stats("tpot_ms", np.asarray(tpot), m)
    _stats("itl_ms", np.concatenate(itl_parts) if itl_parts else np.empty(0), m)
    m["concurrency"] = (sum(e2e) / 1000.0) * per_s
    m["max_output_tokens_per_s"], m["max_concurrent_requests"] = _peaks(token_times, token_counts, spans)

    lag = np.asarray(loop_lags_s) * 1000
    lag_p99 = float(np.percentile(lag, 99)) if lag.size else 0.0
    cpu_share = client_cpu_s / duration_wall if duration_wall > 0 else 0.0
    m["client_cpu_s"] = client_cpu_s
    m["client_cpu_us_per_token"] = client_cpu_s * 1e6 / out_tokens if out_tokens else 0.0
    m["client_cpu_share"] = cpu_share
    m["event_loop_lag_p99_ms"] = lag_p99
    m["client_bound"] = bool(cpu_share >= CLIENT_BOUND_CPU_SHARE or lag_p99 >= CLIENT_BOUND_LAG_P99_MS)
    m["errors"] = dict(Counter(error_kind(t.error) for t in failed if t.error))
    m["short_outputs"] = sum(1 for t in ok if (t.completion_tokens or 0) < t.output_len)
    m["output_tokens_estimated"] = sum(1 for t in ok if not t.tokens_from_server)
    return m, records


def _peaks(
    token_times: list[np.ndarray], token_counts: list[np.ndarray], spans: list[tuple[float, float]]
) -> tuple[float, int]:
    """Peak output tokens in any 1-second bucket and peak requests in flight in any bucket."""
    if not token_times:
        return 0.0, 0
    times = np.concatenate(token_times)
    counts = np.concatenate(token_counts)
    buckets = np.floor(times).astype(np.int64)
    buckets -= buckets.min()
    max_tok = float(np.bincount(buckets, weights=counts).max())
    starts = np.sort(np.asarray([s for s, _ in spans]))
    ends = np.sort(np.asarray([e for _, e in spans]))
    secs = np.arange(int(np.floor(starts[0])), int(np.ceil(ends[-1])) + 1)
    # requests overlapping [s, s+1): started before s+1 and not ended by s
    active = np.searchsorted(starts, secs + 1, side="left") - np.searchsorted(ends, secs, side="right")
    return max_tok, int(active.max()) if active.size else 0
