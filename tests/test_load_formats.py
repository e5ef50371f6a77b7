"""Malformed datasets and traces: one line naming the file, the line and the field; exit 2 from
``autotune bench`` before any request is sent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.errors import ConfigError
from autotune.load import formats
from autotune.load.formats import DatasetError, read_azure, read_mooncake, read_prompts, read_sharegpt, read_trace


def _write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text)
    return p


MOONCAKE_OK = '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'

CASES = [  # (file name, content, reader, expected line, expected field text)
    ("t.jsonl", MOONCAKE_OK + '{"timestamp": 5, "output_length": 5}\n', read_mooncake, 2, "input_length: missing"),
    ("t.jsonl", MOONCAKE_OK + '{"timestamp": 5, "input_length": -3, "output_length": 5}\n', read_mooncake, 2,
     "input_length=-3"),
    ("t.jsonl", '{"timestamp": 50, "input_length": 1, "output_length": 1}\n' + MOONCAKE_OK, read_mooncake, 2,
     "timestamp: earlier than line 1"),
    ("t.jsonl", MOONCAKE_OK + '{"timestamp": 5, "input_length": 1, "output_length": 1, "hash_ids": "x"}\n',
     read_mooncake, 2, "hash_ids"),
    ("t.jsonl", MOONCAKE_OK + "{not json\n", read_mooncake, 2, "not JSON"),
    ("t.jsonl", "", read_mooncake, 1, "empty file"),
    ("a.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.1,5\n", read_azure, 1, "GeneratedTokens: missing column"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,5,3\n2023-11-16 18:15:47,0,3\n",
     read_azure, 3, "ContextTokens=0"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,5,3\n2023-11-16 18:15:45,4,3\n",
     read_azure, 3, "timestamp: earlier than line 2"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,3\n", read_azure, 2, "TIMESTAMP='yesterday'"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", read_azure, 2, "no requests"),
    ("p.jsonl", '{"prompt": "a b"}\n{"output_len": 4}\n', read_prompts, 2, "prompt: missing"),
    ("p.jsonl", '{"prompt": "a b", "output_len": -1}\n', read_prompts, 1, "output_len=-1"),
    ("s.json", "[\n" + json.dumps({"conversations": [{"from": "human", "value": "hi"}]}) + ",\n"
     + json.dumps({"conversations": [{"from": "human"}]}) + "\n]", read_sharegpt, 3,
     "conversations[0].value: missing"),
    ("s.json", '[\n {"id": 1}\n]', read_sharegpt, 2, "conversations: missing"),
    ("s.json", "   \n", read_sharegpt, 1, "empty file"),
]


@pytest.mark.parametrize(("name", "text", "reader", "line", "field"), CASES)
def test_a_malformed_file_names_file_line_and_field(tmp_path: Path, name: str, text: str, reader, line: int,
                                                    field: str) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(ConfigError) as exc:
        reader(path)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}:{line}: "), msg
    assert field in msg


def test_a_good_mooncake_trace_is_rebased_to_its_first_request(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.jsonl", '{"timestamp": 1000, "input_length": 3, "output_length": 2}\n'
                                       '{"timestamp": 1250, "input_length": 4, "output_length": 1, "hash_ids": [7]}\n')
    rows = read_mooncake(path)
    assert [(r.line, r.at_s, r.input_len, r.output_len, r.hash_ids and tuple(r.hash_ids)) for r in rows] == [
        (1, 0.0, 3, 2, None), (2, 0.25, 4, 1, (7,))]


@pytest.mark.parametrize("fmt", ["mooncake", "azure"])
def test_a_trace_is_read_only_as_far_as_the_rows_replayed(tmp_path: Path, fmt: str) -> None:
    """The rows past ``max_rows`` are not read: a broken row there (or a file of millions of rows) costs
    nothing; without ``max_rows`` the same broken row is refused at its line."""
    if fmt == "mooncake":
        good = "".join(f'{{"timestamp": {t * 1000}, "input_length": 3, "output_length": 2, "hash_ids": [{t}, 2]}}\n'
                       for t in range(5))
        path = _write(tmp_path, "t.jsonl", good + "{not json\n")
    else:
        good = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{t}.5,3,2\n" for t in range(5))
        path = _write(tmp_path, "a.csv", good + "1.0,-3,2\n")
    rows = read_trace(path, fmt, max_rows=5)
    assert [r.input_len for r in rows] == [3] * 5 and rows[-1].at_s == 4.0
    with pytest.raises(DatasetError, match=f"{path.name}:{6 if fmt == 'mooncake' else 7}: "):
        read_trace(path, fmt)


@pytest.mark.parametrize("fmt", ["mooncake", "azure"])
def test_a_trace_past_the_requests_a_load_point_sends_is_refused_at_that_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    monkeypatch.setattr(formats, "MAX_PROMPTS", 3)
    if fmt == "mooncake":
        path = _write(tmp_path, "t.jsonl", "".join(
            f'{{"timestamp": {t}, "input_length": 3, "output_length": 2}}\n' for t in range(6)))
    else:
        path = _write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                      + "".join(f"{t},3,2\n" for t in range(6)))
    line = 4 if fmt == "mooncake" else 5
    with pytest.raises(DatasetError, match=f"{path.name}:{line}: more than the 3 requests a load point sends "
                                           r"\(max_requests replays fewer\)$"):
        read_trace(path, fmt, None, " (max_requests replays fewer)")
    assert len(read_trace(path, fmt, 3)) == 3


def test_mooncake_hash_ids_are_kept_as_64_bit_integers(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.jsonl", '{"timestamp": 0, "input_length": 3, "output_length": 2, '
                                       f'"hash_ids": [-5, {2**63 - 1}]}}\n')
    assert tuple(read_mooncake(path)[0].hash_ids or ()) == (-5, 2**63 - 1)
    path.write_text(f'{{"timestamp": 0, "input_length": 3, "output_length": 2, "hash_ids": [{2**63}]}}\n')
    with pytest.raises(DatasetError, match="t.jsonl:1: hash_ids: must be integers of at most 64 bits"):
        read_mooncake(path)


def test_the_last_trace_read_is_reused_until_its_file_changes(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.jsonl", '{"timestamp": 0, "input_length": 3, "output_length": 2}\n')
    first = read_trace(path, None)
    assert read_trace(path, None) is first  # a study reads its trace at check time and for each load point
    path.write_text('{"timestamp": 0, "input_length": 4, "output_length": 2}\n'
                    '{"timestamp": 9, "input_length": 5, "output_length": 2}\n')
    assert [r.input_len for r in read_trace(path, None)] == [4, 5]


@pytest.mark.parametrize(("args", "name", "text", "field"), [
    (["--dataset-name", "mooncake"], "t.jsonl", MOONCAKE_OK + '{"timestamp": 1, "input_length": 2}\n',
     ":2: output_length: missing"),
    (["--dataset-name", "trace", "--trace-format", "azure"], "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
     "1.0,4,4\n0.5,4,4\n", ":3: timestamp"),
    (["--dataset-name", "sharegpt"], "s.json", "", ":1: empty file"),
    (["--dataset-name", "file"], "p.jsonl", '{"input_ids": [1, -2]}\n', ":1: input_ids"),
])
def test_bench_exits_2_with_one_line_before_sending_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             args: list[str], name: str, text: str, field: str) -> None:
    path = _write(tmp_path, name, text)
    # nothing listens on port 9: the dataset must fail first
    code = main(["bench", "--url", "http://127.0.0.1:9", *args, "--dataset-path", str(path)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and str(path) + field in err, err


@pytest.mark.parametrize(("args", "expected"), [
    (["--dataset-name", "generated-shared-prefix", "--gsp-num-groups", "0"], "--gsp-num-groups"),
    (["--dataset-name", "mooncake"], "--dataset-path=None"),
    (["--dataset-name", "multi-turn", "--mt-think-time", "-1"], "--mt-think-time=-1.0"),
    (["--goodput", "ttft_ms:abc"], "--goodput='ttft_ms:abc'"),
    (["--goodput", "latency:5"], "--goodput="),
])
def test_bad_workload_options_name_the_option(capsys: pytest.CaptureFixture[str], args: list[str],
                                              expected: str) -> None:
    code = main(["bench", "--url", "http://127.0.0.1:9", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and expected in err, err


def test_a_large_sharegpt_array_is_read_and_an_error_still_names_its_line(tmp_path: Path) -> None:
    """Each item's line was counted from the top of the file (quadratic: 56 MiB took 125 s, ShareGPT V3's
    673 MB would take hours in ``plan``); it is counted on from the previous item. 200,000 items are read
    with their lines, and a bad item past them is named by its own line."""
    good = json.dumps({"conversations": [{"from": "human", "value": "hi there"}, {"from": "gpt", "value": "ok"}]})
    n = 200_000
    body = ",\n".join([good] * n)
    path = _write(tmp_path, "s.json", "[\n" + body + "\n]")
    rows = read_sharegpt(path)
    assert len(rows) == n and [r[0] for r in rows[:3]] == [2, 3, 4] and rows[-1][0] == n + 1
    bad = _write(tmp_path, "bad.json", "[\n" + body + ',\n{"conversations": [{"from": "human"}]}\n]')
    with pytest.raises(ConfigError, match=rf"^{bad}:{n + 2}: conversations\[0\]\.value: missing"):
        read_sharegpt(bad)
    deep = _write(tmp_path, "deep.json", "[\n" + body + ",\n" + "[" * 100_000 + "]" * 100_000 + "\n]")
    with pytest.raises(ConfigError, match=rf"^{deep}:{n + 2}: not JSON"):
        read_sharegpt(deep)
