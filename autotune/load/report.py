"""Presenting a load point: bench_serving's console table and its JSONL lines.

``format_table`` prints the block that starts with
``============ Serving Benchmark Result ============`` (40-character left column), so
people who read bench_serving output can read ours; ``summary_line`` is one JSON
object with bench_serving's JSONL keys (appended by ``--output-file``);
``write_records`` writes the per-request JSONL of ``--output-details``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from autotune.errors import ExportError
from autotune.load.result import LoadResult
from autotune.load.spec import LoadSpec


def _num(v: Any) -> Any:
    return "inf" if isinstance(v, float) and math.isinf(v) else v


def summary_line(result: LoadResult, spec: LoadSpec, *, tag: str | None = None) -> dict[str, Any]:
    """The run as one JSON-ready dict: bench_serving's run keys, then every metric."""
    head: dict[str, Any] = {
        "tag": tag,
        "backend": spec.backend,
        "dataset_name": spec.dataset.kind if spec.dataset is not None else (
            "custom" if spec.dataset_path else "random-ids"),
        "request_rate": _num(spec.request_rate),
        "max_concurrency": spec.concurrency,
        "random_input_len": spec.input_len,
        "random_output_len": spec.output_len,
        "random_range_ratio": spec.range_ratio,
        "num_prompts": spec.num_prompts,
        "duration_s": spec.duration_s,
        "warmup_requests": spec.warmup_requests,
        "seed": spec.seed,
    }
    return {**head, **result.metrics}


def format_table(result: LoadResult, spec: LoadSpec) -> str:
    """bench_serving's console block for ``result``."""
    m = result.metrics
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]

    def row(label: str, value: Any, fmt: str = ".2f") -> None:
        if isinstance(value, float):
            text = format(value, fmt)
        elif isinstance(value, int) and not isinstance(value, bool):
            text = str(value)
        else:
            text = str(value)
        lines.append(f"{label:<40} {text:<10}")

    def section(title: str) -> None:
        lines.append("{s:{c}^{n}}".format(s=title, n=50, c="-"))

    row("Backend:", spec.backend)
    row("Traffic request rate:", _num(spec.request_rate))
    row("Max request concurrency:", spec.concurrency if spec.concurrency else "not set")
    row("Successful requests:", m["completed"])
    row("Failed requests:", m["failed"])
    row("Benchmark duration (s):", m["duration"])
    row("Total input tokens:", m["total_input_tokens"])
    row("Total generated tokens:", m["total_output_tokens"])
    row("Request throughput (req/s):", m["request_throughput"])
    row("Input token throughput (tok/s):", m["input_throughput"])
    row("Output token throughput (tok/s):", m["output_throughput"])
    row("Peak output token throughput (tok/s):", m["max_output_tokens_per_s"])
    row("Peak concurrent requests:", m["max_concurrent_requests"])
    row("Total token throughput (tok/s):", m["total_throughput"])
    row("Concurrency:", m["concurrency"])
    if m.get("accept_length") is not None:  # speculative decoding, as bench_serving prints it
        row("Accept length:", m["accept_length"])
    section("End-to-End Latency")
    for stat in ("mean", "median", "p90", "p99"):
        row(f"{_label(stat)} E2E Latency (ms):", m[f"{stat}_e2e_latency_ms"])
    section("Time to First Token")
    for stat in ("mean", "median", "p99"):
        row(f"{_label(stat)} TTFT (ms):", m[f"{stat}_ttft_ms"])
    section("Time per Output Token (excl. 1st token)")
    for stat in ("mean", "median", "p99"):
        row(f"{_label(stat)} TPOT (ms):", m[f"{stat}_tpot_ms"])
    section("Inter-Token Latency")
    for stat in ("mean", "median", "p95", "p99"):
        row(f"{_label(stat)} ITL (ms):", m[f"{stat}_itl_ms"])
    if m.get("cache_hit_rate") is not None or m.get("goodput") is not None or m.get("per_turn"):
        section("Workload (autotune)")
        row("Dataset:", m.get("dataset_name"))
        if m.get("cache_hit_rate") is not None:
            row("Prefix cache hit rate:", f"{100 * m['cache_hit_rate']:.1f} %")
            row("Cached prompt tokens:", m["total_cached_tokens"])
            if m.get("median_ttft_cached_ms") is not None:
                row("Median TTFT, cache hit (ms):", m["median_ttft_cached_ms"])
            if m.get("median_ttft_uncached_ms") is not None:
                row("Median TTFT, no hit (ms):", m["median_ttft_uncached_ms"])
        if m.get("goodput") is not None:
            row("Goodput (req/s meeting the SLO):", m["goodput"])
            row("Requests meeting the SLO:", f"{100 * m['goodput_fraction']:.1f} %")
        for turn, t in (m.get("per_turn") or {}).items():
            row(f"Turn {turn}: mean TTFT / E2E (ms):", f"{t['mean_ttft_ms']:.1f} / {t['mean_e2e_latency_ms']:.1f}")
    section("Load generator (autotune)")
    row("Time scale (modelled s per wall s):", result.time_scale, "g")
    row("Client CPU (s):", m["client_cpu_s"])
    row("Client CPU per output token (us):", m["client_cpu_us_per_token"])
    row("Event loop lag p99 (ms):", m["event_loop_lag_p99_ms"])
    if m.get("read_lag_p99_ms") is not None:
        row("Read lag p50 / p99 (ms):", f"{m['read_lag_p50_ms']:.2f} / {m['read_lag_p99_ms']:.2f}")
    if m.get("send_lag_p99_ms") is not None:
        row("Send lag p99 / max (ms):", f"{m['send_lag_p99_ms']:.2f} / {m['send_lag_max_ms']:.2f}")
    if m.get("token_count_note"):
        row("Prompt lengths:", m["token_count_note"])
    row("Client-bound:", "YES (figures may be low)" if m["client_bound"] else "no")
    if result.stopped_early:
        row("Stopped early:", "yes")
    for kind, count in m["errors"].items():
        row("Errors:", f"{count} x {kind}")
    lines.append("=" * 50)
    return "\n".join(lines)


def _label(stat: str) -> str:
    return stat.capitalize() if stat in ("mean", "median") else stat.upper()


def append_jsonl(path: Path, row: dict[str, Any]) -> None:
    """Append one JSON line to ``path`` (bench_serving's ``--output-file`` behaviour)."""
    try:
        with path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
    except OSError as exc:
        raise ExportError(f"cannot append to {path}: {exc.strerror}") from None


def write_records(path: Path, result: LoadResult) -> None:
    """Write one JSON line per measured request (start, ttft, itl list, e2e, tokens, error)."""
    try:
        with path.open("w") as fh:
            for rec in result.records:
                fh.write(json.dumps(rec) + "\n")
    except OSError as exc:
        raise ExportError(f"cannot write {path}: {exc.strerror}") from None
