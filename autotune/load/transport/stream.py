"""Incremental parsing of streamed responses: SSE events split by hand, one JSON parse per event.

The client reads raw chunks (``iter_any``), takes one timestamp per read and hands the
bytes to :meth:`StreamParser.feed`, which returns how many new tokens the read carried:

* ``sglang`` (``/generate``): ``meta_info.completion_tokens`` is cumulative; the new
  tokens of an event are its increase.
* Prompt tokens served from the server's prefix cache: ``meta_info.cached_tokens``
  (native) or ``usage.prompt_tokens_details.cached_tokens`` (OpenAI, SGLang with
  ``--enable-cache-report``); ``cached_tokens`` stays None when the server says nothing.
* With ``keep_output`` (conversations send the reply back) the reply is kept: the
  native stream's last ``output_ids`` / ``text``, or the OpenAI chunks' text.
* ``openai`` / ``openai-chat``: a chunk carries tokens when its text
  (``choices[0].text`` / ``choices[0].delta.content``) is non-empty, so the role-only
  first chat chunk does not count. With per-chunk usage (``continuous_usage_stats``) a
  chunk's tokens are the increase of ``usage.completion_tokens``, empty text or not (real
  SGLang streams a token that decodes to nothing, e.g. a special token, as text "");
  without it each content chunk counts as one token, and the final ``usage`` chunk
  carries whatever the server counted beyond them, so the stream's total is the server's.

orjson is used when installed (falls back to the standard library).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

try:  # optional speed-up
    import orjson

    loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover - exercised only without orjson
    import json

    loads = json.loads

_DONE = b"[DONE]"
_INT = re.compile(rb"\s*(\d+)")


class StreamParser:
    """Parses one response stream. After the stream, read the public attributes."""

    __slots__ = (
        "_buf",
        "_chat",
        "_native",
        "_usage_ct",
        "done",
        "error",
        "prompt_tokens",
        "completion_tokens",
        "tokens_from_server",
        "counted",
        "cached_tokens",
        "_keep",
        "_last",
        "_parts",
        "_ids",
    )

    def __init__(self, backend: str, keep_output: bool = False) -> None:
        self._buf = b""
        self._native = backend == "sglang"
        self._chat = backend == "openai-chat"
        self._usage_ct = 0  # last usage.completion_tokens seen on a content chunk
        self.done = False
        self.error: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.tokens_from_server = False
        self.counted = 0  # tokens attributed to reads so far
        self.cached_tokens: int | None = None
        self._keep = keep_output
        self._last = b""  # the last native event (its cumulative output), when keeping the output
        self._parts: list[str] = []  # OpenAI text pieces, when keeping the output
        self._ids: list[int] | None = None

    def feed(self, data: bytes) -> int:
        """Consume one read; return the number of new tokens it carried."""
        buf = self._buf + data if self._buf else data
        if buf.startswith(b"data:") and buf.find(b"\n") == len(buf) - 2 and buf.endswith(b"\n\n"):
            # the common read: exactly one whole event of one data line
            self._buf = b""
            new = self._payload(buf[5:-2].strip())
            self.counted += new
            return new
        if b"\n\n" not in buf:
            if b"\r\n\r\n" not in buf:
                self._buf = buf
                return 0
        buf = buf.replace(b"\r\n", b"\n") if b"\r" in buf else buf
        *events, self._buf = buf.split(b"\n\n")
        new = 0
        for event in events:
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue  # comments, event:, id:, retry: lines
                new += self._payload(line[5:].strip())
                if self.error:
                    break
            if self.error:
                break
        self.counted += new
        return new

    def _payload(self, payload: bytes) -> int:
        """The new tokens of one ``data:`` line's payload (sets ``done`` / ``error``)."""
        if payload == _DONE:
            self.done = True
            return 0
        if self._native:
            fast = self._native_fast(payload)
            if fast is not None:
                return fast
        try:
            obj = loads(payload)
        except ValueError:
            self.error = f"malformed stream: {payload[:80]!r}"
            return 0
        return self._native_event(obj) if self._native else self._openai_event(obj)

    def _fail(self, obj: Any) -> bool:
        if not isinstance(obj, dict):
            self.error = f"malformed stream: event is {type(obj).__name__}"
            return True
        err = obj.get("error")
        if err is not None:
            msg = err.get("message", err) if isinstance(err, dict) else err
            self.error = f"server error: {str(msg)[:200]}"
            return True
        return False

    def _native_fast(self, payload: bytes) -> int | None:
        """Token count of a /generate event without parsing its growing cumulative text and ids.

        In valid JSON ``"completion_tokens":`` can only be a key (a string value is never
        followed by a colon, and inside a string the quotes are escaped), so a plain
        search finds meta_info's counter. Anything unusual (first event, an error
        mention, no counter) returns None and the event is parsed in full.
        """
        if self.prompt_tokens is None or b'"error"' in payload:
            return None
        if self._keep:
            self._last = payload
        i = payload.rfind(b'"completion_tokens":')
        if i < 0:
            return None
        m = _INT.match(payload, i + 20)
        if m is None:
            return None
        ct = int(m.group(1))
        prev = self.completion_tokens or 0
        self.completion_tokens = ct
        return max(ct - prev, 0)

    def _native_event(self, obj: Any) -> int:
        if (type(obj) is not dict or "error" in obj) and self._fail(obj):
            return 0
        meta = obj.get("meta_info") or {}
        ct = meta.get("completion_tokens")
        if ct is None:
            ids = obj.get("output_ids")
            ct = len(ids) if isinstance(ids, list) else None
        if meta.get("prompt_tokens") is not None:
            self.prompt_tokens = meta["prompt_tokens"]
        if isinstance(meta.get("cached_tokens"), int):
            self.cached_tokens = meta["cached_tokens"]
        if self._keep:
            self._last = b""
            self._parts = [obj.get("text") or ""]
            ids = obj.get("output_ids")
            self._ids = ids if isinstance(ids, list) else None
        if ct is None:
            return 0
        prev = self.completion_tokens or 0
        self.completion_tokens = ct
        self.tokens_from_server = True
        return max(ct - prev, 0)

    def _openai_event(self, obj: Any) -> int:
        if (type(obj) is not dict or "error" in obj) and self._fail(obj):
            return 0
        usage = obj.get("usage")
        choices = obj.get("choices")
        text = None
        if choices:
            c0 = choices[0]
            text = (c0.get("delta") or {}).get("content") if self._chat else c0.get("text")
        if usage:
            if usage.get("prompt_tokens") is not None:
                self.prompt_tokens = usage["prompt_tokens"]
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                self.cached_tokens = details["cached_tokens"]
            ct = usage.get("completion_tokens")
            if ct is not None:
                self.completion_tokens = ct
                self.tokens_from_server = True
                # The server's count rose: that many tokens arrived, even when they decode to empty
                # text (real SGLang streams a special token as a chunk with text "" and usage +1).
                k = ct - self._usage_ct
                self._usage_ct = max(ct, self._usage_ct)
                if k > 0 or text:
                    if text and self._keep:
                        self._parts.append(text)
                    return max(k, 1)
                return 0
        if text and self._keep:
            self._parts.append(text)
        if text:
            self._usage_ct += 1
            if not self.tokens_from_server:
                self.completion_tokens = (self.completion_tokens or 0) + 1
            return 1
        return 0

    def output(self) -> tuple[list[int] | None, str]:
        """The reply (``keep_output``): its token ids when the stream gave them, and its text."""
        if self._native and self._last:
            try:
                obj = loads(self._last)
            except ValueError:
                obj = None
            if isinstance(obj, dict):
                ids = obj.get("output_ids")
                self._ids = ids if isinstance(ids, list) else None
                self._parts = [obj.get("text") or ""]
            self._last = b""
        return self._ids, "".join(self._parts)
