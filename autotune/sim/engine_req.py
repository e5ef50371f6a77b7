"""One request inside the simulated engine (private to :mod:`autotune.sim.engine`).

Kept apart so the scheduler module stays about scheduling. ``__slots__`` keeps
the per-token bookkeeping cheap: at concurrency 256 the engine touches every
running request on every decode step.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

TOKEN_ID_BASE = 100  # stay clear of special-token ids
TOKEN_ID_RANGE = 30000


class Request:
    """Scheduler state and modelled timestamps of one generate call."""

    __slots__ = (
        "rid", "input_len", "max_new", "arrival_s", "first_token_s", "finish_s", "finish_reason",
        "prefilled", "prefill_target", "output", "kv", "pending", "chunks", "waiter", "error",
        "aborted", "_next_id",
    )

    def __init__(self, rid: str, input_len: int, max_new: int, arrival_s: float, first_id: int) -> None:
        self.rid = rid
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
        self.pending: list[int] = []  # generated ids not yet sent (stream_interval)
        self.chunks: deque[Any] = deque()  # Chunk objects ready for the consumer
        self.waiter: asyncio.Future[None] | None = None
        self.error: str | None = None
        self.aborted = False
        self._next_id = first_id

    @property
    def prefill_left(self) -> int:
        return self.prefill_target - self.prefilled

    def take_ids(self, n: int) -> list[int]:
        """The next ``n`` fake token ids (deterministic per request)."""
        start = self._next_id
        self._next_id = (start + n) % TOKEN_ID_RANGE
        if n == 1:
            return [TOKEN_ID_BASE + start]
        return [TOKEN_ID_BASE + (start + i) % TOKEN_ID_RANGE for i in range(n)]

    def push(self, chunk: Any) -> None:
        """Hand a chunk to the consumer and wake it if it waits."""
        self.chunks.append(chunk)
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
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def record(self) -> dict[str, Any]:
        """The per-request ground-truth record (modelled seconds)."""
        return {
            "rid": self.rid,
            "input_len": self.input_len,
            "output_len": self.output,
            "arrival_s": self.arrival_s,
            "first_token_s": self.first_token_s,
            "finish_s": self.finish_s,
            "finish_reason": self.finish_reason,
        }
