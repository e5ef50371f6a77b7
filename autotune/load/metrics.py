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

autotune's additions (workloads that share prefixes, conversations, traces):

* ``cache_hit_rate``: prompt tokens the server served from its prefix cache over all
  prompt tokens of the completed requests (``total_cached_tokens`` /
  ``total_input_tokens``), from ``meta_info.cached_tokens`` /
  ``usage.prompt_tokens_details.cached_tokens``; None when the server reports neither.
  TTFT split: ``{mean,median,p99}_ttft_cached_ms`` (requests with a hit) and
  ``..._ttft_uncached_ms``, with ``cached_requests``.
* ``goodput``: completed requests per second that met every per-request ceiling of
  ``goodput_slo`` (ttft_ms, tpot_ms, e2e_latency_ms), and ``goodput_fraction``.
* ``per_turn``: for conversations, per turn number: requests, mean/p99 TTFT, mean E2E,
  mean prompt tokens and the turn's cache hit rate.
* ``read_lag_p50_ms`` / ``read_lag_p99_ms`` (wall ms): how long the bytes of each read
  waited in the socket before the client's loop read them (None where reads carry no
  kernel arrival time: TLS, not Linux). Token times are the arrival times, so this
  delay is not in TTFT / ITL / TPOT; a large one says the client shares a busy core.
* ``send_lag_p50_ms`` / ``send_lag_p99_ms`` / ``send_lag_max_ms`` (wall ms): how late each
  scheduled request (a trace's timestamps or Poisson arrivals without a concurrency
  cap) was sent after its due time: the client's own precision.

All durations are converted to modelled time by multiplying by ``time_scale``
(rates are divided by it); the client's own figures (CPU, loop lag) stay in wall time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.load.spec import GOODPUT_KEYS  # goodput_slo key -> the per-request record field it bounds

# A run counts as client-bound when the client's event-loop thread used this share of
# one core, or its loop lag p99 exceeded this many wall milliseconds.
CLIENT_BOUND_CPU_SHARE = 0.8
CLIENT_BOUND_LAG_P99_MS = 10.0
# ... or when scheduled requests (a trace, Poisson arrivals) left this late (p99, wall ms).
CLIENT_BOUND_SEND_LAG_P99_MS = 5.0


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
    cached_tokens: int | None = None  # prompt tokens the server served from its prefix cache
    due: float | None = None  # scheduled send time (wall), when the schedule has one
    group: int | None = None
    conversation: int | None = None
    turn: int | None = None
    reply: Any = None  # the reply (ids or text) when a conversation sends it back

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
    goodput_slo: dict[str, float] | None = None,
    read_lags_s: list[float] | None = None,
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
            "cached_tokens": t.cached_tokens,
            "error": t.error,
        }
        for key in ("group", "conversation", "turn"):
            if getattr(t, key) is not None:
                rec[key] = getattr(t, key)
        if t.due is not None:
            rec["send_lag_ms"] = (t.start - t.due) * 1000
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
            if n > 1:
                rec["tpot_ms"] = (lat_ms - first_ms) / (n - 1)
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
    reads = np.asarray(read_lags_s or []) * 1000
    m["read_lag_p50_ms"] = float(np.percentile(reads, 50)) if reads.size else None
    m["read_lag_p99_ms"] = float(np.percentile(reads, 99)) if reads.size else None
    m["errors"] = dict(Counter(error_kind(t.error) for t in failed if t.error))
    m["short_outputs"] = sum(1 for t in ok if (t.completion_tokens or 0) < t.output_len)
    m["output_tokens_estimated"] = sum(1 for t in ok if not t.tokens_from_server)
    _cache_metrics(ok, records, m)
    _goodput(records, goodput_slo or {}, per_s, m)
    _per_turn(records, m)
    lags = np.asarray([t.start - t.due for t in traces if t.due is not None]) * 1000
    m["send_lag_p50_ms"] = float(np.percentile(lags, 50)) if lags.size else None
    m["send_lag_p99_ms"] = float(np.percentile(lags, 99)) if lags.size else None
    m["send_lag_max_ms"] = float(lags.max()) if lags.size else None
    if lags.size and m["send_lag_p99_ms"] > CLIENT_BOUND_SEND_LAG_P99_MS:
        m["client_bound"] = True  # it could not send a schedule on time: the figures are the client's
    return m, records


def _cache_metrics(ok: list[RequestTrace], records: list[dict[str, Any]], m: dict[str, Any]) -> None:
    reported = [t for t in ok if t.cached_tokens is not None]
    if not reported:
        m["cache_hit_rate"] = None
        m["total_cached_tokens"] = None
        return
    cached = sum(t.cached_tokens or 0 for t in reported)
    prompt = sum(t.prompt_tokens or 0 for t in reported)
    m["total_cached_tokens"] = cached
    m["cache_hit_rate"] = cached / prompt if prompt else 0.0
    hit = [r["ttft_ms"] for r in records if r["error"] is None and r["ttft_ms"] is not None and r["cached_tokens"]]
    miss = [r["ttft_ms"] for r in records
            if r["error"] is None and r["ttft_ms"] is not None and r["cached_tokens"] == 0]
    m["cached_requests"] = len(hit)
    for name, vals in (("ttft_cached_ms", hit), ("ttft_uncached_ms", miss)):
        arr = np.asarray(vals)
        m[f"mean_{name}"] = float(arr.mean()) if arr.size else None
        m[f"median_{name}"] = float(np.median(arr)) if arr.size else None
        m[f"p99_{name}"] = float(np.percentile(arr, 99)) if arr.size else None


def _goodput(records: list[dict[str, Any]], slo: dict[str, float], per_s: float, m: dict[str, Any]) -> None:
    if not slo:
        m["goodput"] = None
        m["goodput_fraction"] = None
        return
    done = [r for r in records if r["error"] is None and r.get("ttft_ms") is not None]
    good = 0
    for r in done:
        met = True
        for key, ceiling in slo.items():
            v = r.get(GOODPUT_KEYS[key])
            if v is not None and v > ceiling:
                met = False
                break
        r["slo_met"] = met
        good += met
    m["goodput"] = good * per_s
    m["goodput_fraction"] = good / len(done) if done else 0.0


def _per_turn(records: list[dict[str, Any]], m: dict[str, Any]) -> None:
    turns: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("turn") is not None and r["error"] is None and r["ttft_ms"] is not None:
            turns.setdefault(int(r["turn"]), []).append(r)
    if not turns:
        return
    out: dict[str, dict[str, Any]] = {}
    for turn in sorted(turns):
        rs = turns[turn]
        ttft = np.asarray([r["ttft_ms"] for r in rs])
        prompt = sum(r["prompt_tokens"] or 0 for r in rs)
        cached = [r["cached_tokens"] for r in rs if r["cached_tokens"] is not None]
        out[str(turn)] = {
            "requests": len(rs),
            "mean_ttft_ms": float(ttft.mean()),
            "p99_ttft_ms": float(np.percentile(ttft, 99)),
            "mean_e2e_latency_ms": float(np.mean([r["e2e_ms"] for r in rs])),
            "mean_input_tokens": prompt / len(rs),
            "cache_hit_rate": (sum(cached) / prompt) if cached and prompt else None,
        }
    m["per_turn"] = out
    for name, fig in list(out.items())[:_FLAT_TURNS]:  # scalar copies: the export flattens scalars only
        m[f"turn{name}_mean_ttft_ms"] = fig["mean_ttft_ms"]
        m[f"turn{name}_mean_e2e_latency_ms"] = fig["mean_e2e_latency_ms"]
        m[f"turn{name}_cache_hit_rate"] = fig["cache_hit_rate"]


_FLAT_TURNS = 16


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
