"""``--schedule-policy`` in the simulated server: the CPU time of SGLang's prefix matching per admission round
(``KnobSpeed.schedule_round_s``), when SGLang runs a round at all, and what the overlap scheduler hides."""

from __future__ import annotations

import pytest
from support.sim_engine import RecordingPerf, make_engine, run_to_idle

from autotune.sglang.versions import parse_version
from autotune.sim.perf.knobs import (
    LPM_MATCH_MAX_WAITING,
    POLICY_MATCH_PER_REQ_S,
    POLICY_MATCH_PER_TOKEN_S,
    KnobSpeed,
    knob_speed,
)


def _serve(policy: str, *, overlap: bool, requests: int, radix_cache: bool = True,
           input_len: int = 1000) -> tuple[float, int]:
    """Modelled time to serve ``requests`` sent at once through a pool that fits about 20, and the steps taken."""
    perf = RecordingPerf(decode_s=0.010, overlap=overlap, knobs=KnobSpeed(schedule_policy=policy))
    engine = make_engine(perf, kv_tokens=20 * (input_len + 40), max_running_requests=256, time_scale=1.0,
                         radix_cache=radix_cache)
    handles = [engine.submit(f"r{i}", input_len, 20) for i in range(requests)]
    steps = len(run_to_idle(engine))
    assert all(h.finish_s is not None for h in handles)
    return max(h.finish_s for h in handles if h.finish_s is not None), steps


def test_a_round_costs_per_waiting_request_and_token_and_lpm_stops_matching_above_128() -> None:
    dfs, lpm, fcfs = (KnobSpeed(schedule_policy=p) for p in ("dfs-weight", "lpm", "fcfs"))
    one = POLICY_MATCH_PER_REQ_S + 2000 * POLICY_MATCH_PER_TOKEN_S
    assert dfs.schedule_round_s(2000, 2000 * 2000) == pytest.approx(2000 * one)
    assert lpm.schedule_round_s(LPM_MATCH_MAX_WAITING, 128 * 2000) == pytest.approx(128 * one)
    assert lpm.schedule_round_s(LPM_MATCH_MAX_WAITING + 1, 129 * 2000) == 0.0  # SGLang falls back to FCFS
    assert fcfs.schedule_round_s(2000, 2000 * 2000) == 0.0
    raw = {"schedule_policy": "dfs-weight"}
    assert knob_speed(raw, {}, version=parse_version("0.5.9"), interconnect="nvlink", tp_size=1,
                      attn_dp=1).schedule_policy == "dfs-weight"


def test_dfs_weight_over_a_deep_queue_is_slower_than_fcfs_without_the_overlap_scheduler() -> None:
    fcfs, steps = _serve("fcfs", overlap=False, requests=400)
    dfs, dfs_steps = _serve("dfs-weight", overlap=False, requests=400)
    lpm, _ = _serve("lpm", overlap=False, requests=400)
    assert dfs_steps == steps  # the same batches: the policy's order is FCFS on prompts that share nothing
    assert dfs > fcfs * 1.02
    assert fcfs < lpm < dfs  # lpm matches only once 128 or fewer wait
    # a round runs only when the batch may grow (SGLang's batch_is_full): far fewer than one per step
    every_step = steps * 400 * (POLICY_MATCH_PER_REQ_S + 1000 * POLICY_MATCH_PER_TOKEN_S)
    assert dfs - fcfs < every_step / 4


def test_without_the_radix_cache_every_policy_is_fcfs() -> None:
    assert _serve("dfs-weight", overlap=False, requests=400, radix_cache=False) == \
        _serve("fcfs", overlap=False, requests=400)


def test_the_overlap_scheduler_hides_a_round_shorter_than_the_gpu_step() -> None:
    # 60 waiting requests of 100 tokens: about 1.2 ms a round, under the previous step's 4-10 ms; only the
    # first round shows, decided with nothing in flight
    (dfs, dfs_steps), (fcfs, steps) = (_serve(p, overlap=True, requests=60, input_len=100) for p in ("dfs-weight", "fcfs"))
    assert dfs_steps == steps
    assert dfs - fcfs == pytest.approx(60 * (POLICY_MATCH_PER_REQ_S + 100 * POLICY_MATCH_PER_TOKEN_S))
    # ... and not one that is longer: 400 requests of 1,000 tokens, about 13 ms a round
    assert _serve("dfs-weight", overlap=True, requests=400)[0] > _serve("fcfs", overlap=True, requests=400)[0]
    # the part the overlap hides is gone from the delay
    hidden = _serve("dfs-weight", overlap=True, requests=400)[0] - _serve("fcfs", overlap=True, requests=400)[0]
    shown = _serve("dfs-weight", overlap=False, requests=400)[0] - _serve("fcfs", overlap=False, requests=400)[0]
    assert hidden < shown
