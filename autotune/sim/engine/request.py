"""One request inside the simulated engine, and the public handle on it.

:class:`Request` is the scheduler's state (private to :mod:`autotune.sim.engine.core`);
:class:`RequestHandle` is what :meth:`Engine.submit <autotune.sim.engine.core.Engine.submit>`
hands out: read-only timestamps, counts and the streamed chunks' times.

Emission is kept cheap because the engine touches every running request on every
decode step (concurrency 256, and ~1,800 candidates in an exhaustive offline pass):
a streamed chunk is recorded as two list appends (its modelled time and its token
count); token ids and :class:`~autotune.sim.engine.core.Chunk` objects are made only when
an asyncio consumer of :meth:`Engine.generate` reads them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

TOKEN_ID_BASE = 100  # stay clear of special-token ids
TOKEN_ID_RANGE = 30000


class Request:
    """Scheduler state and modelled timestamps of one submitted request."""

    __slots__ = (
        "rid", "seq", "input_len", "max_new", "arrival_s", "first_token_s", "finish_s", "finish_reason",
        "prefilled", "prefill_target", "output", "kv", "pending", "times", "counts", "waiter", "error",
        "aborted", "first_id", "handle", "keys", "cached", "match", "kv_locked", "counted", "tree_tokens",
    )

    def __init__(self, rid: str, seq: int, input_len: int, max_new: int, arrival_s: float, first_id: int,
                 keys: Sequence[int] | None = None) -> None:
        self.rid = rid
        self.seq = seq  # submission order
        self.input_len = input_len
        self.max_new = max_new
        self.arrival_s = arrival_s
        self.first_token_s: float | None = None
        self.finish_s: float | None = None
        self.finish_reason: str | None = None
        self.prefilled = 0  # tokens of prefill_target already in the KV pool
        self.prefill_target = input_len  # input (+ output so far, after a retraction)
        self.output = 0  # output tokens generated
        self.kv = 0  # KV tokens this request holds
        self.pending = 0  # generated tokens not yet streamed (stream_interval)
        self.times: list[float] = []  # modelled time of each streamed chunk
        self.counts: list[int] = []  # tokens in each streamed chunk
        self.waiter: asyncio.Future[None] | None = None
        self.error: str | None = None
        self.aborted = False
        self.first_id = first_id
        self.keys = keys  # prompt token ids for the prefix cache (None: not cacheable)
        self.cached = 0  # prompt tokens served from the prefix cache (SGLang's cached_tokens)
        self.match: Any = None  # the cache match found at admission
        self.kv_locked = False  # the match is locked in the cache (the request was admitted with it)
        self.counted = False  # its prompt counted in the cache statistics (first admission)
        self.tree_tokens = 0  # context tokens it reads from the cache tree (decode attention cost)
        self.handle = RequestHandle(self)

    @property
    def prefill_left(self) -> int:
        return self.prefill_target - self.prefilled

    def token_ids(self, offset: int, n: int) -> list[int]:
        """The fake ids of output tokens ``offset .. offset + n - 1`` (deterministic per request)."""
        start = self.first_id + offset
        return [TOKEN_ID_BASE + (start + i) % TOKEN_ID_RANGE for i in range(n)]

    def flush(self, t: float) -> None:
        """Stream the pending tokens as one chunk made at modelled time ``t``; wake the consumer."""
        self.times.append(t)
        self.counts.append(self.pending)
        self.pending = 0
        self.wake()

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def finish(self, t: float, reason: str) -> None:
        if self.finish_s is None:
            self.finish_s = t
            self.finish_reason = reason

    def fail(self, reason: str) -> None:
        """The engine died: wake the consumer so that it raises."""
        self.error = reason
        self.wake()

    def record(self) -> dict[str, object]:
        """The per-request ground-truth record (modelled seconds)."""
        return {
            "rid": self.rid,
            "input_len": self.input_len,
            "output_len": self.output,
            "cached_tokens": self.cached,
            "arrival_s": self.arrival_s,
            "first_token_s": self.first_token_s,
            "finish_s": self.finish_s,
            "finish_reason": self.finish_reason,
        }


class RequestHandle:
    """Read-only view of one submitted request (what :meth:`Engine.submit` returns).

    ``done`` turns true when the request finished (``finish_reason`` "length"), was
    aborted ("abort") or failed with the engine (``error``). ``chunk_times`` and
    ``chunk_counts`` are the modelled time and token count of every chunk streamed so far.
    """

    __slots__ = ("_req",)

    def __init__(self, req: Request) -> None:
        self._req = req

    def __repr__(self) -> str:
        r = self._req
        return (f"RequestHandle({r.rid!r}, input_len={r.input_len}, output_tokens={r.output}, "
                f"finish_reason={r.finish_reason!r}, error={r.error!r})")

    @property
    def rid(self) -> str:
        return self._req.rid

    @property
    def seq(self) -> int:
        """Submission order within the engine (0, 1, ...)."""
        return self._req.seq

    @property
    def input_len(self) -> int:
        return self._req.input_len

    @property
    def max_new_tokens(self) -> int:
        return self._req.max_new

    @property
    def output_tokens(self) -> int:
        return self._req.output

    @property
    def arrival_s(self) -> float:
        return self._req.arrival_s

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens served from the prefix cache (SGLang's ``meta_info.cached_tokens``)."""
        return self._req.cached

    @property
    def first_token_s(self) -> float | None:
        return self._req.first_token_s

    @property
    def finish_s(self) -> float | None:
        return self._req.finish_s

    @property
    def finish_reason(self) -> str | None:
        return self._req.finish_reason

    @property
    def error(self) -> str | None:
        """Why the engine failed this request (it died), else None."""
        return self._req.error

    @property
    def done(self) -> bool:
        r = self._req
        return r.finish_s is not None or r.error is not None

    @property
    def output_ids(self) -> list[int]:
        """The token ids of the output generated so far (what the server streams as ``output_ids``)."""
        return self._req.token_ids(0, self._req.output)

    @property
    def chunk_times(self) -> list[float]:
        """Modelled time of each streamed chunk (a copy)."""
        return list(self._req.times)

    @property
    def chunk_counts(self) -> list[int]:
        """Token count of each streamed chunk (a copy)."""
        return list(self._req.counts)

    def record(self) -> dict[str, object]:
        """The per-request ground-truth record, as in ``Engine.stats()["requests"]``."""
        return self._req.record()
