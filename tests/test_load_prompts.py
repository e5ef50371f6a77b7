"""Prompts and arrivals: exact synthetic lengths, bench_serving's range ratio, Poisson rate, datasets."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from autotune.errors import ConfigError
from autotune.load import LoadSpec, build_spec
from autotune.load.prompts import arrival_offsets, load_dataset, prompt_stream, synthetic_prompts


def test_sglang_prompts_are_token_ids_of_exact_length() -> None:
    spec = LoadSpec(backend="sglang", num_prompts=50, input_len=37, output_len=11)
    prompts = synthetic_prompts(spec, 50)
    assert all(p.input_ids is not None and len(p.input_ids) == 37 for p in prompts)
    assert all(p.output_len == 11 for p in prompts)


def test_openai_prompts_have_one_word_per_token() -> None:
    spec = LoadSpec(backend="openai", num_prompts=20, input_len=123, output_len=5)
    for p in synthetic_prompts(spec, 20):
        assert p.text is not None and len(p.text.split()) == 123 == p.input_len


def test_range_ratio_draws_lengths_uniformly_in_bench_serving_interval() -> None:
    spec = LoadSpec(backend="sglang", num_prompts=4000, input_len=100, output_len=40, range_ratio=0.25)
    prompts = synthetic_prompts(spec, 4000)
    ins = np.array([len(p.input_ids or []) for p in prompts])
    outs = np.array([p.output_len for p in prompts])
    assert ins.min() == 25 and ins.max() == 100  # [max(int(100*0.25),1), 100]
    assert outs.min() == 10 and outs.max() == 40
    assert abs(ins.mean() - 62.5) < 2.0  # uniform: mean of the interval


def test_range_ratio_zero_floors_at_one() -> None:
    spec = LoadSpec(backend="openai", num_prompts=500, input_len=3, output_len=3, range_ratio=0.0)
    lens = {len((p.text or "").split()) for p in synthetic_prompts(spec, 500)}
    assert lens == {1, 2, 3}


def test_same_seed_same_prompts_and_other_seed_differs() -> None:
    a = synthetic_prompts(LoadSpec(num_prompts=3, input_len=8, output_len=2, seed=5), 3)
    b = synthetic_prompts(LoadSpec(num_prompts=3, input_len=8, output_len=2, seed=5), 3)
    c = synthetic_prompts(LoadSpec(num_prompts=3, input_len=8, output_len=2, seed=6), 3)
    assert a == b and a != c


def test_warmup_prompts_differ_from_measured_ones() -> None:
    spec = LoadSpec(num_prompts=2, warmup_requests=2, input_len=16, output_len=2)
    assert list(prompt_stream(spec, warmup=True)) != list(prompt_stream(spec))


def test_duration_only_spec_streams_endless_prompts() -> None:
    spec = LoadSpec(duration_s=1.0, input_len=4, output_len=2, concurrency=1)
    got = list(itertools.islice(prompt_stream(spec), 3000))
    assert len(got) == 3000 and len({tuple(p.input_ids or []) for p in got}) > 2900


def test_poisson_arrivals_have_the_requested_mean_rate_and_exponential_gaps() -> None:
    rng = np.random.default_rng(3)
    times = np.fromiter(arrival_offsets(250.0, 20000, rng), float)
    assert times[0] == 0.0  # like bench_serving, the first request goes at once
    gaps = np.diff(times)
    assert abs(1.0 / gaps.mean() - 250.0) / 250.0 < 0.03
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.05  # coefficient of variation of an exponential


def test_infinite_rate_is_a_burst() -> None:
    assert list(arrival_offsets(float("inf"), 4, np.random.default_rng(0))) == [0.0] * 4


def test_dataset_rows_become_prompts(tmp_path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"prompt": "a b c", "output_len": 4}) + "\n\n"
                    + json.dumps({"input_ids": [5, 6], "output_len": 2}) + "\n")
    prompts = load_dataset(path, "sglang")
    assert [(p.text, p.input_ids, p.output_len) for p in prompts] == [("a b c", None, 4), (None, [5, 6], 2)]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": "x"}, "output_len=None"),
        ({"prompt": "", "output_len": 3}, "needs a non-empty 'prompt'"),
        ({"input_ids": ["a"], "output_len": 3}, "input_ids must be a non-empty list of integers"),
    ],
)
def test_bad_dataset_rows_name_the_line(tmp_path, row, message) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"prompt": "ok", "output_len": 1}) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(ConfigError, match=f"line 2: .*{message}"):
        load_dataset(path, "openai")


def test_chat_backend_refuses_token_id_datasets(tmp_path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"input_ids": [1], "output_len": 1}) + "\n")
    with pytest.raises(ConfigError, match="openai-chat"):
        load_dataset(path, "openai-chat")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"concurrency": 0, "num_prompts": 1}, r"^concurrency=0: "),
        ({"backend": "vllm", "num_prompts": 1}, r"^backend='vllm': "),
        ({"num_prompts": 1, "range_ratio": 1.5}, r"^range_ratio=1.5: "),
        ({}, r"^load spec: num_prompts or duration_s must be set"),
        ({"num_prompts": 1, "bogus": 1}, r"^bogus=1: "),
    ],
)
def test_bad_spec_is_one_line_config_error(fields, message) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        build_spec(**fields)
    assert "\n" not in str(info.value)



def test_duration_only_prompts_of_millions_of_tokens_are_built_a_few_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only duration_s bounds the load point: its prompts were built in batches of 1,024, at 10M tokens
    each 10^10 tokens at once. A batch now holds at most BATCH_TOKENS (the same 1,024 up to 16k tokens)."""
    from autotune.limits import BATCH_TOKENS
    from autotune.load import prompts

    asked: list[int] = []

    def fake(spec: LoadSpec, n: int, *, seed_offset: int = 0) -> list[None]:
        asked.append(n)
        return [None] * n
    monkeypatch.setattr(prompts, "synthetic_prompts", fake)
    for input_len, batch in ((4, 1024), (16_384, 1024), (100_000, BATCH_TOKENS // 100_000), (10_000_000, 1)):
        asked.clear()
        stream = prompts.prompt_stream(LoadSpec(duration_s=1.0, input_len=input_len, output_len=2, concurrency=1))
        assert len(list(itertools.islice(stream, 2 * batch))) == 2 * batch
        assert asked == [batch, batch] and batch * input_len <= max(BATCH_TOKENS, input_len), (input_len, asked)
