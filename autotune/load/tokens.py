"""Token counts for building prompts: the model's own tokenizer when its directory has one.

``bench_serving`` measures prompt lengths with the model's tokenizer. autotune does the
same when it can: :func:`load_counter` reads ``tokenizer.json`` from the model directory
with the ``tokenizers`` library (a small Rust wheel, no transformers). Otherwise it falls
back to one token per whitespace-separated word (exact on the simulated server, whose
stand-in tokenizer counts that way; an estimate elsewhere) and says so in ``note``,
which the load point's metrics carry as ``token_count_note``. Metrics always use the
token counts the server reports; this only decides the lengths of the prompts sent.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

log = logging.getLogger(__name__)

# Words for synthetic text prompts: short, lower-case, common English words
# (one token each in common BPE vocabularies when preceded by a space).
_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government number "
    "night point home water room mother area money story fact month lot right study book eye job word "
    "business issue side kind head house service friend father power hour game line end member law car "
    "city community name president team minute idea kid body information back parent face others level"
)
WORDS = _WORD_TEXT.split()


class TokenCounter(Protocol):
    """What prompt building needs of a tokenizer."""

    exact: bool  # counts are the model's own (not an estimate)
    note: str | None  # why counts are estimates (None when exact)

    def count(self, text: str) -> int: ...

    def text_of_len(self, rng: np.random.Generator, n: int) -> str: ...


class WordCounter:
    """One token per whitespace-separated word (the simulated server's rule)."""

    def __init__(self, note: str | None = None) -> None:
        self.exact = note is None
        self.note = note

    def count(self, text: str) -> int:
        return len(text.split())

    def text_of_len(self, rng: np.random.Generator, n: int) -> str:
        idx = rng.integers(0, len(WORDS), size=n)
        return " ".join(WORDS[i] for i in idx.tolist())


class HFCounter:
    """The model's ``tokenizer.json`` through the ``tokenizers`` library (no special tokens)."""

    def __init__(self, tokenizer: object, source: str) -> None:
        self._tok = tokenizer
        self.source = source
        self.exact = True
        self.note: str | None = None

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)  # type: ignore[attr-defined]

    def text_of_len(self, rng: np.random.Generator, n: int) -> str:
        """Text of exactly ``n`` tokens: common words, then trimmed or padded against the tokenizer."""
        words = [WORDS[i] for i in rng.integers(0, len(WORDS), size=n).tolist()]
        for _ in range(8):
            text = " ".join(words)
            have = self.count(text)
            if have == n:
                return text
            if have > n:
                del words[max(1, len(words) - (have - n)):]
            else:
                words.extend(WORDS[i] for i in rng.integers(0, len(WORDS), size=n - have).tolist())
        ids = self._tok.encode(" ".join(words), add_special_tokens=False).ids[:n]  # type: ignore[attr-defined]
        return str(self._tok.decode(ids))  # type: ignore[attr-defined]


def load_counter(tokenizer_path: str | Path | None) -> TokenCounter:
    """The model's tokenizer from ``tokenizer_path`` (a model directory or a tokenizer.json),
    else the word counter with a note saying why the counts are estimates."""
    if tokenizer_path is None:
        return WordCounter("token counts estimated: one token per word (no tokenizer given)")
    p = Path(tokenizer_path)
    file = p / "tokenizer.json" if p.is_dir() else p
    if not file.is_file():
        return WordCounter(f"token counts estimated: one token per word (no tokenizer.json in {p})")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return WordCounter("token counts estimated: one token per word (pip install tokenizers for exact counts)")
    try:
        return HFCounter(Tokenizer.from_file(str(file)), str(file))
    except Exception as exc:  # noqa: BLE001 - the library raises bare Exception on a bad file: estimate, say why
        log.warning("cannot load %s: %s", file, exc)
        return WordCounter(f"token counts estimated: one token per word ({file} unreadable: {exc})")


def join_ids(parts: Sequence[Sequence[int]]) -> list[int]:
    out: list[int] = []
    for part in parts:
        out.extend(part)
    return out
