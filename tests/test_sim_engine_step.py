"""The engine's public stepping API (submit / step_once / idle_until), and that it is the same
step function the asyncio server loop runs."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from support.sim_engine import RecordingPerf, make_engine, run_to_idle

from autotune.sim.engine.core import Chunk, EngineStopped
from autotune.sim.engine.request import TOKEN_ID_BASE, TOKEN_ID_RANGE


def test_stepping_runs_requests_to_completion_in_modelled_time() -> None:
    perf = RecordingPerf()
    engine = make_engine(perf)
    assert engine.idle and engine.step_once() is None
    handles = [engine.submit(f"r{i}", 100, 5) for i in range(3)]
    assert not engine.idle and not any(h.done for h in handles)
    steps = run_to_idle(engine)
    assert [s.kind for s in steps] == ["prefill"] + ["decode"] * 4
    assert steps[0].batch_size == 3 and steps[1].batch_size == 3
    # the clock is the sum of the modelled step durations, and steps are contiguous
    assert engine.modelled_now() == pytest.approx(sum(s.duration_s for s in steps))
    for a, b in itertools.pairwise(steps):
        assert b.start_s == pytest.approx(a.end_s)
    assert steps[0].duration_s == pytest.approx(0.005 + 300 * 1e-5)
    assert steps[-1].ended == tuple(handles)  # all finish in the last step, in submission order
    assert all(not s.ended for s in steps[:-1])
    assert sum(s.tokens for s in steps) == 15
    for h in handles:
        assert h.done and h.finish_reason == "length" and h.error is None
        assert h.output_tokens == 5 and sum(h.chunk_counts) == 5
        assert h.first_token_s == pytest.approx(steps[0].end_s)
        assert h.finish_s == pytest.approx(steps[-1].end_s)
        assert h.chunk_times[0] == h.first_token_s and h.chunk_times[-1] == h.finish_s
    assert engine.stats()["requests_served"] == 3 and engine.stats()["tokens_emitted"] == 15


def test_stream_interval_groups_tokens_into_chunks() -> None:
    engine = make_engine(RecordingPerf(), stream_interval=4)
    h = engine.submit("r", 50, 11)
    steps = run_to_idle(engine)
    # first token at once, then every 4, the last chunk whatever is left
    assert h.chunk_counts == [1, 4, 4, 2]
    assert sum(s.chunks for s in steps) == 4


def test_idle_until_moves_the_clock_and_stamps_the_next_arrival() -> None:
    engine = make_engine(RecordingPerf())
    engine.idle_until(5.0)
    engine.idle_until(3.0)  # never back
    h = engine.submit("late", 10, 2)
    assert h.arrival_s == pytest.approx(5.0)
    with pytest.raises(EngineStopped):
        engine.idle_until(10.0)  # busy: time only passes through steps
    run_to_idle(engine)
    assert h.first_token_s is not None and h.first_token_s > 5.0


def test_requests_that_end_at_submission() -> None:
    engine = make_engine(RecordingPerf(), kv_tokens=1000)
    empty = engine.submit("empty", 10, 0)
    huge = engine.submit("huge", 5000, 10)
    assert empty.done and empty.finish_reason == "length"
    assert huge.done and huge.finish_reason == "abort"
    assert engine.idle and engine.step_once() is None


def test_a_runtime_oom_kills_the_engine_and_fails_everything_in_the_step() -> None:
    seen: list[int] = []
    engine = make_engine(RecordingPerf(), prefill_oom_tokens=500, on_runtime_oom=seen.append,
                         max_running_requests=2)
    handles = [engine.submit(f"r{i}", 400, 8) for i in range(4)]
    step = engine.step_once()
    assert step is not None and step.died is not None and "Prefill out of memory" in step.died
    assert engine.dead == step.died and seen == [800]
    assert step.duration_s == 0.0
    assert set(step.ended) == set(handles)
    assert all(h.done and h.error == step.died for h in handles)
    assert engine.idle and engine.step_once() is None
    with pytest.raises(EngineStopped):
        engine.submit("after", 10, 1)


def test_a_started_engine_cannot_be_stepped_from_outside() -> None:
    async def main() -> None:
        engine = make_engine(RecordingPerf())
        await engine.start()
        try:
            with pytest.raises(EngineStopped):
                engine.step_once()
        finally:
            await engine.stop()

    asyncio.run(main())


def test_asyncio_loop_and_stepping_share_the_step_function() -> None:
    """The same requests, all queued before the first step, make the same batches and chunks."""

    async def served(perf: RecordingPerf) -> list[list[Chunk]]:
        engine = make_engine(perf, stream_interval=3)
        await engine.start()
        try:
            gens = [engine.generate(f"r{i}", 200 + 50 * i, 7 + i) for i in range(4)]
            firsts = [await g.__anext__() for g in gens[:1]]  # the first request starts the engine
            rest = await asyncio.gather(*[_drain(g) for g in gens[1:]])
            return [firsts + await _drain(gens[0])] + rest
        finally:
            await engine.stop()

    live_perf = RecordingPerf()
    live = asyncio.run(served(live_perf))
    step_perf = RecordingPerf()
    engine = make_engine(step_perf, stream_interval=3)
    handles = [engine.submit(f"r{i}", 200 + 50 * i, 7 + i) for i in range(4)]
    run_to_idle(engine)
    for chunks, h in zip(live, handles, strict=True):
        assert [len(c.token_ids) for c in chunks] == h.chunk_counts
        assert chunks[-1].finished and chunks[-1].finish_reason == "length"
        ids = [t for c in chunks for t in c.token_ids]
        first = ids[0] - TOKEN_ID_BASE  # contiguous fake ids (wrapping), made when read
        assert ids == [TOKEN_ID_BASE + (first + i) % TOKEN_ID_RANGE for i in range(len(ids))]
    assert sum(live_perf.decode_batches) == sum(step_perf.decode_batches)
    assert sum(n for n, _ in live_perf.prefill_batches) == sum(n for n, _ in step_perf.prefill_batches)


async def _drain(gen: Any) -> list[Chunk]:
    return [c async for c in gen]
