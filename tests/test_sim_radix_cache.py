"""The simulated engine's radix prefix cache: hits skip prefill, LRU eviction by token budget,
locks under running requests, flush; and the tree itself."""

from __future__ import annotations

import pytest
from support.sim_engine import RecordingPerf, make_engine, run_to_idle

from autotune.sim.engine.cache import RadixCache
from autotune.sim.engine.core import Engine


def test_tree_matches_inserts_splits_and_counts_tokens() -> None:
    c = RadixCache()
    assert c.insert([1, 2, 3, 4, 5]) == 0 and c.size == 5
    assert c.match([1, 2, 3, 9], max_len=10).length == 3
    assert c.insert([1, 2, 3, 7, 8]) == 3 and c.size == 7  # split after 3, new leaf of 2
    assert c.match([1, 2, 3, 7, 8, 9], max_len=10).length == 5
    assert c.match([1, 2, 3, 7, 8, 9], max_len=4).length == 4  # capped (SGLang: input_len - 1)
    assert c.match([5, 1], max_len=10).length == 0


def test_eviction_is_lru_over_unlocked_leaves_and_locks_protect() -> None:
    c = RadixCache()
    c.insert([1] * 10)
    c.insert([2] * 10)
    c.insert([3] * 10)
    m = c.match([2] * 10, max_len=10)  # touches [2]: now the most recent
    c.lock(m)
    assert c.locked == 10 and c.evictable == 20
    assert c.evict(5) == 10  # a whole leaf: the least recently used ([1])
    assert c.match([1] * 10, max_len=10).length == 0
    assert c.match([3] * 10, max_len=10).length == 10
    assert c.evict(100) == 10  # [2] is locked: only [3] goes
    assert c.size == 10 and not c.flush()
    c.release(m)
    assert c.locked == 0 and c.flush() and c.size == 0


def _keys(system: int, question: int, group: int, q: int) -> list[int]:
    return [1000 + group] * system + [5000 + 100 * group + q] * question


def test_a_shared_prefix_is_prefilled_once_and_reported_as_cached() -> None:
    perf = RecordingPerf()
    engine = make_engine(perf)
    first = engine.submit("a", 1100, 4, keys=_keys(1000, 100, 0, 0))
    run_to_idle(engine)
    later = [engine.submit(f"b{q}", 1100, 4, keys=_keys(1000, 100, 0, q)) for q in range(1, 4)]
    run_to_idle(engine)
    assert first.cached_tokens == 0
    assert [h.cached_tokens for h in later] == [1000, 1000, 1000]
    # the second wave prefilled only the questions (3 x 100), not the system prompt again
    assert perf.prefill_batches[-1] == (300, 3)
    cache = engine.stats()["cache"]
    assert cache["cached_tokens"] == 3000 and cache["prompt_tokens"] == 4400
    assert cache["hit_rate"] == pytest.approx(3000 / 4400)


def test_a_finished_reply_is_cached_so_the_next_turn_hits_prompt_and_reply() -> None:
    engine = make_engine(RecordingPerf())
    turn1 = list(range(10, 110))
    h1 = engine.submit("t1", 100, 6, keys=turn1)
    run_to_idle(engine)
    assert h1.done
    ids = h1.output_ids  # what the server streamed back as output_ids
    turn2 = turn1 + ids + list(range(200, 250))
    h2 = engine.submit("t2", len(turn2), 3, keys=turn2)
    run_to_idle(engine)
    assert h2.cached_tokens == 100 + 5  # the prompt and the reply but its last token (never computed)


def test_the_cache_shares_the_kv_pool_and_is_evicted_for_running_requests() -> None:
    engine = make_engine(RecordingPerf(), kv_tokens=3000)
    for g in range(2):  # two finished groups fill most of the pool with cached prefixes
        engine.submit(f"g{g}", 1100, 2, keys=_keys(1000, 100, g, 0))
        run_to_idle(engine)
    assert engine.stats()["cache"]["size_tokens"] > 2000
    h = engine.submit("new", 2000, 2, keys=_keys(1900, 100, 7, 0))  # needs room: LRU entries go
    run_to_idle(engine)
    assert h.finish_reason == "length" and h.cached_tokens == 0
    stats = engine.stats()
    assert stats["cache"]["size_tokens"] + stats["kv_used"] <= 3000


def test_flush_empties_the_cache_and_the_next_request_misses() -> None:
    engine = make_engine(RecordingPerf())
    engine.submit("a", 1100, 2, keys=_keys(1000, 100, 0, 0))
    run_to_idle(engine)
    assert engine.flush_cache()
    h = engine.submit("b", 1100, 2, keys=_keys(1000, 100, 0, 1))
    run_to_idle(engine)
    assert h.cached_tokens == 0


def test_without_keys_or_with_the_cache_disabled_nothing_is_cached() -> None:
    engine = make_engine(RecordingPerf())
    engine.submit("a", 1100, 2)
    run_to_idle(engine)
    h = engine.submit("b", 1100, 2)
    run_to_idle(engine)
    assert h.cached_tokens == 0 and engine.stats()["cache"]["size_tokens"] == 0
    off = Engine(RecordingPerf(), kv_tokens=100_000, max_running_requests=64, chunked_prefill_size=8192,
                 time_scale=1.0, seed=0, radix_cache=False)
    off.submit("a", 1100, 2, keys=_keys(1000, 100, 0, 0))
    run_to_idle(off)
    h = off.submit("b", 1100, 2, keys=_keys(1000, 100, 0, 1))
    run_to_idle(off)
    assert h.cached_tokens == 0 and not off.stats()["cache"]["enabled"]


def test_a_prompt_is_cached_once_prefilled_so_the_next_prefill_step_hits_but_its_own_batch_does_not() -> None:
    perf = RecordingPerf()
    engine = make_engine(perf, chunked_prefill_size=2200)  # two 1,100-token prompts per prefill step
    handles = [engine.submit(f"q{q}", 1100, 50, keys=_keys(1000, 100, 0, q)) for q in range(4)]
    run_to_idle(engine)
    assert [h.cached_tokens for h in handles] == [0, 0, 1000, 1000]
    assert perf.prefill_batches[:2] == [(2200, 2), (200, 2)]


def test_decode_still_pays_attention_over_the_shared_prefix_it_reads() -> None:
    class CtxPerf(RecordingPerf):
        def __init__(self) -> None:
            super().__init__()
            self.contexts: list[int] = []

        def decode_step_time_s(self, batch: int, kv_tokens: int) -> float:
            self.contexts.append(kv_tokens)
            return super().decode_step_time_s(batch, kv_tokens)

    shared, alone = CtxPerf(), CtxPerf()
    for perf, keys in ((shared, True), (alone, False)):
        engine = make_engine(perf)
        engine.submit("warm", 1100, 2, keys=_keys(1000, 100, 0, 0) if keys else None)
        run_to_idle(engine)
        perf.contexts.clear()
        engine.submit("b", 1100, 3, keys=_keys(1000, 100, 0, 1) if keys else None)
        run_to_idle(engine)
    # the hit saves prefill, not the decode attention over its 1,100-token context
    assert shared.contexts == alone.contexts == [1101, 1102]
