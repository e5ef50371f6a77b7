"""The load generator against the simulated SGLang server (python -m autotune.sim): its
``/sim/stats`` is the ground truth (exact tokens, modelled timestamps per request).

The time scale is kept small so the simulator keeps up with it on a shared 2-core
machine; the load generator measures the simulator's real wall-to-modelled factor
over the run anyway (``metrics["time_scale"]``; nominal in ``time_scale_nominal``).
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from support.sim_server import MODEL, sim_server

from autotune.load import LoadSpec, run_load
from autotune.load.run import sim_clock_probe

QUIET = os.getloadavg()[0] < (os.cpu_count() or 1)
REL = 0.01 if QUIET else 0.05

pytestmark = pytest.mark.skipif(not MODEL.is_dir(), reason="simulated model profile not present")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with sim_server(tmp_path_factory.mktemp("sim"), "--sim-time-scale", "2") as url:
        yield url


def _stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/sim/stats", timeout=10) as resp:
        return json.loads(resp.read())


@pytest.mark.parametrize("backend", ["sglang", "openai"])
def test_tokens_exact_and_throughput_in_modelled_time(sim: str, backend: str) -> None:
    before = {r["rid"] for r in _stats(sim)["requests"]}
    result = run_load(sim, LoadSpec(backend=backend, concurrency=8, num_prompts=24, input_len=128, output_len=48,
                                    warmup_requests=0))
    new = [r for r in _stats(sim)["requests"] if r["rid"] not in before]
    m = result.metrics
    assert len(new) == m["completed"] == 24
    assert m["total_output_tokens"] == sum(r["output_len"] for r in new) == 24 * 48
    assert m["total_input_tokens"] == sum(r["input_len"] for r in new) == 24 * 128
    truth = m["total_output_tokens"] / (max(r["finish_s"] for r in new) - min(r["arrival_s"] for r in new))
    assert m["output_throughput"] == pytest.approx(truth, rel=REL)
    assert m["time_scale_nominal"] == 2.0 and result.time_scale == m["time_scale"]
    assert 0.5 < result.time_scale <= 2.2  # measured factor: at most a little above nominal


def test_the_clock_probe_reads_the_counters_without_every_requests_record(sim: str) -> None:
    """``/sim/stats?requests=0``: the counters and the modelled clock, not a record per request served (which grow
    with every request since the server started: a probe polled through a long run fetched them all each time)."""
    import asyncio

    import aiohttp

    run_load(sim, LoadSpec(backend="openai", concurrency=4, num_prompts=8, input_len=32, output_len=8,
                           warmup_requests=0))
    full = _stats(sim)
    with urllib.request.urlopen(sim + "/sim/stats?requests=0", timeout=10) as resp:
        lean = json.loads(resp.read())
    assert len(full["requests"]) >= 8 and "requests" not in lean
    assert lean["requests_served"] == full["requests_served"] >= 8
    assert lean["modelled_now_s"] >= full["modelled_now_s"] > 0

    async def probe() -> tuple[float, float] | None:
        async with aiohttp.ClientSession() as session:
            return await sim_clock_probe(session, sim)()

    got = asyncio.run(probe())
    assert got is not None and got[1] >= lean["modelled_now_s"]
