"""Continuous-batching token engine of the simulated SGLang server, in modelled time.

One asyncio task runs SGLang's scheduler loop in miniature. Each iteration is
either a **prefill** (extend) step or a **decode** step, and each step lasts the
modelled time :class:`autotune.sim.perf.model.PerfModel` gives it:

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
* A radix prefix cache (:mod:`autotune.sim.engine.cache`, off with
  ``--disable-radix-cache``) shares the KV pool with the running requests: a
  request submitted with its prompt's token ids is matched at admission, its hit
  is not prefilled (so TTFT and throughput gain exactly the modelled prefill
  cost), it reports ``cached_tokens``, and when it finishes its prompt + output
  enter the cache; least recently used unlocked entries are evicted when an
  allocation needs their room.
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

The same step function serves two drivers. The server starts the engine's asyncio
task (:meth:`Engine.start`) and consumes :meth:`Engine.generate`; the offline
evaluator never starts it and steps it synchronously in pure modelled time:
:meth:`Engine.submit` returns a :class:`RequestHandle`, :meth:`Engine.step_once`
runs one scheduler iteration (a :class:`StepResult`, or None when idle), and
:meth:`Engine.idle_until` lets the idle clock flow to the next arrival.

A prefill batch over ``prefill_oom_tokens`` tokens calls ``on_runtime_oom
(num_tokens)`` and stops the engine (the server prints SGLang's "Prefill out
of memory" and dies); pending consumers then get :class:`EngineStopped`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from autotune.errors import ConfigError
from autotune.sim.engine.api import Chunk, EngineStopped, StepResult
from autotune.sim.engine.clock import ModelledClock
from autotune.sim.engine.request import Request, RequestHandle
from autotune.sim.engine.scheduler import Scheduler, Step

__all__ = ["Chunk", "Engine", "EngineStopped", "RequestHandle", "StepResult"]

log = logging.getLogger("autotune.sim.engine")  # the engine's log lines, one logger for the engine (the scheduler's too)

IDLE_GRACE_TURNS = 3  # event-loop turns the engine waits for work before idling


class Engine:
    """SGLang-like continuous batching over a :class:`~autotune.sim.perf.model.PerfModel`."""

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
        radix_cache: bool = True,
    ) -> None:
        if not time_scale > 0:
            raise ConfigError(f"time_scale: must be > 0, got {time_scale}")
        self.time_scale = float(time_scale)
        self._clock = ModelledClock(self.time_scale)
        self._sched = Scheduler(
            perf, self._clock, kv_tokens=kv_tokens, max_running_requests=max_running_requests,
            chunked_prefill_size=chunked_prefill_size, seed=seed, prefill_oom_tokens=prefill_oom_tokens,
            on_runtime_oom=on_runtime_oom, stream_interval=stream_interval, radix_cache=radix_cache)
        sched = self._sched
        self.perf = perf
        self.kv_tokens = sched.kv_tokens
        self.max_running_requests = sched.max_running_requests
        self.chunked_prefill_size = sched.chunked_prefill_size
        self.prefill_oom_tokens = prefill_oom_tokens
        self.stream_interval = sched.stream_interval
        self._task: asyncio.Task[None] | None = None
        self._work: asyncio.Event | None = None
        self._stopping = False

    # --- lifecycle (the server's asyncio driver) --------------------------------------

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
        self._sched.fail_all(self._sched.dead or "engine stopped")

    def freeze(self) -> None:
        """The scheduler process died: no step runs again, and nobody is told (streams stall, and
        new requests are taken and never answered, as SGLang's front end does)."""
        if self._task is not None:
            self._task.cancel()

    # --- public API -------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """Nothing waits, runs or is half prefilled."""
        return self._sched.idle

    @property
    def dead(self) -> str | None:
        """Why the engine died (runtime OOM, crash), or None while it lives."""
        return self._sched.dead

    def modelled_now(self) -> float:
        """The modelled clock (see :mod:`autotune.sim.engine.clock`): wall time x scale,
        held inside the step being modelled; host CPU time is not modelled time.
        Stepped synchronously: the end of the last step (or :meth:`idle_until`)."""
        return self._clock.now()

    def submit(self, rid: str, input_len: int, max_new_tokens: int, ignore_eos: bool = True,
               keys: Sequence[int] | None = None, at: float | None = None) -> RequestHandle:
        """Queue one request at the current modelled time; returns its handle at once.

        ``at``: the request's modelled arrival when the engine is stepped synchronously and the client's
        send fell inside the step just modelled (never later than now; default now).
        ``keys`` are the prompt's token ids: with them the request is matched against the
        radix prefix cache (its hit is not prefilled; ``handle.cached_tokens``) and its
        prompt + output enter the cache when it finishes. Without them it does neither.

        A request with no output to make finishes at once ("length"); one whose input
        can never fit the KV pool is aborted at once ("abort"). ``ignore_eos`` changes
        nothing (see :meth:`generate`). Raises :class:`EngineStopped` on a dead or
        stopping engine, ConfigError for ``input_len`` < 1.
        """
        return self._submit(rid, input_len, max_new_tokens, keys, at).handle

    def _submit(self, rid: str, input_len: int, max_new_tokens: int, keys: Sequence[int] | None = None,
                at: float | None = None) -> Request:
        if self._sched.dead or self._stopping:
            raise EngineStopped(f"request {rid}: {self._sched.dead or 'engine is stopping'}")
        if input_len < 1:
            raise ConfigError(f"input_len: must be >= 1, got {input_len}")
        now = self.modelled_now() if at is None else min(at, self.modelled_now())
        if keys is not None and len(keys) != input_len:
            raise ConfigError(f"keys: {len(keys)} token ids for input_len {input_len}")
        req = self._sched.submit(rid, input_len, max_new_tokens, now, keys)
        if req.finish_s is None and self._task is not None:
            self._clock.wake(now)
            if self._work is not None:
                self._work.set()
        return req

    def step_once(self) -> StepResult | None:
        """One scheduler iteration in pure modelled time (no sleeping); None when idle.

        Only for an engine that was never started: the asyncio task runs this same
        step function itself. Raises :class:`EngineStopped` on a started engine.
        """
        if self._task is not None:
            raise EngineStopped("step_once: the engine's scheduler task is running (start() was called)")
        step = self._sched.begin_step()
        if step is None:
            return None
        t_end = self._clock.advance_instant(step.dt) if self._timed(step) else self._clock.t
        return self._sched.end_step(step, t_end)

    def idle_until(self, t: float) -> None:
        """Stepped synchronously and idle: the modelled clock flows on to ``t`` (never back)."""
        if self._task is not None or not self._sched.idle:
            raise EngineStopped("idle_until: only an idle engine stepped with step_once can skip time")
        self._clock.skip_to(t)

    def spec_accept_length(self) -> float | None:
        """SGLang's ``avg_spec_accept_length`` (:meth:`Scheduler.spec_accept_length`)."""
        return self._sched.spec_accept_length()

    def flush_cache(self) -> bool:
        """Empty the radix prefix cache (SGLang's ``/flush_cache``); False while requests run or wait."""
        return self._sched.flush_cache()

    def cached_tokens(self, rid: str) -> int:
        """Prompt tokens of request ``rid`` served from the prefix cache (0 when unknown)."""
        return self._sched.cached_tokens_of(rid)

    async def generate(
        self, rid: str, input_len: int, max_new_tokens: int, ignore_eos: bool = True,
        keys: Sequence[int] | None = None,
    ) -> AsyncIterator[Chunk]:
        """Queue one request and yield its chunks until it finishes (the started engine).

        The output always runs to ``max_new_tokens`` (``finish_reason`` "length"):
        the simulated model never samples an EOS, so ``ignore_eos`` changes nothing.
        Closing the iterator early aborts the request and frees its KV.
        """
        if self._sched.dead or self._stopping or self._task is None:
            raise EngineStopped(f"request {rid}: {self._sched.dead or 'engine is not running'}")
        req = self._submit(rid, input_len, max_new_tokens, keys)
        sent = offset = 0
        try:
            while True:
                times, counts = req.times, req.counts
                while sent < len(times):
                    n = counts[sent]
                    final = sent == len(times) - 1 and req.finish_reason == "length"
                    yield Chunk(req.token_ids(offset, n), times[sent], final, "length" if final else None)
                    sent += 1
                    offset += n
                    if final:
                        return
                if req.finish_s is not None:  # aborted, or nothing to generate
                    yield Chunk([], req.finish_s, True, req.finish_reason)
                    return
                if req.error is not None:
                    raise EngineStopped(f"request {rid}: {req.error}")
                req.waiter = asyncio.get_running_loop().create_future()
                await req.waiter
                req.waiter = None
        finally:
            if req.finish_s is None and req.error is None:
                self._sched.abort(req)

    def stats(self, requests: bool = True) -> dict[str, Any]:
        """Ground truth for /sim/stats: counters and (unless ``requests`` is False) per-request modelled timestamps."""
        return self._sched.stats(requests)

    # --- the scheduler loop (asyncio driver) ------------------------------------------

    def _timed(self, step: Step) -> bool:
        """Prefill and decode steps take modelled time, and so does waiting for a request still on its way to
        the scheduler; aborts and a fatal OOM do not."""
        return step.kind in ("prefill", "decode", "wait") and self._sched.dead is None

    async def _run(self) -> None:
        assert self._work is not None
        sched = self._sched
        try:
            while not self._stopping:
                step = sched.begin_step()
                if step is None:
                    if await self._linger():
                        continue
                    self._clock.go_idle()
                    self._work.clear()
                    await self._work.wait()
                    self._clock.resume()
                    continue
                t_end = await self._clock.advance(step.dt) if self._timed(step) else self._clock.t
                sched.end_step(step, t_end)
                if sched.dead:
                    return
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug: do not leave consumers hanging
            log.exception("simulated engine crashed")
            sched.dead = "engine crashed"
            sched.fail_all(sched.dead)
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
            if self._sched.waiting:
                return True
        return False
