"""Failures end a load point quickly and clearly; snapshots report progress and can stop it."""

from __future__ import annotations

import time

import pytest

from autotune.errors import LoadGenError
from autotune.load import LoadPointFailed, LoadSpec, LoadTimeouts, Snapshot, run_load
from autotune.testing.loadgen_fake_server import running


def spec(**kw: object) -> LoadSpec:
    base: dict[str, object] = {"warmup_requests": 0, "input_len": 8, "output_len": 20}
    base.update(kw)
    return LoadSpec(**base)  # type: ignore[arg-type]


def test_server_dying_mid_run_fails_the_load_point_quickly() -> None:
    with running("--token-delay-ms", "2", "--ttft-ms", "1", "--die-after-tokens", "400") as server:
        t = time.monotonic()
        with pytest.raises(LoadPointFailed) as info:
            run_load(server.url, spec(concurrency=8, num_prompts=400, output_len=30))
        elapsed = time.monotonic() - t
    assert isinstance(info.value, LoadGenError)
    msg = str(info.value)
    assert "\n" not in msg and "load point failed after" in msg
    assert "refused" in msg or "in a row" in msg
    assert elapsed < 15.0  # the server died after ~0.25 s of tokens; no hang
    partial = info.value.result
    assert partial is not None and partial.metrics["failed"] >= 1
    assert partial.metrics["completed"] < 400


def test_unreachable_server_is_a_clear_error() -> None:
    with running() as server:
        url = server.url
    with pytest.raises(LoadPointFailed, match=r"^cannot reach the server at http://127\.0\.0\.1:\d+"):
        run_load(url, spec(concurrency=1, num_prompts=1))


def test_first_token_timeout_fails_requests_instead_of_hanging() -> None:
    with running("--ttft-ms", "30000") as server:
        t = time.monotonic()
        with pytest.raises(LoadPointFailed, match="no request completed .*first-token timeout x3"):
            run_load(server.url, spec(concurrency=3, num_prompts=3, timeouts=LoadTimeouts(first_token_s=0.3)))
        assert time.monotonic() - t < 10.0


def test_between_tokens_timeout() -> None:
    with running("--ttft-ms", "0", "--token-delay-ms", "30000") as server:
        with pytest.raises(LoadPointFailed) as info:
            run_load(server.url, spec(concurrency=2, num_prompts=2, timeouts=LoadTimeouts(between_tokens_s=0.3)))
    assert info.value.result is not None
    assert info.value.result.metrics["errors"] == {"between-tokens timeout": 2}


def test_failed_warmup_is_reported_as_such() -> None:
    with running("--ttft-ms", "30000") as server:
        with pytest.raises(LoadPointFailed, match="^warm-up failed: all 2 warm-up requests failed"):
            run_load(server.url, spec(concurrency=2, num_prompts=2, warmup_requests=2,
                                      timeouts=LoadTimeouts(first_token_s=0.2)))


def test_snapshots_arrive_during_the_run() -> None:
    seen: list[Snapshot] = []
    with running("--token-delay-ms", "5", "--ttft-ms", "5") as server:
        result = run_load(server.url, spec(concurrency=4, num_prompts=24, output_len=40, snapshot_interval_s=0.2,
                                           warmup_requests=4), on_snapshot=seen.append)
    assert len(seen) >= 3
    assert [s.elapsed_s for s in seen] == sorted(s.elapsed_s for s in seen)
    assert seen[-1].output_tokens >= seen[0].output_tokens > 0
    assert seen[-1].output_tokens <= result.metrics["total_output_tokens"]  # warm-up tokens not counted
    assert all(s.in_flight <= 4 for s in seen)
    assert seen[-1].output_throughput > 0 and not result.stopped_early


def test_returning_false_stops_the_load_point_early() -> None:
    calls: list[Snapshot] = []

    def judge(s: Snapshot) -> bool:
        calls.append(s)
        return len(calls) < 2

    with running("--token-delay-ms", "5", "--ttft-ms", "5") as server:
        t = time.monotonic()
        result = run_load(server.url, spec(concurrency=4, num_prompts=400, output_len=40, snapshot_interval_s=0.2),
                          on_snapshot=judge)
        elapsed = time.monotonic() - t
        time.sleep(0.1)
        truth = server.stats()
    assert result.stopped_early and result.metrics["stopped_early"]
    assert len(calls) == 2
    assert elapsed < 5.0  # 400 requests would take ~20 s
    assert 0 < result.metrics["completed"] < 400 and result.metrics["failed"] == 0
    assert truth["requests"] < 400


def test_failing_snapshot_callback_propagates_its_error() -> None:
    def boom(_: Snapshot) -> bool:
        raise RuntimeError("callback bug")

    with running("--token-delay-ms", "5") as server:
        with pytest.raises(RuntimeError, match="callback bug"):
            run_load(server.url, spec(concurrency=2, num_prompts=100, snapshot_interval_s=0.1), on_snapshot=boom)


def test_http_errors_are_counted_with_their_message() -> None:
    with running() as server:
        s = spec(concurrency=2, num_prompts=2, backend="openai", model="m")
        # point the openai backend at a path the server does not serve by using a bad base path
        with pytest.raises(LoadPointFailed, match="no request completed .*HTTP 404 x2"):
            run_load(server.url + "/nope", s)


def test_total_timeout_bounds_a_slow_request() -> None:
    with running("--ttft-ms", "0", "--token-delay-ms", "100") as server:
        with pytest.raises(LoadPointFailed) as info:
            run_load(server.url, spec(concurrency=1, num_prompts=1, output_len=50,
                                      timeouts=LoadTimeouts(total_s=0.5)))
    assert info.value.result is not None
    assert info.value.result.metrics["errors"] == {"total timeout": 1}


def test_body_that_never_ends_after_done_still_counts() -> None:
    with running("--ttft-ms", "1", "--token-delay-ms", "1", "--hold-after-done") as server:
        t = time.monotonic()
        result = run_load(server.url, spec(concurrency=2, num_prompts=4, output_len=5))
        elapsed = time.monotonic() - t
    m = result.metrics
    assert m["completed"] == 4 and m["failed"] == 0 and m["total_output_tokens"] == 20
    assert m["mean_e2e_latency_ms"] < 500  # the end is [DONE], not the give-up on the body
    assert elapsed < 10.0


def test_api_key_is_sent_as_bearer_token() -> None:
    with running("--ttft-ms", "1", "--token-delay-ms", "1", "--api-key", "s3cret") as server:
        ok = run_load(server.url, spec(backend="openai", concurrency=2, num_prompts=2, output_len=3, api_key="s3cret"))
        assert ok.metrics["completed"] == 2
        with pytest.raises(LoadPointFailed, match="HTTP 401"):
            run_load(server.url, spec(backend="openai", model="m", concurrency=2, num_prompts=2, api_key="wrong"))


def test_outputs_shorter_than_requested_are_counted() -> None:
    with running("--ttft-ms", "1", "--token-delay-ms", "1", "--eos-after", "4") as server:
        result = run_load(server.url, spec(concurrency=2, num_prompts=4, output_len=10))
    m = result.metrics
    assert m["total_output_tokens"] == 16 and m["short_outputs"] == 4 and m["completed"] == 4


def test_hung_server_ends_the_load_point_after_between_tokens_s_not_first_token_s() -> None:
    """A server silent on every stream (SIGSTOP, a deadlock) ends the load point once no data
    has arrived anywhere for between_tokens_s; queued requests do not each wait first_token_s."""
    import os
    import signal
    import threading

    with running("--ttft-ms", "1", "--token-delay-ms", "5") as server:
        timer = threading.Timer(1.0, os.kill, (server.proc.pid, signal.SIGSTOP))
        timer.start()
        t = time.monotonic()
        try:
            with pytest.raises(LoadPointFailed, match="server stalled: no data on any of") as info:
                run_load(server.url, spec(concurrency=4, num_prompts=100000, output_len=50,
                                          timeouts=LoadTimeouts(first_token_s=600, between_tokens_s=1.0)))
        finally:
            timer.cancel()
            os.kill(server.proc.pid, signal.SIGCONT)
        assert time.monotonic() - t < 30.0
    assert info.value.result is not None and info.value.result.metrics["failed"] >= 1


def test_the_accept_length_is_read_after_the_run_and_an_oversized_server_info_is_no_answer() -> None:
    """The server's avg_spec_accept_length reaches the metrics; a /server_info answer over
    CONTROL_BYTES is not read whole and counts as none (its time scale too), and the load point runs."""
    from autotune.load.run import CONTROL_BYTES

    with running("--ttft-ms", "1", "--token-delay-ms", "1", "--accept-length", "2.5") as server:
        assert run_load(server.url, spec(concurrency=2, num_prompts=2, output_len=3)).metrics["accept_length"] == 2.5
    with running("--ttft-ms", "1", "--token-delay-ms", "1", "--accept-length", "2.5", "--time-scale", "4",
                 "--server-info-pad", str(CONTROL_BYTES + 1)) as server:
        result = run_load(server.url, spec(concurrency=2, num_prompts=2, output_len=3))
    assert result.metrics["completed"] == 2 and result.metrics["accept_length"] is None
    assert result.time_scale == 1.0 and result.server_info == {}
