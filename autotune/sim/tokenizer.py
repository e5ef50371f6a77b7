"""A stand-in tokenizer for the simulated server: one token per whitespace-separated word.

Why: the simulator has no vocabulary, yet ``prompt_tokens`` must be exact and predictable
so that a load generator's input-token counts can be checked against the server's. The
rule is deliberately trivial:

* text is split on whitespace; each word is one token (``"a b  c"`` -> 3 tokens);
* an empty or whitespace-only text is 0 tokens;
* ``input_ids`` count as given (one id, one token);
* generated token ids decode to the words ``"t<id>"`` joined by single spaces, and such a
  word encodes back to ``<id>``: re-encoding generated text gives back the generated ids,
  so a conversation that sends a reply back hits the prefix cache as on a real server.

Word ids are stable hashes (CRC32 modulo the vocabulary size) so the same text always
encodes to the same ids, on every run and every machine.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

DEFAULT_VOCAB_SIZE = 32000


class WordTokenizer:
    """Whitespace-word tokenizer; see the module docstring for the exact rule."""

    def __init__(self, vocab_size: int = DEFAULT_VOCAB_SIZE) -> None:
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2, got {vocab_size}")
        self.vocab_size = vocab_size

    def count(self, text: str) -> int:
        """Number of tokens ``text`` encodes to."""
        return len(text.split())

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``: one stable id per whitespace-separated word."""
        return [self._word_id(word) for word in text.split()]

    def _word_id(self, word: str) -> int:
        if word[0] == "t" and word[1:].isdigit() and len(word) < 8:
            return int(word[1:])
        return zlib.crc32(word.encode("utf-8")) % self.vocab_size

    def encode_messages(self, messages: Sequence[dict]) -> list[int]:
        """Token ids of a chat request's prompt: its messages' text contents in order (no template)."""
        ids: list[int] = []
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                ids.extend(self.encode(content))
            elif isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        ids.extend(self.encode(part["text"]))
        return ids

    def decode(self, token_ids: Iterable[int]) -> str:
        """Text of generated ids: ``"t<id>"`` words joined by single spaces."""
        return " ".join(f"t{int(i)}" for i in token_ids)

    def decode_increment(self, token_ids: Sequence[int], already: int) -> str:
        """The text that ``token_ids[already:]`` adds to the decoded text of ``token_ids[:already]``."""
        new = self.decode(token_ids[already:])
        if not new:
            return ""
        return new if already == 0 else " " + new

    def count_messages(self, messages: Sequence[dict]) -> int:
        """Prompt tokens of a chat request: the words of every message's text content.

        No chat template is applied (the stand-in has none), so the count is exactly the
        sum of the words in the messages' ``content`` (string, or a list of text parts).
        """
        total = 0
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                total += self.count(content)
            elif isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        total += self.count(part["text"])
        return total
