"""Hostile input, family 4: outputs checked before the work, exit codes that tell bad input (2) from a
service that does not answer (1), versions that stay versions; and the two helpers every refusal goes
through (issue 34).

``bench --output-file`` into a missing directory was found out after the whole benchmark (exit 1, the
figures lost); a malformed URL read as an unreachable server (1); ``--input-len 10**12`` built its
prompts; ``sglang-env install --version '../../x'`` made a venv outside the cache.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from support.hostile import SECONDS, cli, one_line

from autotune.testing.loadgen_fake_server import running

pytestmark = pytest.mark.timeout(3 * SECONDS)

UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens (a run would be exit 1)


@pytest.mark.parametrize(("extra", "needles"), [
    (["--output-file", "/nonexistent-dir/runs.jsonl"], ["--output-file: no directory '/nonexistent-dir'"]),
    (["--output-details", "{tmp}"], ["--output-details: is a directory, not a file"]),
    (["--input-len", str(10**12)], ["--input-len=1000000000000: Input should be less than or equal to 10000000"]),
    (["--num-prompts", "1000", "--input-len", "1000000"], ["(num_prompts + warmup_requests) x input_len = "
                                                          "(1,000 + 1) x 1,000,000 = 1,001,000,000 prompt tokens"]),
    (["--num-prompts", "10", "--warmup-requests", "300000", "--input-len", "1000"],
     ["(num_prompts + warmup_requests) x input_len = (10 + 300,000) x 1,000 = 300,010,000 prompt tokens"]),
    (["--dataset-name", "generated-shared-prefix", "--gsp-num-groups", "100000", "--gsp-prompts-per-group", "1000"],
     ["--dataset-name generated-shared-prefix: --gsp-num-groups x --gsp-prompts-per-group = 100,000 x 1,000 = "
      "100,000,000 requests, more than the 1,000,000 a load point builds"]),
    (["--dataset-name", "generated-shared-prefix", "--gsp-system-prompt-len", str(10**11)],
     ["--gsp-system-prompt-len=100000000000: Input should be less than or equal to 10000000"]),
    (["--dataset-name", "multi-turn", "--mt-num-conversations", "100000", "--mt-turns", "100"],
     ["--dataset-name multi-turn: --mt-num-conversations x --mt-turns = 100,000 x 100 = 10,000,000 requests"]),
    (["--dataset-name", "multi-turn", "--mt-turns", "1000", "--mt-user-len", "100000"],
     ["--dataset-name multi-turn: the last turn, --mt-system-prompt-len + --mt-turns x --mt-user-len"]),
    (["--dataset-name", "multi-turn", "--mt-think-time", "1e300"], ["--mt-think-time=1e+300: "]),
    (["--dataset-name", "mooncake", "--dataset-path", "{tmp}/trace.jsonl", "--trace-block-size", str(10**9)],
     ["--trace-block-size=1000000000: Input should be less than or equal to 10000000"]),
    (["--dataset-name", "mooncake", "--dataset-path", "{tmp}/trace.jsonl"],
     ["trace.jsonl: its 40 requests hold 400,000,000 prompt tokens"]),
    (["--duration", "1e300"], ["--duration=1e+300: Input should be less than or equal to 604800"]),
    (["--duration", "inf"], ["--duration=inf: Input should be less than or equal to 604800"]),
    (["--request-rate", "1e-300"], ["--request-rate=1e-300: num_prompts / request_rate = 1 / 1e-300 = 1e+300 s"]),
    (["--seed", "-1"], ["--seed=-1: Input should be greater than or equal to 0"]),
    (["--dataset", "/dev/zero"], ["--dataset: must be a regular file, this is a device"]),
    (["--tokenizer", "{tmp}/fifo"], ["--tokenizer: must be a regular file, this is a FIFO"]),
    (["--input-len", "9" * 5000], ["--input-len: '9999", "... is not an integer"]),
])
def test_bench_refuses_bad_input_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                extra: list[str], needles: list[str]) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "trace.jsonl").write_text("".join(f'{{"timestamp": {t}, "input_length": 10000000, '
                                                  f'"output_length": 1}}\n' for t in range(40)))  # 2.5 KB
    argv = ["bench", "--url", UNREACHABLE, "--num-prompts", "1"] + [a.replace("{tmp}", str(tmp_path)) for a in extra]
    one_line(*cli(capsys, argv), *needles)


@pytest.mark.parametrize(("url", "code", "needle"), [
    ("http://[::1", 2, "--url='http://[::1': not a URL"),
    ("http://127.0.0.1:99999", 2, "--url='http://127.0.0.1:99999': not a URL (Port out of range"),
    ("http://exa mple.com", 2, "holds whitespace"),
    ("http://", 2, "names no host"),
    (UNREACHABLE, 1, "cannot reach the server at http://127.0.0.1:9"),
])
def test_a_malformed_url_is_bad_input_an_unreachable_server_is_not(capsys: pytest.CaptureFixture[str], url: str,
                                                                    code: int, needle: str) -> None:
    got, lines = cli(capsys, ["bench", "--url", url, "--num-prompts", "1"])
    assert (got, len(lines)) == (code, 1) and needle in lines[0], lines


@pytest.mark.parametrize("url", ["http://u:hunter2pw@127.0.0.1:9", "http://hunter2pw@127.0.0.1:9/v1",
                                 "https://u:hunter2pw@[::1]:9"])
def test_a_url_with_a_password_is_refused_without_echoing_it(capsys: pytest.CaptureFixture[str], url: str) -> None:
    """``--url http://u:p@host --api-key K`` was aiohttp's ValueError traceback: one line now (exit 2),
    the userinfo hidden; and so from the load generator's own spec."""
    from autotune.errors import ConfigError
    from autotune.load import build_spec

    line = one_line(*cli(capsys, ["bench", "--url", url, "--num-prompts", "1", "--api-key", "K"]),
                    "--url='http", "***@", "holds a user name or password")
    assert "hunter2pw" not in line
    with pytest.raises(ConfigError) as exc:
        build_spec(base_url=url, num_prompts=1)
    assert "base_url=" in str(exc.value) and "***@" in str(exc.value) and "hunter2pw" not in str(exc.value)


def test_the_figures_are_printed_when_the_output_file_fails_after_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The directory was there when the run started and is gone when it ends: the table is printed
    first, then the one line saying the file could not be written (exit 1: not bad input)."""
    from autotune.cli import _bench, main

    out_dir = tmp_path / "out"
    out_dir.mkdir()
    real = _bench.append_jsonl

    def vanish_then_append(path: Path, row: dict) -> None:
        (out_dir / "runs.jsonl").unlink(missing_ok=True)
        out_dir.rmdir()  # another process cleaned it up during the benchmark
        real(path, row)
    monkeypatch.setattr(_bench, "append_jsonl", vanish_then_append)
    with running("--token-delay-ms", "1", "--ttft-ms", "2") as server:
        code = main(["bench", "--url", server.url, "--backend", "openai", "--num-prompts", "4",
                     "--input-len", "4", "--output-len", "3", "--output-file", str(out_dir / "runs.jsonl")])
    out, err = capsys.readouterr()
    assert code == 1 and err.strip().splitlines() == [f"error: cannot append to {out_dir / 'runs.jsonl'}: "
                                                      "No such file or directory"]
    assert "Successful requests:" in out and "Output token throughput (tok/s):" in out


def test_the_figures_come_before_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.cli import _bench, main

    seen: list[str] = []
    real = _bench.append_jsonl
    monkeypatch.setattr(_bench, "append_jsonl", lambda p, r: (seen.append(capsys.readouterr().out), real(p, r)))
    with running("--token-delay-ms", "1", "--ttft-ms", "2") as server:
        assert main(["bench", "--url", server.url, "--backend", "openai", "--num-prompts", "4", "--input-len", "4",
                     "--output-len", "3", "--output-file", str(tmp_path / "runs.jsonl")]) == 0
    assert "Serving Benchmark Result" in seen[0]  # printed before the file was appended to
    assert (tmp_path / "runs.jsonl").read_text().count("\n") == 1


@pytest.mark.parametrize("action", ["install", "check"])
@pytest.mark.parametrize("version", ["../../x", "0.5.9/../../..", "0.5.9\n", "latest"])
def test_a_version_is_a_release_never_a_path(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch, action: str, version: str) -> None:
    from autotune.sglang_env import install

    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(install, "_run", lambda *a: pytest.fail(f"would build a venv: {a[0]}"))  # never pip here
    monkeypatch.setattr(install, "check", lambda env, **k: pytest.fail(f"would probe {env.prefix}"))
    one_line(*cli(capsys, ["sglang-env", action, "--version", version, "--device", "cuda"]),
             "--version: ", "is not an SGLang release (e.g. 0.5.23, 0.5.9.post1)")
    assert not (tmp_path / "cache").exists() and sorted(os.listdir(tmp_path)) == []


# ---- the helpers every refusal goes through ---------------------------------------------------------
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5),
    max_leaves=40,
)


@settings(max_examples=60, deadline=None)
@given(value=_values, big=st.integers(0, 3))
def test_a_value_echoed_in_an_error_is_cut_and_on_one_line(value: object, big: int) -> None:
    from autotune.limits import shown

    if big:  # and one that would take minutes to format whole, or cannot be formatted at all
        value = [[value] * 1000] * 1000 if big == 1 else 10 ** (5000 * big)
    text = shown(value)
    assert len(text) <= 60 and "\n" not in text and text.isprintable()


_yaml_data = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(st.characters(codec="utf-8",
                                                                                      exclude_categories=("Cs", "Cc")),
                                                                        max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text("abcxyz_", min_size=1, max_size=5), inner,
                                                               max_size=4),
    max_leaves=30,
)


@settings(max_examples=60, deadline=None)
@given(_yaml_data)
def test_the_bounded_loader_reads_what_safe_load_reads(data: object) -> None:
    from autotune.safe_yaml import load_yaml

    text = yaml.safe_dump({"doc": data}, allow_unicode=True)
    assert load_yaml(text, "x.yaml") == yaml.safe_load(text)
