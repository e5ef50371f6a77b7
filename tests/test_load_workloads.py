"""Workload kinds: validation, the prompts each builds (shared parts shared exactly, a trace's
times and lengths, conversations carrying their history) and tokenizer-exact text lengths."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from autotune.load import LoadSpec
from autotune.load.samples import write_samples
from autotune.load.sources import conversation_plans, prompt_stream, turn_prompt
from autotune.load.tokens import WORDS, HFCounter, load_counter
from autotune.load.workloads import validate_workload


def spec(dataset: dict, **kw: object) -> LoadSpec:
    return LoadSpec(dataset=validate_workload(dataset), warmup_requests=0, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_samples(tmp_path_factory.mktemp("samples"), requests=120, seed=3)


def test_an_unknown_kind_lists_the_known_ones_and_fields_are_validated() -> None:
    with pytest.raises(ValidationError) as exc:
        validate_workload({"kind": "poisson-soup"})
    assert "generated-shared-prefix" in str(exc.value) and "multi-turn" in str(exc.value)
    with pytest.raises(ValidationError, match="num_groups"):
        validate_workload({"kind": "generated-shared-prefix", "num_groups": 0})
    with pytest.raises(ValidationError, match="extra"):
        validate_workload({"kind": "trace", "path": "x.jsonl", "speed": 2})
    with pytest.raises(ValidationError, match="slowdown_factor"):
        validate_workload({"kind": "trace", "path": "x.jsonl", "slowdown_factor": -1})


def test_finite_kinds_need_no_num_prompts_but_random_still_does() -> None:
    spec({"kind": "generated-shared-prefix"})
    with pytest.raises(ValidationError, match="num_prompts or duration_s"):
        spec({"kind": "random"})


def test_shared_prefix_groups_share_their_system_prompt_token_for_token() -> None:
    s = spec({"kind": "generated-shared-prefix", "num_groups": 3, "prompts_per_group": 4, "system_prompt_len": 50,
              "question_len": 10, "output_len": 7, "ordered": True})
    prompts = list(prompt_stream(s))
    assert len(prompts) == 12 and [p.group for p in prompts] == [0] * 4 + [1] * 4 + [2] * 4
    shuffled = list(prompt_stream(s.model_copy(update={"dataset": s.dataset.model_copy(update={"ordered": False})})))
    assert sorted(map(str, shuffled)) == sorted(map(str, prompts)) and shuffled != prompts  # bench_serving's default
    assert all(p.input_ids is not None and len(p.input_ids) == 60 and p.output_len == 7 for p in prompts)
    heads = {g: {tuple(p.input_ids[:50]) for p in prompts if p.group == g} for g in range(3)}  # type: ignore[index]
    assert all(len(h) == 1 for h in heads.values())  # one system prompt per group ...
    assert len({next(iter(h)) for h in heads.values()}) == 3  # ... different across groups
    assert len({tuple(p.input_ids[50:]) for p in prompts}) == 12  # type: ignore[index]  # every question its own


def test_shared_prefix_as_text_and_chat_messages_have_exact_word_lengths() -> None:
    d = {"kind": "generated-shared-prefix", "num_groups": 2, "prompts_per_group": 2, "system_prompt_len": 30,
         "question_len": 5, "output_len": 3}
    text = list(prompt_stream(spec(d, backend="openai")))
    assert all(p.text is not None and len(p.text.split()) == 35 for p in text)
    chat = list(prompt_stream(spec(d, backend="openai-chat")))
    assert all(p.messages and [m["role"] for m in p.messages] == ["system", "user"] for p in chat)
    assert chat[0].messages[0] == chat[1].messages[0]  # type: ignore[index]


def test_a_mooncake_trace_keeps_its_times_lengths_and_shared_blocks(samples: dict[str, Path]) -> None:
    rows = [json.loads(line) for line in samples["mooncake"].read_text().splitlines()]
    s = spec({"kind": "trace", "path": str(samples["mooncake"]), "slowdown_factor": 2.0})
    prompts = list(prompt_stream(s))
    assert len(prompts) == len(rows)
    assert sum(len(p.input_ids or []) for p in prompts) == sum(r["input_length"] for r in rows)
    assert sum(p.output_len for p in prompts) == sum(r["output_length"] for r in rows)
    t0 = rows[0]["timestamp"]
    assert [p.at_s for p in prompts] == pytest.approx([(r["timestamp"] - t0) / 1000 * 2 for r in rows])
    # two requests that start with the same hash id start with the same 512 tokens
    by_first: dict[int, list[int]] = {}
    for r, p in zip(rows, prompts, strict=True):
        if r["input_length"] >= 512:
            by_first.setdefault(r["hash_ids"][0], []).append(tuple(p.input_ids[:512]))  # type: ignore[index,arg-type]
    shared = [v for v in by_first.values() if len(v) > 1]
    assert shared and all(len(set(v)) == 1 for v in shared)


def test_an_azure_trace_replays_its_lengths_at_its_relative_times(samples: dict[str, Path]) -> None:
    lines = samples["azure"].read_text().splitlines()[1:]
    prompts = list(prompt_stream(spec({"kind": "trace", "path": str(samples["azure"])}, backend="openai")))
    assert [len((p.text or "").split()) for p in prompts] == [int(line.split(",")[1]) for line in lines]
    assert [p.output_len for p in prompts] == [int(line.split(",")[2]) for line in lines]
    assert prompts[0].at_s == 0.0 and all(b.at_s >= a.at_s for a, b in itertools.pairwise(prompts))  # type: ignore[operator]


def test_sharegpt_first_turn_and_a_prompt_file(samples: dict[str, Path]) -> None:
    first = list(prompt_stream(spec({"kind": "sharegpt", "path": str(samples["sharegpt"])}, backend="openai")))
    convs = json.loads(samples["sharegpt"].read_text())
    assert [p.text for p in first] == [c["conversations"][0]["value"] for c in convs]
    assert [p.output_len for p in first] == [len(c["conversations"][1]["value"].split()) for c in convs]
    fixed = list(prompt_stream(spec({"kind": "sharegpt", "path": str(samples["sharegpt"]), "output_len": 9})))
    assert {p.output_len for p in fixed} == {9}
    rows = [json.loads(line) for line in samples["file"].read_text().splitlines()]
    got = list(prompt_stream(spec({"kind": "file", "path": str(samples["file"])}, num_prompts=len(rows) + 5)))
    assert len(got) == len(rows) + 5 and got[len(rows)].text == rows[0]["prompt"]  # cycled, as a dataset file is


def test_sharegpt_counts_only_the_pairs_a_run_sends(samples: dict[str, Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """num_prompts (or warm-up, the larger) of the first usable pairs are what a run sends: the same prompts as
    before, but the conversations past them are not tokenised (on a 700 MB file that was 7 s a load point)."""
    from autotune.load import sources

    ds = {"kind": "sharegpt", "path": str(samples["sharegpt"])}
    every = list(prompt_stream(spec(ds, backend="openai")))
    counted: list[str] = []
    real = sources.counter_for

    def spying(tok: object) -> object:
        counter = real(tok)  # type: ignore[arg-type]

        class Spy:
            exact, note = counter.exact, counter.note

            def count(self, text: str) -> int:
                counted.append(text)
                return counter.count(text)

        return Spy()

    monkeypatch.setattr(sources, "counter_for", spying)
    first = list(prompt_stream(spec(ds, backend="openai", num_prompts=5)))
    assert [p.text for p in first] == [p.text for p in every[:5]]
    assert len(counted) == 2 * 5  # a question and its answer for each of the five, nothing past them
    counted.clear()
    warm = list(prompt_stream(spec(ds, backend="openai", num_prompts=2).model_copy(update={"warmup_requests": 4}),
                              warmup=True))
    assert [p.text for p in warm] == [p.text for p in every[:4]] and len(counted) == 2 * 4
    more = list(prompt_stream(spec(ds, backend="openai", num_prompts=len(every) + 3)))
    assert len(more) == len(every) + 3 and more[len(every)].text == every[0].text  # cycled past the last, as before


def test_a_conversation_turn_carries_the_whole_history_and_the_replies() -> None:
    s = spec({"kind": "multi-turn", "num_conversations": 2, "turns": 3, "system_prompt_len": 20, "user_len": 5,
              "output_len": 4, "think_time_s": 1.5})
    plans = conversation_plans(s)
    assert len(plans) == 2 and plans[0].system == plans[1].system and plans[0].think_time_s == 1.5
    p = plans[0]
    t1 = turn_prompt(s, p, 0)
    assert t1.input_ids == p.system + p.users[0] and (t1.conversation, t1.turn) == (0, 1)  # type: ignore[operator]
    p.replies.append([7, 8, 9, 10])
    t2 = turn_prompt(s, p, 1)
    assert t2.input_ids == p.system + p.users[0] + [7, 8, 9, 10] + p.users[1]  # type: ignore[operator]
    assert t2.input_ids[: len(t1.input_ids or [])] == t1.input_ids  # type: ignore[index]  # a prefix: cacheable
    chat = spec({"kind": "multi-turn", "num_conversations": 1, "turns": 2, "user_len": 3}, backend="openai-chat")
    cp = conversation_plans(chat)[0]
    cp.replies.append("t5 t6")
    msgs = turn_prompt(chat, cp, 1).messages
    assert [m["role"] for m in msgs or []] == ["user", "assistant", "user"] and msgs[1]["content"] == "t5 t6"  # type: ignore[index]


def _bpe(tmp: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(0, len(WORDS), 7)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=120, special_tokens=["[UNK]"]))
    (tmp / "model").mkdir()
    tok.save(str(tmp / "model" / "tokenizer.json"))
    return tmp / "model"


def test_with_the_models_tokenizer_text_prompts_have_exact_token_lengths(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    model = _bpe(tmp_path)
    counter = load_counter(model)
    assert isinstance(counter, HFCounter) and counter.note is None
    assert counter.count("information president") > 2  # this small vocabulary splits words: words != tokens
    rng = np.random.default_rng(0)
    for n in (1, 7, 100, 333):
        assert counter.count(counter.text_of_len(rng, n)) == n
    s = spec({"kind": "generated-shared-prefix", "num_groups": 2, "prompts_per_group": 2, "system_prompt_len": 40,
              "question_len": 9, "output_len": 3}, backend="openai", tokenizer=model)
    assert {counter.count(p.text or "") for p in prompt_stream(s)} == {49}


def test_without_a_tokenizer_counts_are_estimates_and_say_so(tmp_path: Path) -> None:
    assert "no tokenizer.json" in (load_counter(tmp_path).note or "")
    assert "no tokenizer given" in (load_counter(None).note or "")


def test_prompts_are_drawn_from_the_models_own_vocabulary(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    from support.tiny_llama import write_tiny_llama

    model = write_tiny_llama(tmp_path / "tiny")
    vocab = json.loads((model / "tokenizer.json").read_text())["model"]["vocab"]
    counter = load_counter(model)
    rng = np.random.default_rng(1)
    text = counter.text_of_len(rng, 50)
    assert all(w in vocab for w in text.split()) and counter.count(text) == 50
    s = spec({"kind": "generated-shared-prefix", "num_groups": 2, "prompts_per_group": 2, "system_prompt_len": 30,
              "question_len": 5, "output_len": 3}, tokenizer=model)
    ids = [i for p in prompt_stream(s) for i in p.input_ids or []]
    assert ids and min(ids) >= 4 and max(ids) < len(vocab)  # no special ids, nothing out of range


def test_what_real_runs_ask_for_is_within_the_bounds() -> None:
    """The bounds on what a load point builds (autotune.limits) leave real runs alone: 10,000 prompts of
    16k tokens, 1,000 of 100k, bench_serving's shared-prefix and multi-turn defaults and larger, a
    100k-token context kept over 20 turns, a day at 0.1 req/s."""
    LoadSpec(num_prompts=10_000, warmup_requests=1000, input_len=16_000)
    LoadSpec(num_prompts=1000, input_len=100_000, request_rate=0.01, duration_s=86_400)
    LoadSpec(num_prompts=8640, input_len=1024, request_rate=0.1)
    LoadSpec(duration_s=60, input_len=10_000_000, warmup_requests=2, concurrency=4)
    spec({"kind": "random", "input_len": 100_000}, num_prompts=1000)
    spec({"kind": "generated-shared-prefix"})
    spec({"kind": "generated-shared-prefix", "num_groups": 128, "prompts_per_group": 64, "system_prompt_len": 8192,
          "question_len": 512})
    spec({"kind": "multi-turn"})
    spec({"kind": "multi-turn", "num_conversations": 1000, "turns": 20, "system_prompt_len": 4000, "user_len": 2000,
          "output_len": 2000})
    spec({"kind": "trace", "path": "t.jsonl", "block_size": 512, "max_requests": 100_000})


@pytest.mark.parametrize(("dataset", "kw", "needle"), [
    ({"kind": "random", "input_len": 10**11}, {"num_prompts": 1}, "input_len"),
    ({"kind": "random", "input_len": 100_000}, {"num_prompts": 2001},
     "(num_prompts + warmup_requests) x dataset.input_len = (2,001 + 0) x 100,000 = 200,100,000 prompt tokens"),
    ({"kind": "generated-shared-prefix", "num_groups": 100_000, "prompts_per_group": 1000}, {},
     "num_groups x prompts_per_group = 100,000 x 1,000 = 100,000,000 requests"),
    ({"kind": "generated-shared-prefix", "system_prompt_len": 10_000_000, "question_len": 1}, {},
     "system_prompt_len + question_len = 10,000,000 + 1 = 10,000,001 tokens, more than the 10,000,000 a prompt"),
    ({"kind": "multi-turn", "num_conversations": 10_000, "turns": 1000}, {},
     "num_conversations x turns = 10,000 x 1,000 = 10,000,000 requests"),
    ({"kind": "multi-turn", "turns": 100, "user_len": 100_000}, {}, "the last turn, system_prompt_len + turns x "
     "user_len + (turns - 1) x output_len = 0 + 100 x 100,000 + 99 x 128 = 10,012,672 tokens"),
    ({"kind": "multi-turn", "think_time_s": 1e300}, {}, "think_time_s"),
    ({"kind": "trace", "path": "t.jsonl", "block_size": 10**9}, {}, "block_size"),
    ({"kind": "generated-shared-prefix"}, {"request_rate": 1e-3},
     "request_rate=0.001: the workload's requests / request_rate = 1,024 / 0.001 = 1.02e+06 s of sending"),
])
def test_what_a_load_point_would_build_is_bounded_before_it_is_built(dataset: dict, kw: dict, needle: str) -> None:
    """Each kind's counts, lengths and tokens in all are checked on the spec, before a token is drawn: these
    were MemoryErrors (a 10^11-token prompt, 10^8 shared-prefix prompts) or a load point that never ended."""
    with pytest.raises(ValidationError) as exc:
        spec(dataset, **kw)
    assert needle in str(exc.value)
