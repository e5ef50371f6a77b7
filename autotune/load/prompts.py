"""The requests of a load point: synthetic prompts of exact length, or a JSONL dataset.

Synthetic prompts follow bench_serving's ``random-ids`` dataset: lengths drawn
uniformly from ``[max(int(len * range_ratio), 1), len]`` with a seeded generator, so
two runs with the same seed send the same work. Nothing is downloaded and no
tokenizer is loaded: the sglang backend sends token ids (exact by construction); the
OpenAI backends send words, and the only assumption about the server's tokenizer is
isolated in :func:`text_of_tokens`. Metrics always use the token counts the server
reports, never these intended lengths.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autotune.errors import ConfigError
from autotune.files import read_json, read_lines
from autotune.limits import BATCH_TOKENS, DATASET_BYTES, JSON_BYTES, MAX_SEQUENCE_TOKENS, PROMPT_LINE_BYTES, shown
from autotune.load.formats import prompt_rows
from autotune.load.spec import LoadSpec

# Token ids drawn for synthetic sglang prompts: clear of the special ids at the
# bottom of every vocabulary and inside the smallest common vocabularies (32k).
# A model with a smaller vocabulary narrows it (LoadSpec.token_id_range): an id
# outside the embedding kills real SGLang's scheduler (IndexError in the embedding).
_ID_LOW, _ID_HIGH = 1000, 30000

# Words for synthetic OpenAI prompts: short, lower-case, common English words.
_WORDS = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government number "
    "night point home water room mother area money story fact month lot right study book eye job word "
    "business issue side kind head house service friend father power hour game line end member law car "
    "city community name president team minute idea kid body information back parent face others level"
).split()


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request's payload: either ``text`` or ``input_ids``, and the tokens to generate.

    ``input_len`` is the intended prompt length (exact for ids and for the stand-in
    tokenizer; ``None`` when a dataset gives text of unknown length).
    """

    output_len: int
    text: str | None = None
    input_ids: list[int] | None = None
    input_len: int | None = None
    # workload kinds (autotune.load.sources): chat messages, a trace's send time (seconds
    # from the start, modelled), and where the request belongs (shared-prefix group,
    # conversation and turn) for the per-group / per-turn figures
    messages: list[dict[str, str]] | None = None
    at_s: float | None = None
    group: int | None = None
    conversation: int | None = None
    turn: int | None = None


def text_of_tokens(words: list[str]) -> str:
    """Join words into a prompt the server counts as exactly ``len(words)`` tokens.

    The one tokenizer assumption of autotune's load generator: the simulated SGLang
    server's stand-in tokenizer counts one token per whitespace-separated word. A real
    tokenizer counts differently, which is why metrics use the server's ``usage``.
    """
    return " ".join(words)


def draw_lengths(length: int, range_ratio: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` lengths uniform in ``[max(int(length * range_ratio), 1), length]`` (bench_serving)."""
    low = max(int(length * range_ratio), 1)
    return rng.integers(low, length + 1, size=n)


def synthetic_prompts(spec: LoadSpec, n: int, *, seed_offset: int = 0) -> list[Prompt]:
    """``n`` synthetic prompts for ``spec`` (seeded; ``seed_offset`` separates warm-up from the run)."""
    rng = np.random.default_rng(spec.seed + seed_offset)
    in_lens = draw_lengths(spec.input_len, spec.range_ratio, n, rng)
    out_lens = draw_lengths(spec.output_len, spec.range_ratio, n, rng)
    prompts: list[Prompt] = []
    for in_len, out_len in zip(in_lens.tolist(), out_lens.tolist(), strict=True):
        if spec.backend == "sglang":
            low, high = spec.token_id_range or (_ID_LOW, _ID_HIGH)
            ids = rng.integers(low, high, size=in_len).tolist()
            prompts.append(Prompt(output_len=out_len, input_ids=ids, input_len=in_len))
        else:
            idx = rng.integers(0, len(_WORDS), size=in_len)
            words = [_WORDS[i] for i in idx.tolist()]
            prompts.append(Prompt(output_len=out_len, text=text_of_tokens(words), input_len=in_len))
    return prompts


def token_id_range(model_dir: str | Path) -> tuple[int, int] | None:
    """Ids ``[low, high)`` safe to send to this model: inside its embedding and its tokenizer, clear of
    special tokens, and inside the default 1000-30000 where the vocabulary allows (None: no config).

    The vocabulary is the smaller of ``config.json``'s ``vocab_size`` and the tokenizer's size;
    special ids (``added_tokens``) cut it, and the longest special-free run of ids is taken.
    """
    root = Path(model_dir)
    try:
        config = read_json(root / "config.json", "config.json", JSON_BYTES)  # bounded: never /dev/zero
    except ConfigError:
        return None
    if not isinstance(config, dict):
        return None
    inner = config.get("text_config")
    text_config: dict[str, Any] = inner if isinstance(inner, dict) else {}
    vocab = config.get("vocab_size") or text_config.get("vocab_size")
    if not isinstance(vocab, int) or vocab < 2:
        return None
    special: set[int] = set()
    try:
        tok = read_json(root / "tokenizer.json", "tokenizer.json", JSON_BYTES)
        size = len(tok.get("model", {}).get("vocab") or {}) + len(tok.get("added_tokens") or [])
        vocab = min(vocab, size) if size > 1 else vocab
        special = {int(t["id"]) for t in tok.get("added_tokens") or [] if t.get("special", True)}
    except (ConfigError, AttributeError, KeyError, TypeError, ValueError, OverflowError):
        pass
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        ids = config.get(key)
        special.update(i for i in (ids if isinstance(ids, list) else [ids]) if isinstance(i, int))
    best, start = (0, 0), 0
    for i in sorted(s for s in special if 0 <= s < vocab) + [vocab]:
        if i - start > best[1] - best[0]:
            best = (start, i)
        start = i + 1
    if best[1] - best[0] < 1:
        return None
    low, high = max(best[0], _ID_LOW), min(best[1], _ID_HIGH)
    return (low, high) if high - low >= 64 else best


def load_dataset(path: Path, backend: str) -> list[Prompt]:
    """Read a JSONL dataset of ``{"prompt": str | "input_ids": [int], "output_len": int}`` lines, a line at a
    time within what a load point builds (:func:`autotune.load.formats.prompt_rows`)."""
    prompts: list[Prompt] = []
    lines = read_lines(path, "dataset_path", DATASET_BYTES, line_limit=PROMPT_LINE_BYTES)  # a regular file, bounded
    for number, row in prompt_rows(lines, lambda n: f"dataset_path={shown(str(path), 200)} line {n}"):
        where = f"dataset_path={shown(str(path), 200)} line {number}"
        if not isinstance(row, dict):
            raise ConfigError(f"{where}: expected an object, got {type(row).__name__}")
        out = row.get("output_len")
        if not isinstance(out, int) or isinstance(out, bool) or not 1 <= out <= MAX_SEQUENCE_TOKENS:
            raise ConfigError(f"{where}: output_len={shown(out)} must be a whole number from 1 to "
                              f"{MAX_SEQUENCE_TOKENS:,}")
        if isinstance(row.get("input_ids"), list):
            ids = row["input_ids"]
            if not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
                raise ConfigError(f"{where}: input_ids must be a non-empty list of integers")
            if backend == "openai-chat":
                raise ConfigError(f"{where}: input_ids cannot be sent to the openai-chat backend")
            prompts.append(Prompt(output_len=out, input_ids=ids, input_len=len(ids)))
        elif isinstance(row.get("prompt"), str) and row["prompt"]:
            prompts.append(Prompt(output_len=out, text=row["prompt"]))
        else:
            raise ConfigError(f"{where}: needs a non-empty 'prompt' string or an 'input_ids' list")
    if not prompts:
        raise ConfigError(f"dataset_path={shown(str(path), 200)}: no prompts")
    return prompts


def prompt_stream(spec: LoadSpec, *, warmup: bool = False) -> Iterator[Prompt]:
    """The prompts of a run (or of its warm-up), endless when only ``duration_s`` bounds it.

    A dataset is cycled in order; synthetic prompts are generated in seeded batches.
    """
    if spec.dataset_path is not None:
        data = load_dataset(spec.dataset_path, spec.backend)
        return itertools.cycle(data)
    if warmup:
        return iter(synthetic_prompts(spec, spec.warmup_requests, seed_offset=1_000_003))
    if spec.num_prompts is not None:
        return iter(synthetic_prompts(spec, spec.num_prompts))
    return _endless(spec)


def _endless(spec: LoadSpec, batch: int = 1024) -> Iterator[Prompt]:
    batch = max(1, min(batch, BATCH_TOKENS // spec.input_len))  # long prompts: fewer at once
    for k in itertools.count():
        yield from synthetic_prompts(spec, batch, seed_offset=7919 * (k + 1) if k else 0)


def arrival_offsets(rate: float, n: int | None, rng: np.random.Generator) -> Iterator[float]:
    """Seconds from the start at which each request becomes due: a Poisson process.

    Inter-arrival gaps are exponential with mean ``1/rate`` (bench_serving's
    ``--request-rate``); ``rate = inf`` makes every request due at once.
    """
    if math.isinf(rate):
        yield from itertools.repeat(0.0, n) if n is not None else itertools.repeat(0.0)
        return
    # Like bench_serving: the first request goes at once, then exponential gaps.
    t = 0.0
    produced = 0
    while n is None or produced < n:
        chunk = rng.exponential(1.0 / rate, size=1024 if n is None else min(1024, n - produced))
        for gap in chunk.tolist():
            yield t
            t += gap
        produced += len(chunk)
