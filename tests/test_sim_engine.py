"""Behaviour of the simulated continuous-batching engine (autotune.sim.engine.core).

Most tests drive the engine with a recording stand-in speed model (fixed step
times, every batch size recorded) at a huge time scale, so they run in
milliseconds and check scheduling exactly. The time-scale test uses a real
sleep with tolerant bounds.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest
from support.sim_engine import RecordingPerf, make_engine, run_to_idle

from autotune.errors import ConfigError
from autotune.sim.engine.core import Chunk, Engine, EngineStopped


async def collect(engine: Engine, rid: str, input_len: int, output_len: int) -> list[Chunk]:
    return [c async for c in engine.generate(rid, input_len, output_len)]


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=20))


async def serve_all(engine: Engine, jobs: list[tuple[str, int, int]]) -> dict[str, list[Chunk]]:
    await engine.start()
    try:
        results = await asyncio.gather(*(collect(engine, rid, i, o) for rid, i, o in jobs))
    finally:
        await engine.stop()
    return {rid: chunks for (rid, _, _), chunks in zip(jobs, results, strict=True)}


# --- token accounting and streaming --------------------------------------------------


def test_exact_token_counts_and_finish():
    perf = RecordingPerf()
    engine = make_engine(perf)
    out = run(serve_all(engine, [("a", 100, 37), ("b", 5, 1), ("c", 300, 64)]))
    for rid, n in (("a", 37), ("b", 1), ("c", 64)):
        chunks = out[rid]
        assert sum(len(c.token_ids) for c in chunks) == n
        assert chunks[-1].finished and chunks[-1].finish_reason == "length"
        assert not any(c.finished for c in chunks[:-1])
    stats = engine.stats()
    assert stats["tokens_emitted"] == 37 + 1 + 64
    assert stats["requests_served"] == 3
    assert {r["rid"]: r["output_len"] for r in stats["requests"]} == {"a": 37, "b": 1, "c": 64}
    assert stats["running"] == 0 and stats["waiting"] == 0 and stats["kv_used"] == 0


def test_stream_interval_groups_tokens():
    engine = make_engine(RecordingPerf(), stream_interval=4)
    chunks = run(serve_all(engine, [("a", 10, 11)]))["a"]
    assert [len(c.token_ids) for c in chunks] == [1, 4, 4, 2]


def test_modelled_timestamps_are_monotonic_and_ordered():
    perf = RecordingPerf()
    engine = make_engine(perf, max_running_requests=4)
    out = run(serve_all(engine, [(f"r{i}", 50 + i, 20 + i) for i in range(10)]))
    for chunks in out.values():
        times = [c.modelled_time_s for c in chunks]
        assert times == sorted(times) and times[0] > 0
    for rec in engine.stats()["requests"]:
        assert rec["arrival_s"] <= rec["first_token_s"] < rec["finish_s"]


def test_zero_max_new_tokens_finishes_at_once():
    engine = make_engine(RecordingPerf())
    chunks = run(serve_all(engine, [("z", 10, 0)]))["z"]
    assert len(chunks) == 1 and chunks[0].token_ids == [] and chunks[0].finished


# --- scheduling ----------------------------------------------------------------------


def test_continuous_batching_admits_new_requests_mid_flight():
    perf = RecordingPerf()
    engine = make_engine(perf)

    async def scenario() -> tuple[list[Chunk], list[Chunk]]:
        await engine.start()
        try:
            first = engine.generate("long", 100, 200)
            got = [await first.__anext__() for _ in range(20)]
            second = await collect(engine, "short", 100, 10)
            got += [c async for c in first]
            return got, second
        finally:
            await engine.stop()

    long_chunks, short_chunks = run(scenario())
    long_finish = long_chunks[-1].modelled_time_s
    assert short_chunks[-1].modelled_time_s < long_finish  # served while "long" was still running
    assert short_chunks[0].modelled_time_s > long_chunks[0].modelled_time_s
    assert 2 in perf.decode_batches  # the two shared decode steps


def test_max_running_requests_is_respected():
    perf = RecordingPerf()
    engine = make_engine(perf, max_running_requests=5)
    out = run(serve_all(engine, [(f"r{i}", 20, 30) for i in range(17)]))
    assert max(perf.decode_batches) == 5
    assert all(sum(len(c.token_ids) for c in chunks) == 30 for chunks in out.values())


def test_chunked_prefill_limits_tokens_per_prefill_step():
    perf = RecordingPerf()
    engine = make_engine(perf, chunked_prefill_size=256)
    run(serve_all(engine, [("big", 1000, 5), ("small", 100, 5)]))
    assert max(tokens for tokens, _ in perf.prefill_batches) <= 256
    assert sum(tokens for tokens, _ in perf.prefill_batches) == 1100


def test_kv_capacity_limits_the_running_batch():
    perf = RecordingPerf()
    # each request needs 100 input + 0.7 x 50 reserved decode tokens to be admitted: 4 fit in 600
    engine = make_engine(perf, kv_tokens=600)
    out = run(serve_all(engine, [(f"r{i}", 100, 50) for i in range(12)]))
    assert max(perf.decode_batches) <= 4
    assert all(sum(len(c.token_ids) for c in chunks) == 50 for chunks in out.values())


def test_retractions_happen_when_the_pool_is_too_small():
    perf = RecordingPerf()
    # admission reserves only 0.7 x the output, so long outputs outgrow the pool and get retracted
    engine = make_engine(perf, kv_tokens=2000)
    out = run(serve_all(engine, [(f"r{i}", 100, 400) for i in range(8)]))
    stats = engine.stats()
    assert stats["retractions"] > 0
    assert all(sum(len(c.token_ids) for c in chunks) == 400 for chunks in out.values())
    assert stats["tokens_emitted"] == 8 * 400 and stats["kv_used"] == 0
    # a retracted request is prefilled again over input + output so far
    assert sum(tokens for tokens, _ in perf.prefill_batches) > 8 * 100


def test_speculative_steps_emit_several_tokens_but_exact_totals():
    perf = RecordingPerf(accepted=2.5, accept_p=0.8, draft_tokens=4)
    engine = make_engine(perf)
    out = run(serve_all(engine, [(f"r{i}", 30, 97) for i in range(4)]))
    for chunks in out.values():
        sizes = [len(c.token_ids) for c in chunks]
        assert sum(sizes) == 97 and max(sizes) > 1 and max(sizes) <= 4
    assert len(perf.decode_batches) < 97  # fewer steps than tokens


# --- failures, aborts, validation ----------------------------------------------------


def test_prefill_oom_calls_back_and_stops():
    calls: list[int] = []
    engine = make_engine(RecordingPerf(), prefill_oom_tokens=150, on_runtime_oom=calls.append)

    async def scenario() -> None:
        await engine.start()
        try:
            with pytest.raises(EngineStopped, match="Prefill out of memory"):
                await collect(engine, "big", 200, 5)
        finally:
            await engine.stop()

    run(scenario())
    assert calls == [200]
    assert engine.stats()["dead"].startswith("Prefill out of memory")


def test_closing_a_stream_early_frees_its_kv():
    perf = RecordingPerf()
    engine = make_engine(perf)

    async def scenario() -> tuple[int, list[Chunk]]:
        await engine.start()
        try:
            agen = engine.generate("gone", 500, 1000)
            for _ in range(3):
                await agen.__anext__()
            await agen.aclose()
            used = engine.stats()["kv_used"]
            after = await collect(engine, "next", 10, 5)
            return used, after
        finally:
            await engine.stop()

    used, after = run(scenario())
    assert used == 0
    assert sum(len(c.token_ids) for c in after) == 5
    rec = {r["rid"]: r for r in engine.stats()["requests"]}
    assert rec["gone"]["finish_reason"] == "abort" and rec["gone"]["output_len"] < 1000


def test_generate_on_a_stopped_engine_raises():
    engine = make_engine(RecordingPerf())

    async def scenario() -> None:
        with pytest.raises(EngineStopped, match="engine is not running"):
            await collect(engine, "x", 10, 5)

    run(scenario())


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"kv_tokens": 0}, "kv_tokens: must be >= 1, got 0"),
        ({"max_running_requests": 0}, "max_running_requests: must be >= 1, got 0"),
        ({"time_scale": 0.0}, "time_scale: must be > 0, got 0.0"),
        ({"stream_interval": 0}, "stream_interval: must be >= 1, got 0"),
    ],
)
def test_bad_arguments_are_rejected(kw, message):
    with pytest.raises(ConfigError, match=message):
        make_engine(RecordingPerf(), **kw)


# --- wall time -----------------------------------------------------------------------


def test_wall_time_follows_modelled_time_over_scale():
    perf = RecordingPerf(decode_s=0.05, prefill_s_per_token=0.0)
    scale = 5.0
    engine = make_engine(perf, time_scale=scale)

    async def scenario() -> tuple[float, float]:
        await engine.start()
        try:
            start_model = engine.modelled_now()
            t0 = time.perf_counter()
            chunks = await collect(engine, "a", 10, 40)
            return time.perf_counter() - t0, chunks[-1].modelled_time_s - start_model
        finally:
            await engine.stop()

    wall, modelled = run(scenario())
    assert modelled == pytest.approx(0.005 + 39 * 0.05, rel=0.05)
    expected = modelled / scale  # ~0.4 s
    assert wall >= 0.9 * expected
    assert wall <= expected + 1.5  # generous: the machine is shared
    assert math.isfinite(engine.modelled_now())


@pytest.mark.parametrize("scale", [20.0, 1e7])
def test_modelled_results_do_not_depend_on_the_time_scale(scale):
    """Closed loop: the same modelled span whether the host keeps up (20x) or lags far behind (1e7x)."""
    perf = RecordingPerf(decode_s=0.02)
    engine = make_engine(perf, time_scale=scale, max_running_requests=4)

    async def scenario() -> float:
        await engine.start()
        sem = asyncio.Semaphore(4)

        async def one(i: int) -> None:
            async with sem:
                await collect(engine, f"r{i}", 50, 30)

        try:
            await asyncio.gather(*(one(i) for i in range(8)))
        finally:
            await engine.stop()
        recs = engine.stats()["requests"]
        return max(r["finish_s"] for r in recs) - min(r["arrival_s"] for r in recs)

    span = run(scenario())
    # two waves of 4: each is one prefill step (0.005 + 200 x 1e-5 s) and 29 decode steps of 0.02 s
    assert span == pytest.approx(2 * (0.007 + 29 * 0.02), rel=0.05)


def test_a_long_lived_server_keeps_a_bounded_summary_of_finished_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """A finished request leaves only its summary record, and only the newest RECORDS_KEPT of those: a server
    that runs without end (``python -m autotune.sim`` under ``autotune bench``) does not grow a request at a
    time. What is dropped is counted; a live request and a late reader of the cached-token count still work."""
    from autotune.sim.engine import scheduler

    monkeypatch.setattr(scheduler, "RECORDS_KEPT", 4)
    engine = make_engine(RecordingPerf())
    prefix = list(range(64))
    for i in range(10):
        engine.submit(f"r{i}", 80, 3, keys=prefix + [1000 + i] * 16)
        run_to_idle(engine)
    live = engine.submit("live", 80, 3, keys=prefix + [5000] * 16)
    stats = engine.stats()
    rids = [r["rid"] for r in stats["requests"]]
    assert rids == ["r6", "r7", "r8", "r9", "live"]  # the newest finished ones, in submission order
    assert stats["requests_dropped"] == 6 and stats["requests_served"] == 10
    assert all(r["output_len"] == 3 and r["finish_reason"] == "length" for r in stats["requests"][:4])
    assert engine.cached_tokens("r9") == 64  # read after it finished, from its summary
    assert engine.cached_tokens("r0") == 0  # dropped: unknown
    # what bounds the memory: the scheduler holds no finished request whole (chunk times, prompt ids)
    held = [v for v in engine._sched.records.values() if not isinstance(v, dict)]
    assert [h.rid for h in held] == ["live"]
    run_to_idle(engine)
    assert live.done and engine.stats()["requests"][-1]["rid"] == "live"
    assert engine.stats(requests=False).get("requests_dropped") is None  # the lean answer stays lean
