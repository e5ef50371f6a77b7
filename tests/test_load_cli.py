"""``autotune bench``: bench_serving-style table, --json keys, output files, one-line errors with exit 2, and
a study's request time limits (``workload.timeouts``) as options."""

from __future__ import annotations

import json
import time

import pytest

from autotune.cli import build_parser, main
from autotune.cli._bench import spec_from_args
from autotune.load.spec import LoadTimeouts
from autotune.spec import WorkloadSpec
from autotune.testing.loadgen_fake_server import running

BENCH_KEYS = {
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
    "input_throughput", "output_throughput", "total_throughput", "concurrency", "max_output_tokens_per_s",
    "max_concurrent_requests", "client_cpu_s", "client_cpu_us_per_token", "event_loop_lag_p99_ms",
    "client_bound", "errors", "backend", "max_concurrency", "request_rate",
} | {
    f"{stat}_{name}"
    for stat in ("mean", "median", "std", "p90", "p95", "p99")
    for name in ("e2e_latency_ms", "ttft_ms", "tpot_ms", "itl_ms")
}


@pytest.fixture(scope="module")
def server():
    with running("--token-delay-ms", "1", "--ttft-ms", "2") as s:
        yield s


def test_json_output_has_bench_serving_keys(server, capsys, tmp_path) -> None:
    out_file = tmp_path / "runs.jsonl"
    details = tmp_path / "requests.jsonl"
    argv = ["bench", "--url", server.url, "--backend", "openai", "--concurrency", "4", "--num-prompts", "12",
            "--input-len", "10", "--output-len", "6", "--json", "--output-file", str(out_file),
            "--output-details", str(details), "--tag", "t1"]
    assert main(argv) == 0
    row = json.loads(capsys.readouterr().out)
    assert BENCH_KEYS <= set(row)
    assert row["completed"] == 12 and row["total_output_tokens"] == 72 and row["tag"] == "t1"
    assert main(argv) == 0  # appends, like bench_serving's --output-file
    assert [json.loads(x)["completed"] for x in out_file.read_text().splitlines()] == [12, 12]
    recs = [json.loads(x) for x in details.read_text().splitlines()]
    assert len(recs) == 12 and all(r["completion_tokens"] == 6 and r["error"] is None for r in recs)
    # at most n - 1 gaps: tokens that arrive together with the first one have no gap (bench_serving)
    assert all(len(r["itl_ms"]) <= 5 and r["ttft_ms"] <= r["e2e_ms"] for r in recs)


def test_table_output(server, capsys) -> None:
    assert main(["bench", "--url", server.url, "--concurrency", "2", "--num-prompts", "4",
                 "--input-len", "4", "--output-len", "3", "--flush-cache"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "============ Serving Benchmark Result ============"
    row = next(line for line in out if line.startswith("Successful requests:"))
    assert row[:41] == "Successful requests:".ljust(41) and row[41:].strip() == "4"
    assert any(line.startswith("Mean TTFT (ms):") for line in out)
    assert any(line.startswith("Output token throughput (tok/s):") for line in out)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--concurrency", "0"], "argument --concurrency: '0' must be at least 1"),
        (["--num-prompts", "x"], "argument --num-prompts: 'x' is not an integer"),
        (["--request-rate", "-3"], "argument --request-rate: '-3' must be greater than 0"),
        (["--range-ratio", "1.5"], "argument --range-ratio: '1.5' must be between 0 and 1"),
        (["--backend", "vllm"], "argument --backend: invalid choice: 'vllm'"),
        (["--dataset", "/nonexistent.jsonl"], "--dataset='/nonexistent.jsonl': no such file"),
        # the study's bounds on workload.timeouts: more than 0, at most a day
        (["--first-token-timeout", "0"], "--first-token-timeout='0': Input should be greater than 0"),
        (["--total-timeout", "1e300"], "--total-timeout='1e300': Input should be less than or equal to 86400"),
        (["--between-tokens-timeout", "inf"], "--between-tokens-timeout='inf': Input should be less than or equal"),
        (["--connect-timeout", "soon"], "--connect-timeout='soon': Input should be a valid number"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, message, capsys) -> None:
    assert main(["bench", "--url", "http://127.0.0.1:9", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_the_timeouts_default_to_the_study_s_and_none_lifts_one() -> None:
    def timeouts(*argv: str) -> LoadTimeouts:
        return spec_from_args(build_parser().parse_args(["bench", "--url", "http://127.0.0.1:9", *argv])).timeouts

    assert timeouts() == WorkloadSpec().timeouts == LoadTimeouts(connect_s=10, first_token_s=600, between_tokens_s=60,
                                                                 total_s=None)
    assert timeouts("--total-timeout", "30", "--connect-timeout", "none", "--first-token-timeout", "2.5") == \
        LoadTimeouts(connect_s=None, first_token_s=2.5, between_tokens_s=60, total_s=30)


def test_the_first_token_timeout_reaches_the_load_generator(capsys) -> None:
    with running("--ttft-ms", "60000") as stalled:  # a first token a minute away; the default waits 600 s
        t = time.monotonic()
        assert main(["bench", "--url", stalled.url, "--num-prompts", "1", "--warmup-requests", "0",
                     "--first-token-timeout", "0.5"]) == 1
        assert time.monotonic() - t < 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "first-token timeout" in err


def test_bad_url_names_the_option(capsys) -> None:
    assert main(["bench", "--url", "localhost:30000"]) == 2
    assert capsys.readouterr().err == "error: --url='localhost:30000': must start with http:// or https://\n"


def test_unreachable_server_exits_1(capsys) -> None:
    with running() as s:
        url = s.url
    assert main(["bench", "--url", url, "--num-prompts", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot reach the server at ") and err.count("\n") == 1


def test_dataset_file_drives_the_requests(server, capsys, tmp_path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": "a b c d e", "output_len": n}) for n in (2, 3, 4)) + "\n")
    assert main(["bench", "--url", server.url, "--backend", "openai-chat", "--concurrency", "3", "--num-prompts",
                 "3", "--dataset", str(data), "--json", "--warmup-requests", "0"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["total_output_tokens"] == 9 and row["total_input_tokens"] == 15
    assert row["dataset_name"] == "custom"
