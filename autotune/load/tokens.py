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
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from autotune.files import regular_file
from autotune.limits import JSON_BYTES

log = logging.getLogger(__name__)

_POOL_SCAN = 65536  # vocabulary ids scanned for plain words
_MIN_POOL = 64

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
    """The model's ``tokenizer.json`` through the ``tokenizers`` library (no special tokens).

    Synthetic text is drawn from the vocabulary's own plain words (entries that decode to
    letters and encode back to one token), so it is in-vocabulary for any model; ids for
    the native backend come from the same pool (never a special or out-of-range id).
    """

    def __init__(self, tokenizer: object, source: str) -> None:
        self._tok = tokenizer
        self.source = source
        self.exact = True
        self.note: str | None = None
        self._words: list[str] | None = None
        self._ids: list[int] | None = None

    def _pool(self) -> tuple[list[str], list[int]]:
        if self._words is None or self._ids is None:
            tok: Any = self._tok
            words: list[str] = []
            ids: list[int] = []
            for i in range(min(int(tok.get_vocab_size()), _POOL_SCAN)):
                w = str(tok.decode([i])).strip()
                if w.isalpha() and w.isascii() and tok.encode(w, add_special_tokens=False).ids == [i]:
                    words.append(w)
                    ids.append(i)
            if len(words) < _MIN_POOL:  # a vocabulary without plain words: common English, counted
                words, ids = list(WORDS), []
            self._words, self._ids = words, ids
        return self._words, self._ids

    def token_ids(self, rng: np.random.Generator, n: int) -> list[int] | None:
        """``n`` in-vocabulary ids (None when the vocabulary has no plain-word pool)."""
        ids = self._pool()[1]
        if not ids:
            return None
        return [ids[i] for i in rng.integers(0, len(ids), size=n).tolist()]

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)  # type: ignore[attr-defined]

    def text_of_len(self, rng: np.random.Generator, n: int) -> str:
        """Text of exactly ``n`` tokens: common words, then trimmed or padded against the tokenizer."""
        pool = self._pool()[0]
        words = [pool[i] for i in rng.integers(0, len(pool), size=n).tolist()]
        for _ in range(8):
            text = " ".join(words)
            have = self.count(text)
            if have == n:
                return text
            if have > n:
                del words[max(1, len(words) - (have - n)):]
            else:
                words.extend(pool[i] for i in rng.integers(0, len(pool), size=n - have).tolist())
        ids = self._tok.encode(" ".join(words), add_special_tokens=False).ids[:n]  # type: ignore[attr-defined]
        return str(self._tok.decode(ids))  # type: ignore[attr-defined]


def tokenizer_file(tokenizer_path: str | Path, field: str = "tokenizer") -> Path | None:
    """The tokenizer.json ``tokenizer_path`` names (itself, or in the directory it names); None when
    there is none. One that is there but is not a regular file of at most
    :data:`~autotune.limits.JSON_BYTES` (``/dev/zero``, a FIFO: the library would read it without end)
    is refused: ConfigError naming ``field``."""
    p = Path(tokenizer_path)
    file = p / "tokenizer.json" if p.is_dir() else p
    if not os.path.lexists(file):
        return None
    return regular_file(file, field, JSON_BYTES)


def load_counter(tokenizer_path: str | Path | None) -> TokenCounter:
    """The model's tokenizer from ``tokenizer_path`` (a model directory or a tokenizer.json),
    else the word counter with a note saying why the counts are estimates."""
    if tokenizer_path is None:
        return WordCounter("token counts estimated: one token per word (no tokenizer given)")
    p = Path(tokenizer_path)
    file = tokenizer_file(p)
    if file is None:
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
