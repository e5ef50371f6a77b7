"""Accuracy against an independent streaming server whose timing is known (tests/loadgen_fake_server.py).

The server records, on its own clock, when every request arrived and when each token
was written; the load generator's figures must agree with that truth. Token counts
must be exact. Timing bounds are 1 % on throughput and TPOT and 2 ms on median TTFT
when the machine is quiet; on a loaded shared machine (load average above
the core count) client and server are descheduled for milliseconds at a time, so the
bounds widen to 5 % / 5 ms. benchmarks/loadgen_keepup.py reports the strict figures.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from autotune.load import LoadSpec, run_load
from autotune.testing.loadgen_fake_server import running

QUIET = os.getloadavg()[0] < (os.cpu_count() or 1)
REL = 0.01 if QUIET else 0.05  # throughput and TPOT, relative
# median TTFT, absolute: 2 ms even when quiet, since the load average is read once at import and a
# CI run of the whole fast tier (load average under 2) once read 1.14 ms where five quiet runs of the
# same test read -0.03..0.07 ms; the strict 1 ms figure is loadgen_keepup.py's to report
TTFT_MS = 2.0 if QUIET else 5.0


def spec(**kw: object) -> LoadSpec:
    base: dict[str, object] = {"warmup_requests": 0, "input_len": 16, "output_len": 40, "flush_cache": True}
    base.update(kw)
    return LoadSpec(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def paced():
    with running("--token-delay-ms", "10", "--ttft-ms", "20") as server:
        yield server


def test_native_backend_matches_server_truth(paced) -> None:
    result = run_load(paced.url, spec(backend="sglang", concurrency=4, num_prompts=16))
    truth = paced.stats()
    m = result.metrics
    assert m["completed"] == truth["completed"] == 16 and m["failed"] == 0
    assert m["total_output_tokens"] == truth["total_output_tokens"] == 16 * 40
    assert m["total_input_tokens"] == truth["total_input_tokens"] == 16 * 16
    assert m["output_throughput"] == pytest.approx(truth["output_throughput"], rel=REL)
    assert m["mean_tpot_ms"] == pytest.approx(truth["mean_tpot_ms"], rel=REL)
    assert m["mean_itl_ms"] == pytest.approx(truth["mean_tpot_ms"], rel=REL)
    assert abs(m["median_ttft_ms"] - truth["median_ttft_ms"]) < TTFT_MS
    assert m["concurrency"] == pytest.approx(truth["in_flight_mean"], rel=0.05)
    assert result.time_scale == 1.0 and not result.stopped_early


@pytest.mark.parametrize("backend", ["openai", "openai-chat"])
def test_openai_backends_use_server_usage(paced, backend) -> None:
    result = run_load(paced.url, spec(backend=backend, concurrency=4, num_prompts=16, input_len=33))
    truth = paced.stats()
    m = result.metrics
    assert m["total_output_tokens"] == truth["total_output_tokens"] == 16 * 40
    assert m["total_input_tokens"] == truth["total_input_tokens"] == 16 * 33  # word prompts counted exactly
    assert m["output_throughput"] == pytest.approx(truth["output_throughput"], rel=REL)
    assert m["mean_tpot_ms"] == pytest.approx(truth["mean_tpot_ms"], rel=REL)
    assert m["output_tokens_estimated"] == 0


def test_warmup_requests_are_sent_but_not_measured(paced) -> None:
    before = paced.stats()["flushes"]
    result = run_load(paced.url, spec(concurrency=4, num_prompts=8, warmup_requests=3, output_len=8))
    truth = paced.stats()
    assert result.metrics["completed"] == 8 and len(result.records) == 8
    assert truth["flushes"] == before + 1  # flushed after the warm-up
    assert truth["requests"] == 8  # the window since the flush holds only the measured requests


def test_warmup_counts_without_flush(paced) -> None:
    paced_reset = run_load(paced.url, spec(concurrency=2, num_prompts=2, output_len=2))  # resets the window
    assert paced_reset.metrics["completed"] == 2
    result = run_load(paced.url, spec(concurrency=4, num_prompts=6, warmup_requests=2, output_len=4, flush_cache=False))
    truth = paced.stats()
    assert result.metrics["completed"] == 6
    assert truth["requests"] == 2 + 2 + 6


def test_range_ratio_lengths_reach_the_server(paced) -> None:
    result = run_load(paced.url, spec(concurrency=16, num_prompts=40, input_len=20, output_len=12, range_ratio=0.5))
    truth = paced.stats()
    prompt = [r["prompt_tokens"] for r in result.records]
    outs = [r["completion_tokens"] for r in result.records]
    assert sorted(prompt) == sorted(truth["prompt_tokens"])
    assert min(prompt) >= 10 and max(prompt) <= 20 and len(set(prompt)) > 3
    assert min(outs) >= 6 and max(outs) <= 12 and len(set(outs)) > 3
    assert sum(outs) == truth["total_output_tokens"] == result.metrics["total_output_tokens"]


def test_open_loop_poisson_arrivals_follow_the_schedule(paced) -> None:
    result = run_load(paced.url, spec(num_prompts=60, request_rate=150.0, output_len=2, seed=11))
    arrivals = np.sort(np.array(paced.stats()["arrivals"]))
    starts = np.sort(np.array([r["start_s"] for r in result.records]))
    planned = (len(starts) - 1) / starts[-1]
    observed = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
    assert observed == pytest.approx(planned, rel=0.05)
    assert 150.0 * 0.6 < planned < 150.0 * 1.6  # 60 exponential gaps: a loose sanity bound


def test_modelled_time_follows_the_servers_time_scale() -> None:
    with running("--token-delay-ms", "3", "--ttft-ms", "5", "--time-scale", "10") as server:
        result = run_load(server.url, spec(concurrency=4, num_prompts=16, output_len=30))
        truth = server.stats()
    m = result.metrics
    assert result.time_scale == 10.0 and m["time_scale"] == 10.0
    assert m["duration"] == pytest.approx(10 * truth["duration"], rel=REL)
    assert m["output_throughput"] == pytest.approx(truth["output_throughput"] / 10, rel=REL)
    assert m["mean_tpot_ms"] == pytest.approx(10 * truth["mean_tpot_ms"], rel=REL)


def test_duration_bound_stops_dispatching_then_drains(paced) -> None:
    result = run_load(paced.url, spec(concurrency=4, duration_s=0.6, output_len=10))
    truth = paced.stats()
    m = result.metrics
    # each request takes ~0.11 s; 4 streams for 0.6 s -> about 20 requests, all finished
    assert 8 <= m["completed"] <= 40 and m["failed"] == 0
    assert m["completed"] == truth["completed"] == truth["requests"]
    last_start = max(r["start_s"] for r in result.records)
    assert last_start < 0.6 < last_start + 0.2  # nothing sent after the bound, sending until close to it
    assert last_start < m["duration"] < 0.6 + 1.0


def test_rate_and_concurrency_cap_combine(paced) -> None:
    result = run_load(paced.url, spec(num_prompts=20, request_rate=200.0, concurrency=2, output_len=5))
    spans = sorted((r["start_s"], r["start_s"] + r["e2e_ms"] / 1000) for r in result.records)
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
    running_now = peak = 0
    for _, step in events:
        running_now += step
        peak = max(peak, running_now)
    assert result.metrics["completed"] == 20 and peak == 2  # the cap binds: 200/s of ~70 ms requests
