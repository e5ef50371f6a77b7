"""bench_serving's metric definitions, checked on hand-made request traces."""

from __future__ import annotations

import pytest

from autotune.load.metrics import RequestTrace, compute_metrics


def trace(start: float, reads: list[tuple[float, int]], end: float, n: int, prompt: int = 10) -> RequestTrace:
    t = RequestTrace(start=start, input_len=prompt, output_len=n)
    t.times = [r[0] for r in reads]
    t.counts = [r[1] for r in reads]
    t.end, t.completion_tokens, t.prompt_tokens = end, n, prompt
    return t


def run(traces: list[RequestTrace], duration: float, x: float = 1.0) -> tuple[dict, list]:
    return compute_metrics(traces, t0=0.0, duration_wall=duration, time_scale=x, client_cpu_s=0.5, loop_lags_s=[0.001])


def test_ttft_tpot_itl_and_throughput() -> None:
    # first read at 0.1 s carries 1 token, then one read with 3 tokens at 0.4 s, done at 0.4 s
    m, recs = run([trace(0.0, [(0.1, 1), (0.4, 3)], 0.4, 4)], duration=0.5)
    assert m["mean_ttft_ms"] == pytest.approx(100.0)
    assert m["mean_tpot_ms"] == pytest.approx((400 - 100) / 3)
    assert recs[0]["itl_ms"] == pytest.approx([100.0, 100.0, 100.0])  # k tokens -> k equal gaps
    assert m["output_throughput"] == pytest.approx(4 / 0.5)
    assert m["total_throughput"] == pytest.approx(14 / 0.5)
    assert m["concurrency"] == pytest.approx(0.4 / 0.5)
    assert m["client_cpu_us_per_token"] == pytest.approx(0.5e6 / 4)


def test_failed_requests_are_counted_not_measured() -> None:
    bad = RequestTrace(start=0.0, input_len=1, output_len=4, end=0.2, error="HTTP 500: boom")
    m, recs = run([trace(0.0, [(0.1, 1), (0.2, 1)], 0.2, 2), bad], duration=1.0)
    assert (m["completed"], m["failed"]) == (1, 1)
    assert m["errors"] == {"HTTP 500": 1}
    assert m["total_output_tokens"] == 2 and recs[1]["error"] == "HTTP 500: boom"


def test_single_token_request_has_no_tpot() -> None:
    m, _ = run([trace(0.0, [(0.05, 1)], 0.05, 1)], duration=0.1)
    assert m["mean_tpot_ms"] == 0.0 and m["mean_ttft_ms"] == pytest.approx(50.0)


def test_time_scale_stretches_durations_and_shrinks_rates() -> None:
    t = [trace(0.0, [(0.1, 1), (0.2, 1)], 0.2, 2)]
    m1, _ = run(t, duration=0.2)
    m10, recs = run(t, duration=0.2, x=10.0)
    assert m10["duration"] == pytest.approx(10 * m1["duration"])
    assert m10["mean_ttft_ms"] == pytest.approx(10 * m1["mean_ttft_ms"])
    assert m10["output_throughput"] == pytest.approx(m1["output_throughput"] / 10)
    assert m10["concurrency"] == pytest.approx(m1["concurrency"])
    assert m10["client_cpu_s"] == m1["client_cpu_s"]  # the client's own figures stay in wall time


def test_peaks_over_one_second_buckets() -> None:
    traces = [trace(0.0, [(0.5, 1), (0.9, 1)], 0.9, 2), trace(1.2, [(1.5, 3), (2.5, 1)], 2.5, 4)]
    m, _ = run(traces, duration=2.5)
    assert m["max_output_tokens_per_s"] == 3.0
    assert m["max_concurrent_requests"] == 1


def test_empty_run_is_all_zero_not_an_exception() -> None:
    m, recs = run([], duration=1.0)
    assert m["completed"] == 0 and m["mean_ttft_ms"] == 0.0 and recs == []


def test_read_lag_is_reported_apart_and_kept_out_of_the_latencies() -> None:
    reads = [trace(0.0, [(0.1, 1), (0.4, 3)], 0.4, 4)]
    m, _ = compute_metrics(reads, t0=0.0, duration_wall=0.5, time_scale=1.0, client_cpu_s=0.1, loop_lags_s=[],
                           read_lags_s=[0.001] * 98 + [0.030, 0.030])
    assert m["read_lag_p50_ms"] == pytest.approx(1.0)
    assert m["read_lag_p99_ms"] == pytest.approx(30.0)
    assert m["mean_ttft_ms"] == pytest.approx(100.0)  # token times are the arrivals: the lag is not added
    m, _ = run(reads, duration=0.5)
    assert m["read_lag_p50_ms"] is None and m["read_lag_p99_ms"] is None  # reads without arrival stamps


def test_the_accept_length_is_read_only_from_a_positive_number_where_sglang_puts_it() -> None:
    from autotune.load.run import accept_length_of

    assert accept_length_of({"internal_states": [{"avg_spec_accept_length": 2.61}]}) == 2.61
    for info in ({}, {"internal_states": []}, {"internal_states": {"avg_spec_accept_length": 2}},
                 {"internal_states": [{"last_gen_throughput": 9.0}]}, None, [1, 2], "x",
                 *({"internal_states": [{"avg_spec_accept_length": v}]}
                   for v in (None, True, "3", float("nan"), float("inf"), 0, -1.0))):
        assert accept_length_of(info) is None, info
