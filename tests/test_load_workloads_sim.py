"""Workload kinds against the simulated SGLang server (python -m autotune.sim): its radix cache
turns shared prefixes into hits that the load generator reports as SGLang reports them, and
``/sim/stats`` is the ground truth."""

from __future__ import annotations

import itertools
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.sim_server import MODEL, sim_server

from autotune.load import LoadSpec, run_load
from autotune.load.samples import write_samples
from autotune.load.workloads import validate_workload

pytestmark = pytest.mark.skipif(not MODEL.is_dir(), reason="simulated model profile not present")

GSP = {"kind": "generated-shared-prefix", "num_groups": 4, "prompts_per_group": 32, "system_prompt_len": 2048,
       "question_len": 64, "output_len": 8}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with sim_server(tmp_path_factory.mktemp("sim"), "--sim-time-scale", "10", "--enable-cache-report") as url:
        yield url


def _cache(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/sim/stats", timeout=10) as resp:
        return dict(json.loads(resp.read())["cache"])


def _run(url: str, dataset: dict[str, Any], **kw: Any) -> Any:
    fields: dict[str, Any] = {"concurrency": 32, "warmup_requests": 0, "flush_cache": True}
    fields.update(kw)
    return run_load(url, LoadSpec(dataset=validate_workload(dataset), **fields))


def test_shared_prefixes_hit_the_cache_and_cut_ttft_against_the_same_lengths_unshared(sim: str) -> None:
    before = _cache(sim)
    shared = _run(sim, GSP).metrics
    after = _cache(sim)
    flat = _run(sim, {"kind": "random", "input_len": 2048 + 64, "output_len": 8}, num_prompts=128).metrics
    assert shared["completed"] == 128 and flat["completed"] == 128
    assert shared["total_input_tokens"] == flat["total_input_tokens"] == 128 * 2112
    assert shared["cache_hit_rate"] > 0.8
    # the client's hit rate is the server's own count over the same requests
    truth = (after["cached_tokens"] - before["cached_tokens"]) / (after["prompt_tokens"] - before["prompt_tokens"])
    assert shared["cache_hit_rate"] == pytest.approx(truth, rel=1e-9)
    assert flat["cache_hit_rate"] == 0.0 and flat["cached_requests"] == 0
    assert flat["median_ttft_ms"] >= 3 * shared["median_ttft_ms"]
    assert shared["median_ttft_cached_ms"] is not None and shared["cached_requests"] >= 100


def test_after_a_flush_the_first_wave_misses_and_without_one_everything_hits(sim: str) -> None:
    first = _run(sim, GSP, num_prompts=64)
    records = sorted(first.records, key=lambda r: r["start_s"])
    assert records[0]["cached_tokens"] == 0  # flushed: the first request of the point misses
    groups_first = {}
    for r in records:
        groups_first.setdefault(r["group"], r)
    assert all(r["cached_tokens"] == 0 for r in groups_first.values())
    again = _run(sim, GSP, num_prompts=64, flush_cache=False).records  # the same prompts, cache kept
    assert all(r["cached_tokens"] >= 2048 for r in again)


def test_openai_backends_read_cached_tokens_from_usage(sim: str) -> None:
    m = _run(sim, GSP, backend="openai", num_prompts=48).metrics
    assert m["cache_hit_rate"] > 0.7
    chat = _run(sim, GSP, backend="openai-chat", num_prompts=48).metrics
    assert chat["cache_hit_rate"] > 0.7


def test_a_conversation_reuses_its_history_turn_after_turn(sim: str) -> None:
    d = {"kind": "multi-turn", "num_conversations": 8, "turns": 3, "system_prompt_len": 256, "user_len": 64,
         "output_len": 16, "think_time_s": 0.5}
    for backend in ("sglang", "openai-chat"):
        res = _run(sim, d, backend=backend, concurrency=8)
        m = res.metrics
        assert m["completed"] == 24, backend
        turns = m["per_turn"]
        assert sorted(turns) == ["1", "2", "3"] and all(t["requests"] == 8 for t in turns.values())
        # each turn carries the history: longer prompts, almost all of it cached
        assert turns["1"]["mean_input_tokens"] < turns["2"]["mean_input_tokens"] < turns["3"]["mean_input_tokens"]
        assert turns["3"]["cache_hit_rate"] > 0.8, (backend, turns)
        # think time: a conversation's next turn is sent after its reply plus the think time. The
        # client sleeps 0.5 s at the nominal time scale; on a busy host the simulator runs slower
        # than nominal and the records are on its measured clock, so that sleep is worth
        # 0.5 * measured/nominal modelled s there.
        think = 0.5 * m["time_scale"] / m["time_scale_nominal"]
        by_conv: dict[int, list[dict[str, Any]]] = {}
        for r in res.records:
            by_conv.setdefault(r["conversation"], []).append(r)
        for recs in by_conv.values():
            recs.sort(key=lambda r: r["turn"])
            for a, b in itertools.pairwise(recs):
                assert b["start_s"] >= a["start_s"] + a["e2e_ms"] / 1000 + think * 0.95


def test_a_trace_replay_sends_the_traces_tokens_at_its_times(sim: str, tmp_path: Path) -> None:
    files = write_samples(tmp_path, requests=100, seed=5)
    rows = [json.loads(line) for line in files["mooncake"].read_text().splitlines()]
    res = _run(sim, {"kind": "trace", "path": str(files["mooncake"])}, concurrency=None)
    m = res.metrics
    assert m["completed"] == 100
    assert m["total_input_tokens"] == sum(r["input_length"] for r in rows)
    assert m["total_output_tokens"] == sum(r["output_length"] for r in rows)
    assert m["send_lag_p99_ms"] is not None and m["send_lag_p99_ms"] >= 0
    assert m["cache_hit_rate"] > 0  # the trace's shared hash blocks hit
    # sent on the trace's clock (modelled seconds at the simulator's nominal scale); records are
    # stamped with its measured scale, which lags the nominal one on a busy host
    starts = sorted(r["start_s"] for r in res.records)
    span = (rows[-1]["timestamp"] - rows[0]["timestamp"]) / 1000
    sent_span = (starts[-1] - starts[0]) * m["time_scale_nominal"] / m["time_scale"]
    assert sent_span == pytest.approx(span, abs=0.05 * span + 0.2)


def test_bench_runs_bench_servings_shared_prefix_flags(sim: str, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.cli import main

    argv = ["bench", "--url", sim, "--dataset-name", "generated-shared-prefix", "--gsp-num-groups", "2",
            "--gsp-prompts-per-group", "16", "--gsp-system-prompt-len", "1024", "--gsp-question-len", "32",
            "--gsp-output-len", "4", "--concurrency", "8", "--flush-cache", "--goodput", "ttft_ms:60000"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dataset_name"] == "generated-shared-prefix" and out["completed"] == 32
    assert out["cache_hit_rate"] > 0.5 and out["goodput_fraction"] == 1.0
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "Prefix cache hit rate:" in table and "Goodput (req/s meeting the SLO):" in table
