"""Continuous-batching token engine of the simulated SGLang server, in modelled time.

One asyncio task runs SGLang's scheduler loop in miniature. Each iteration is
either a **prefill** (extend) step or a **decode** step, and each step lasts the
modelled time :class:`autotune.sim.perf.PerfModel` gives it:

* Requests wait in a FCFS queue. A prefill step takes up to
  ``chunked_prefill_size`` new tokens from the waiting requests (one request
  at a time may be cut into chunks and continued in the next prefill step).
  A request is admitted only if the KV pool has room for its remaining input
  plus a reserve for its future decode tokens (``min(max_new - out, 4096) x
  new_token_ratio``, the running requests' reserves counted too), and only
  while ``running < max_running_requests`` - SGLang's ``PrefillAdder``.
  Prefill has priority over decode (mixed chunked prefill is off by
  default in SGLang), and the step that finishes a request's prefill emits
  its first token.
* A decode step advances every running request by one token (by a sampled
  number of accepted tokens under speculative decoding). If the pool has no
  room for the step, the request with the fewest output tokens (the newest)
  is retracted back to the head of the queue, its KV freed, to be
  re-prefilled over input + output later; ``new_token_ratio`` then rises, as
  in ``retract_decode``. Otherwise the ratio decays from 0.7 towards 0.1
  by 0.001 per decode step (SGLang's defaults).
* The engine sleeps ``step_time / time_scale`` of wall time per step,
  anchored to the modelled clock so that drift does not accumulate. When the
  host cannot keep up (a huge time scale), the anchor moves instead: modelled
  time never runs ahead of the steps, so modelled throughput stays correct
  whatever the CPU.
* Tokens reach the consumers of :meth:`Engine.generate` as :class:`Chunk`
  objects carrying the modelled time of the step that made them; with
  ``stream_interval`` k one chunk carries k tokens (the first token and the
  last chunk are always sent at once). Each request has one future at most
  and is woken only when a chunk is ready: no per-request sleeps.

A prefill batch over ``prefill_oom_tokens`` tokens calls ``on_runtime_oom
(num_tokens)`` and stops the engine (the server prints SGLang's "Prefill out
of memory" and dies); pending consumers then get :class:`EngineStopped`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from autotune.errors import AutotuneError, ConfigError
from autotune.sim.engine_clock import ModelledClock
from autotune.sim.engine_req import TOKEN_ID_RANGE, Request

__all__ = ["Chunk", "Engine", "EngineStopped"]

log = logging.getLogger(__name__)

INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = 0.1
NEW_TOKEN_RATIO_DECAY = 0.001
CLIP_MAX_NEW_TOKENS = 4096
RETRACT_DECODE_STEPS = 20
IDLE_GRACE_TURNS = 3  # event-loop turns the engine waits for work before idling



class EngineStopped(AutotuneError):
    """The engine stopped (shut down or died of a runtime OOM) while a request was in flight."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """New tokens of one request, as one streamed piece."""

    token_ids: list[int]
    modelled_time_s: float
    finished: bool
    finish_reason: str | None


class Engine:
    """SGLang-like continuous batching over a :class:`~autotune.sim.perf.PerfModel`."""

    def __init__(
        self,
        perf: Any,
        *,
        kv_tokens: int,
        max_running_requests: int,
        chunked_prefill_size: int,
        time_scale: float,
        seed: int,
        prefill_oom_tokens: int | None = None,
        on_runtime_oom: Callable[[int], Any] | None = None,
        stream_interval: int = 1,
    ) -> None:
        if kv_tokens < 1:
            raise ConfigError(f"kv_tokens: must be >= 1, got {kv_tokens}")
        if max_running_requests < 1:
            raise ConfigError(f"max_running_requests: must be >= 1, got {max_running_requests}")
        if not time_scale > 0:
            raise ConfigError(f"time_scale: must be > 0, got {time_scale}")
        if stream_interval < 1:
            raise ConfigError(f"stream_interval: must be >= 1, got {stream_interval}")
        self.perf = perf
        self.kv_tokens = int(kv_tokens)
        self.max_running_requests = int(max_running_requests)
        self.chunked_prefill_size = int(chunked_prefill_size) if chunked_prefill_size > 0 else 1 << 60
        self.time_scale = float(time_scale)
        self.prefill_oom_tokens = prefill_oom_tokens
        self.on_runtime_oom = on_runtime_oom
        self.stream_interval = int(stream_interval)
        self._rng = random.Random(seed)
        accepted = float(perf.accepted_tokens_per_step(1))
        self._spec = accepted > 1.0
        self._accept_p = float(getattr(perf, "accept_p", 0.0))
        self._spec_depth = int(getattr(perf, "spec_draft_tokens", 2)) - 1 if self._spec else 0
        if self._spec and not (0.0 < self._accept_p < 1.0):
            self._accept_p = 1.0 - 1.0 / accepted  # geometric with the same mean (no depth cap)
            self._spec_depth = 1 << 30
        self._kv_per_decode = max(int(getattr(perf, "spec_draft_tokens", 1)), 1) if self._spec else 1

        self._waiting: deque[Request] = deque()
        self._running: list[Request] = []  # prefill finished, decoding
        self._chunked: Request | None = None  # partially prefilled, holds KV
        self._records: dict[str, Request] = {}
        self._kv_used = 0
        self._ratio = INIT_NEW_TOKEN_RATIO
        self.tokens_emitted = 0
        self.requests_served = 0
        self.retractions = 0
        self.steps = {"prefill": 0, "decode": 0}

        self._task: asyncio.Task[None] | None = None
        self._work: asyncio.Event | None = None
        self._stopping = False
        self._dead: str | None = None
        self._clock = ModelledClock(self.time_scale)

    # --- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Start the scheduler task on the running loop (modelled time starts at 0)."""
        if self._task is not None:
            return
        self._work = asyncio.Event()
        self._clock.start()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        """Stop the scheduler; in-flight consumers get :class:`EngineStopped`."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        self._clock.stop()
        self._fail_all(self._dead or "engine stopped")

    # --- public API -------------------------------------------------------------------

    def modelled_now(self) -> float:
        """The modelled clock (see :mod:`autotune.sim.engine_clock`): wall time x scale,
        held inside the step being modelled; host CPU time is not modelled time."""
        return self._clock.now()

    async def generate(
        self, rid: str, input_len: int, max_new_tokens: int, ignore_eos: bool = True
    ) -> AsyncIterator[Chunk]:
        """Queue one request and yield its chunks until it finishes.

        The output always runs to ``max_new_tokens`` (``finish_reason`` "length"):
        the simulated model never samples an EOS, so ``ignore_eos`` changes nothing.
        Closing the iterator early aborts the request and frees its KV.
        """
        if self._dead or self._stopping or self._task is None:
            raise EngineStopped(f"request {rid}: {self._dead or 'engine is not running'}")
        if input_len < 1:
            raise ConfigError(f"input_len: must be >= 1, got {input_len}")
        now = self.modelled_now()
        req = Request(rid, int(input_len), max(int(max_new_tokens), 0), now, self._rng.randrange(TOKEN_ID_RANGE))
        self._records[rid] = req
        if req.max_new == 0:
            req.finish(now, "length")
            self.requests_served += 1
            yield Chunk([], now, True, "length")
            return
        if req.input_len + 1 > self.kv_tokens:
            req.finish(now, "abort")
            yield Chunk([], now, True, "abort")
            return
        self._waiting.append(req)
        self._clock.wake(now)
        if self._work is not None:
            self._work.set()
        try:
            while True:
                while req.chunks:
                    chunk = req.chunks.popleft()
                    yield chunk
                    if chunk.finished:
                        return
                if req.error is not None:
                    raise EngineStopped(f"request {rid}: {req.error}")
                req.waiter = asyncio.get_running_loop().create_future()
                await req.waiter
                req.waiter = None
        finally:
            if req.finish_s is None and req.error is None:
                self._abort(req)

    def stats(self) -> dict[str, Any]:
        """Ground truth for /sim/stats: counters and per-request modelled timestamps."""
        return {
            "tokens_emitted": self.tokens_emitted,
            "requests_served": self.requests_served,
            "requests": [r.record() for r in self._records.values()],
            "running": len(self._running) + (1 if self._chunked is not None else 0),
            "waiting": len(self._waiting),
            "retractions": self.retractions,
            "kv_tokens": self.kv_tokens,
            "kv_used": self._kv_used,
            "new_token_ratio": self._ratio,
            "steps": dict(self.steps),
            "dead": self._dead,
        }

    # --- the scheduler loop -----------------------------------------------------------

    async def _run(self) -> None:
        assert self._work is not None
        try:
            while not self._stopping:
                if not self._waiting and not self._running and self._chunked is None:
                    if await self._linger():
                        continue
                    self._clock.go_idle()
                    self._work.clear()
                    await self._work.wait()
                    self._clock.resume()
                    continue
                batch = self._plan_prefill()
                if batch:
                    await self._prefill_step(batch)
                elif self._running:
                    await self._decode_step()
                else:  # waiting requests that cannot be admitted while nothing runs
                    self._abort_unadmittable()
                if self._dead:
                    self._fail_all(self._dead)
                    return
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug: do not leave consumers hanging
            log.exception("simulated engine crashed")
            self._dead = "engine crashed"
            self._fail_all(self._dead)
            raise

    async def _linger(self) -> bool:
        """Out of work: give consumers a few loop turns to react at the same modelled instant.

        A closed-loop client sends its next request as soon as it reads the
        last chunk; that reaction is host CPU time, not modelled time, so it is
        stamped with the end of the last step instead of wall time x scale.
        Returns True when work arrived.
        """
        self._clock.hold()
        for _ in range(IDLE_GRACE_TURNS):
            await asyncio.sleep(0)
            if self._waiting:
                return True
        return False

    def _reserve(self, req: Request) -> float:
        return min(req.max_new - req.output, CLIP_MAX_NEW_TOKENS) * self._ratio

    def _plan_prefill(self) -> list[tuple[Request, int]]:
        """Pick (request, new tokens) pairs for the next prefill step, as SGLang's PrefillAdder."""
        if not self._waiting and self._chunked is None:
            return []
        budget = self.chunked_prefill_size
        rem = self.kv_tokens - self._kv_used - sum(self._reserve(r) for r in self._running)
        batch: list[tuple[Request, int]] = []
        chunked = self._chunked
        if chunked is not None:
            take = min(chunked.prefill_left, budget)
            batch.append((chunked, take))
            budget -= take
            rem -= take
        slots = self.max_running_requests - len(self._running) - (1 if chunked is not None else 0)
        while self._waiting and budget > 0 and slots > 0:
            req = self._waiting[0]
            if req.prefill_left + self._reserve(req) > rem:
                break
            self._waiting.popleft()
            take = min(req.prefill_left, budget)
            batch.append((req, take))
            budget -= take
            rem -= take + self._reserve(req)
            slots -= 1
            if take < req.prefill_left:
                break  # this request is now the chunked one
        return batch

    def _abort_unadmittable(self) -> None:
        """Nothing runs and the head of the queue still does not fit: SGLang would never serve it."""
        req = self._waiting.popleft()
        log.warning("request %s (%d input tokens) can never fit the KV pool of %d tokens; aborted",
                    req.rid, req.input_len, self.kv_tokens)
        req.finish(self._clock.t, "abort")
        req.push(Chunk([], self._clock.t, True, "abort"))

    async def _prefill_step(self, batch: list[tuple[Request, int]]) -> None:
        tokens = sum(take for _, take in batch)
        if self.prefill_oom_tokens is not None and tokens > self.prefill_oom_tokens:
            log.error("prefill batch of %d tokens exceeds the %d tokens that fit: runtime OOM",
                      tokens, self.prefill_oom_tokens)
            self._dead = f"Prefill out of memory ({tokens} tokens)"
            for req, _ in batch:
                req.fail(self._dead)
            if self.on_runtime_oom is not None:
                self.on_runtime_oom(tokens)
            return
        for req, take in batch:  # reserve KV before sleeping: admission is decided now
            req.prefilled += take
            req.kv += take
            self._kv_used += take
        self._chunked = None
        dt = self.perf.prefill_time_s(tokens, len(batch))
        self.steps["prefill"] += 1
        t_end = await self._clock.advance(dt)
        for req, _ in batch:
            if req.aborted:
                continue
            if req.prefill_left > 0:
                self._chunked = req
                continue
            self._running.append(req)
            self._emit(req, 1, t_end)

    async def _decode_step(self) -> None:
        need = len(self._running) * self._kv_per_decode
        retracted = False
        while self._kv_used + need > self.kv_tokens and len(self._running) > 1:
            self._retract_one()
            retracted = True
            need = len(self._running) * self._kv_per_decode
        if self._kv_used + len(self._running) > self.kv_tokens:  # a lone request filled the pool
            req = self._running.pop()
            self._free(req)
            req.finish(self._clock.t, "abort")
            req.push(Chunk([], self._clock.t, True, "abort"))
            return
        batch = list(self._running)
        context = self._kv_used
        dt = self.perf.decode_step_time_s(len(batch), context)
        self.steps["decode"] += 1
        if not retracted:  # SGLang decays the ratio only on steps without a retraction
            self._ratio = max(self._ratio - NEW_TOKEN_RATIO_DECAY, MIN_NEW_TOKEN_RATIO)
        t_end = await self._clock.advance(dt)
        free = self.kv_tokens - self._kv_used
        for req in batch:
            if req.aborted or req.finish_s is not None:
                continue
            n = self._sample_accepted() if self._spec else 1
            n = min(n, max(free, 1))
            free -= n
            self._emit(req, n, t_end)

    def _sample_accepted(self) -> int:
        n = 1
        rnd = self._rng.random
        while n <= self._spec_depth and rnd() < self._accept_p:
            n += 1
        return n

    def _emit(self, req: Request, n: int, t: float) -> None:
        """Give ``req`` up to ``n`` new tokens made at modelled time ``t``; stream and finish."""
        n = min(n, req.max_new - req.output)
        if n <= 0:
            return
        first = req.output == 0
        ids = req.take_ids(n)
        req.output += n
        req.kv += n
        self._kv_used += n
        self.tokens_emitted += n
        if first and req.first_token_s is None:
            req.first_token_s = t
        req.pending.extend(ids)
        done = req.output >= req.max_new
        if done:
            self._running.remove(req)
            self._free(req)
            req.finish(t, "length")
            self.requests_served += 1
            req.push(Chunk(req.pending, t, True, "length"))
            req.pending = []
        elif first or len(req.pending) >= self.stream_interval:
            req.push(Chunk(req.pending, t, False, None))
            req.pending = []

    def _retract_one(self) -> None:
        """Send the request with the fewest output tokens (longest input on ties) back to waiting."""
        victim = min(self._running, key=lambda r: (r.output, -r.input_len))
        self._running.remove(victim)
        self._free(victim)
        victim.prefilled = 0
        victim.prefill_target = victim.input_len + victim.output
        self._waiting.appendleft(victim)
        self.retractions += 1
        total_decoded = sum(r.output for r in self._running)
        total_max_new = sum(r.max_new for r in self._running) or 1
        self._ratio = min(1.0, (total_decoded + RETRACT_DECODE_STEPS * len(self._running)) / total_max_new)
        log.debug("retracted %s (output %d); new_token_ratio %.3f", victim.rid, victim.output, self._ratio)

    def _free(self, req: Request) -> None:
        self._kv_used -= req.kv
        req.kv = 0

    def _abort(self, req: Request) -> None:
        """The consumer went away: drop the request wherever it is and free its KV."""
        req.aborted = True
        if req in self._running:
            self._running.remove(req)
        elif self._chunked is req:
            self._chunked = None
        else:
            try:
                self._waiting.remove(req)
            except ValueError:
                pass
        self._free(req)
        req.finish(self._clock.t, "abort")

    def _fail_all(self, reason: str) -> None:
        for req in list(self._running) + list(self._waiting) + ([self._chunked] if self._chunked else []):
            req.fail(reason)
        self._running.clear()
        self._waiting.clear()
        self._chunked = None
