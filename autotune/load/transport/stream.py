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

What a server sends is bounded here, whatever it is (a broken build, a proxy, another program on
the port): an event (the bytes up to its blank line) of more than :func:`event_limit` bytes, a
count that is not an integer from 0 to ``MAX_SEQUENCE_TOKENS``, a field of the wrong type
(``choices`` a string, ``usage`` a list, text a number), or more tokens than
:func:`token_limit` allows for the request's ``max_tokens`` each set ``error`` (the request fails
as a malformed stream), never an exception and never a buffer that grows with the stream.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from autotune.limits import MAX_SEQUENCE_TOKENS
from autotune.limits import shown as limits_shown

try:  # optional speed-up
    import orjson

    loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover - exercised only without orjson
    import json

    loads = json.loads

_DONE = b"[DONE]"
_INT = re.compile(rb"\s*(\d{1,9})(?!\d)")  # a longer number is parsed in full (and refused there)

#: An event's bytes: a fixed part (an OpenAI chunk is a few hundred bytes) and, per token of the
#: request's ``max_tokens``, room for a native event's cumulative ``text`` and ``output_ids``.
EVENT_BYTES = 1 << 20
EVENT_BYTES_PER_TOKEN = 64


def event_limit(max_tokens: int | None) -> int:
    """The most bytes one event of a request for ``max_tokens`` tokens may hold."""
    return EVENT_BYTES + EVENT_BYTES_PER_TOKEN * min(max_tokens or 0, MAX_SEQUENCE_TOKENS)


def token_limit(max_tokens: int | None) -> int:
    """The most tokens a stream may carry for ``max_tokens``: a server stops at ``max_tokens``; twice it,
    plus 64, leaves room for a count that is not the server's (one per non-empty chunk)."""
    return 2 * max_tokens + 64 if max_tokens else MAX_SEQUENCE_TOKENS


def _count(value: Any) -> bool:
    """Whether ``value`` is a token count: an integer (not a bool) from 0 to ``MAX_SEQUENCE_TOKENS``."""
    return type(value) is int and 0 <= value <= MAX_SEQUENCE_TOKENS


class StreamParser:
    """Parses one response stream. After the stream, read the public attributes."""

    __slots__ = (
        "_buf",
        "_more",
        "_held",
        "_tail",
        "_max_event",
        "_max_tokens",
        "_limit",
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

    def __init__(self, backend: str, keep_output: bool = False, max_tokens: int | None = None) -> None:
        self._buf = b""  # the start of an event not yet ended
        self._more: list[bytes] = []  # ... and the reads after it, while the event lasts (joined once)
        self._held = 0  # bytes of _buf and _more
        self._tail = b""  # their last 3 bytes
        self._max_tokens = max_tokens
        self._max_event = event_limit(max_tokens)
        self._limit = token_limit(max_tokens)
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
        if self.error:
            return 0
        if self._buf:
            # an event split over reads: look for its end only where this read can complete one (the
            # last 3 bytes held, then the read), and join the pieces once, when it ends (concatenating
            # every read onto the held bytes, and searching them all, was quadratic in the event)
            joint = self._tail + data[:3]
            if b"\n\n" not in joint and b"\r\n\r\n" not in joint and b"\n\n" not in data \
                    and b"\r\n\r\n" not in data:
                return self._hold(data)
            buf = b"".join((self._buf, *self._more, data))
            self._buf, self._more, self._held, self._tail = b"", [], 0, b""
        else:
            buf = data
            if buf.startswith(b"data:") and buf.find(b"\n") == len(buf) - 2 and buf.endswith(b"\n\n"):
                # the common read: exactly one whole event of one data line
                return self._counted(self._payload(buf[5:-2].strip()))
            if b"\n\n" not in buf and b"\r\n\r\n" not in buf:
                return self._hold(buf)
        buf = buf.replace(b"\r\n", b"\n") if b"\r" in buf else buf
        *events, rest = buf.split(b"\n\n")
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
        if not self.error and rest:
            self._hold(rest)
        return self._counted(new)

    def _hold(self, data: bytes) -> int:
        """Keep ``data``, part of an event not yet ended (the event's bytes bounded)."""
        if self._buf:
            self._more.append(data)
        else:
            self._buf = data
        self._held += len(data)
        self._tail = (self._tail + data)[-3:]
        if self._held > self._max_event:
            self.error = (f"malformed stream: an event of more than {self._max_event} bytes "
                          f"(starts {self._buf[:40]!r})")
            self._buf, self._more, self._held, self._tail = b"", [], 0, b""
        return 0

    def _counted(self, new: int) -> int:
        self.counted += new
        if self.counted > self._limit and not self.error:
            self.error = (f"malformed stream: more than {self._limit} tokens for max_tokens={self._max_tokens}"
                          if self._max_tokens else f"malformed stream: more than {self._limit} tokens")
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
        except (ValueError, RecursionError):  # RecursionError: the standard library's, nested too deep
            self.error = f"malformed stream: {payload[:80]!r}"
            return 0
        return self._native_event(obj) if self._native else self._openai_event(obj)

    def _bad(self, what: str, value: Any) -> int:
        """A field of the wrong type or a number that is no count: the stream is malformed."""
        if "tokens" in what:
            shown = limits_shown(value) if type(value) in (int, float) else f"of type {type(value).__name__}"
            self.error = f"malformed stream: {what} is {shown}, not a token count (0 to {MAX_SEQUENCE_TOKENS:,})"
        else:
            self.error = f"malformed stream: {what} is of type {type(value).__name__}"
        return 0

    def _fail(self, obj: Any) -> bool:
        if not isinstance(obj, dict):
            self.error = f"malformed stream: event is {type(obj).__name__}"
            return True
        err = obj.get("error")
        if err is not None:
            msg = err.get("message", err) if isinstance(err, dict) else err
            self.error = f"server error: {msg[:200] if isinstance(msg, str) else limits_shown(msg, 200)}"
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
        meta = obj.get("meta_info")
        if meta is None:
            meta = {}
        elif type(meta) is not dict:
            return self._bad("meta_info", meta)
        ids = obj.get("output_ids")
        if ids is not None and type(ids) is not list:
            return self._bad("output_ids", ids)
        ct = meta.get("completion_tokens")
        if ct is None:
            ct = len(ids) if ids is not None else None
        for key in ("completion_tokens", "prompt_tokens", "cached_tokens"):
            value = ct if key == "completion_tokens" else meta.get(key)
            if value is not None and not _count(value):
                return self._bad(f"meta_info.{key}", value)
        text = obj.get("text")
        if text is not None and type(text) is not str:
            return self._bad("text", text)
        if meta.get("prompt_tokens") is not None:
            self.prompt_tokens = meta["prompt_tokens"]
        if meta.get("cached_tokens") is not None:
            self.cached_tokens = meta["cached_tokens"]
        if self._keep:
            self._last = b""
            self._parts = [text or ""]
            self._ids = ids
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
            if type(choices) is not list:
                return self._bad("choices", choices)
            c0 = choices[0]
            if type(c0) is not dict:
                return self._bad("choices[0]", c0)
            if self._chat:
                delta = c0.get("delta")
                if delta is not None and type(delta) is not dict:
                    return self._bad("choices[0].delta", delta)
                text = delta.get("content") if delta else None
            else:
                text = c0.get("text")
            if text is not None and type(text) is not str:
                return self._bad("choices[0].delta.content" if self._chat else "choices[0].text", text)
        if usage:
            if type(usage) is not dict:
                return self._bad("usage", usage)
            details = usage.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, dict) else None
            for key, value in (("prompt_tokens", usage.get("prompt_tokens")),
                               ("completion_tokens", usage.get("completion_tokens")),
                               ("prompt_tokens_details.cached_tokens", cached)):
                if value is not None and not _count(value):
                    return self._bad(f"usage.{key}", value)
            if usage.get("prompt_tokens") is not None:
                self.prompt_tokens = usage["prompt_tokens"]
            if cached is not None:
                self.cached_tokens = cached
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
