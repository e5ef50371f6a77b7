"""The load generator: one asyncio loop, one pool of keep-alive connections.

Design (measured against SGLang's ``bench_serving`` and other load generators by
``benchmarks/loadgen_capacity.py`` and ``benchmarks/loadgen_keepup.py``): a single process and
thread; uvloop when installed; one :class:`~autotune.load.transport.http.StreamPool` allowing
exactly ``concurrency`` connections, pre-opened before the timed run, whose protocol
hands each read of a response body, with one timestamp, to the request's callback
(aiohttp's per-read machinery cost two thirds of the client's CPU per token; it still
carries the control requests); SSE split by hand and one orjson parse per event
(:mod:`autotune.load.transport.stream`); all statistics computed once at the end with numpy
(:mod:`autotune.load.metrics`). A watchdog enforces the first-token and between-token
timeouts for every in-flight request, so a hung or dead server never hangs a load point.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import numpy as np

from autotune.limits import MAX_SIM_FACTOR, MIN_TIME_SCALE
from autotune.load.metrics import RequestTrace, compute_metrics
from autotune.load.prompts import Prompt, arrival_offsets
from autotune.load.result import LoadPointFailed, LoadResult, Snapshot
from autotune.load.sources import (
    ConversationPlan,
    conversation_plans,
    counter_for,
    is_conversational,
    prompt_stream,
    turn_prompt,
)
from autotune.load.spec import LoadSpec
from autotune.load.transport.http import HttpError, OnData, Sent, StreamPool
from autotune.load.transport.stream import StreamParser

try:  # optional speed-up
    import orjson

    def _dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)

except ImportError:  # pragma: no cover - exercised only without orjson
    import json

    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj).encode()


log = logging.getLogger(__name__)

SnapshotCallback = Callable[[Snapshot], Any]
# An async probe of the simulated server's modelled clock: returns (wall perf_counter, modelled seconds).
ClockProbe = Callable[[], Awaitable[tuple[float, float] | None]]
_SCALE_DRIFT_WARN = 0.02
_LAG_PROBE_S = 0.05
_DRAIN_S = 1.0  # after [DONE], how long to wait for the end of the body
_DRAINED = "drained"
_END_S = 5.0  # how long a cancelled task of a load point may take to end before its connection is aborted
_MAX_PREOPEN = 1024
_OPEN_LOOP_PREOPEN = 256  # connections opened ahead for an open loop without a concurrency cap
# A scheduled send sleeps until this long before its time and spins the rest: the loop's timers
# have 1 ms resolution (uvloop) and fire only between two turns of reading streams.
_SPIN_S = 0.001
_MAX_HOLD_S = 0.002  # ... but never holds the loop longer than this (a high rate) without a turn


class _InFlight:
    """Watchdog view of one running request."""

    __slots__ = ("start", "last", "first", "done", "reason", "task")

    def __init__(self, start: float, task: asyncio.Task[Any] | None) -> None:
        self.start = start
        self.last = start
        self.first = False
        self.done = False  # [DONE] seen; only the end of the body is awaited
        self.reason: str | None = None
        self.task = task


class LoadRunner:
    """Runs one load point against ``base_url``. Use :func:`autotune.load.run_load_async`."""

    def __init__(self, base_url: str, spec: LoadSpec, model: str | None, stream_pool: StreamPool | None = None) -> None:
        self.stream_pool = stream_pool or StreamPool(base_url, limit=spec.concurrency or 0)
        self.base = base_url
        self.spec = spec
        self.url = base_url + spec.endpoint
        self.model = model
        self.time_scale = 1.0
        self.inflight: dict[asyncio.Task[Any], _InFlight] = {}
        self.traces: list[RequestTrace] = []
        self.streamed_tokens = 0
        self.consecutive_failures = 0
        self.abort_reason: str | None = None
        self.stopped_early = False
        self._wake = asyncio.Event()
        # When the server last sent anything on any stream: a server silent on every stream
        # for between_tokens_s is hung (SIGSTOP, deadlock), and the load point ends then,
        # not after first_token_s for each queued request in turn.
        self.last_data = time.perf_counter()

    # ---- one request -------------------------------------------------------------------
    def _payload(self, p: Prompt) -> bytes:
        s = self.spec
        if s.backend == "sglang":
            body: dict[str, Any] = {
                "sampling_params": {"max_new_tokens": p.output_len, "temperature": 0.0, "ignore_eos": s.ignore_eos},
                "stream": True,
            }
            if p.input_ids is not None:
                body["input_ids"] = p.input_ids
            else:
                body["text"] = p.text
            return _dumps(body)
        body = {
            "model": self.model,
            "max_tokens": p.output_len,
            "temperature": 0.0,
            "stream": True,
            "ignore_eos": s.ignore_eos,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if s.backend == "openai-chat":
            body["messages"] = p.messages or [{"role": "user", "content": p.text}]
        else:
            body["prompt"] = p.input_ids if p.input_ids is not None else p.text
        return _dumps(body)

    def _prepare(self, p: Prompt, st: _InFlight, due: float | None) -> tuple[StreamParser, RequestTrace, OnData]:
        """The parser, the trace and the read callback of one request."""
        parser = StreamParser(self.spec.backend, keep_output=p.conversation is not None, max_tokens=p.output_len)
        trace = RequestTrace(start=st.start, input_len=p.input_len, output_len=p.output_len, due=due,
                             group=p.group, conversation=p.conversation, turn=p.turn)
        times, counts = trace.times, trace.counts

        def on_data(data: bytes, now: float) -> bool:
            self.last_data = now
            if st.done:  # bytes after [DONE]: not read; the drain counts from [DONE], so they cannot hold it open
                return False
            k = parser.feed(data)
            if k:
                # only tokens keep a request alive: a server that trickles comments, blank events or
                # a never-ending line after the first token met the between-tokens timeout never
                st.last = now
                times.append(now)
                counts.append(k)
                st.first = True
                self.streamed_tokens += k
            if parser.done:
                st.last = now
                trace.end = now
                st.done = True
                return False
            return parser.error is not None  # stop reading a malformed stream

        return parser, trace, on_data

    async def _request(self, p: Prompt, body: bytes, st: _InFlight,
                       prep: tuple[StreamParser, RequestTrace, OnData], sent: Sent | None) -> RequestTrace:
        parser, trace, on_data = prep
        keep = p.conversation is not None
        clock = time.perf_counter
        times = trace.times
        if sent is None:  # like bench_serving: the clock starts as the request is sent
            st.start = st.last = trace.start = clock()
        try:
            total = self.spec.timeouts.total_s
            async with asyncio.timeout(total if total else None):
                status, error_body = await self.stream_pool.post_stream(self.spec.endpoint, body, on_data, sent)
            if status != 200:
                text = error_body.decode("utf-8", "replace")[:200].replace("\n", " ")
                trace.error = f"HTTP {status}: {text}"
            trace.end = trace.end or clock()
            if trace.error is None:
                if parser.error:
                    trace.error = parser.error
                elif not parser.done:
                    trace.error = "stream ended before [DONE]"
                elif not times:
                    trace.error = "no tokens: the stream carried no output"
        except asyncio.CancelledError:
            if st.reason is None:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            if st.reason != _DRAINED:
                trace.end = clock()
                trace.error = st.reason
        except TimeoutError:
            trace.end = clock()
            trace.error = f"total timeout: not finished within {self.spec.timeouts.total_s:g} s"
        except HttpError as exc:
            trace.end = clock()
            if exc.connect:
                trace.error = f"connection failed: {exc}"
                self.abort_reason = self.abort_reason or f"server {self.url} refused connections ({exc})"
            else:
                trace.error = str(exc)[:200] or "connection broken"
        trace.prompt_tokens = parser.prompt_tokens
        if trace.prompt_tokens is None and p.input_ids is not None:
            trace.prompt_tokens = len(p.input_ids)  # the ids we sent are exact
        trace.completion_tokens = parser.completion_tokens
        trace.tokens_from_server = parser.tokens_from_server
        trace.cached_tokens = parser.cached_tokens
        if keep and trace.error is None:
            ids, text = parser.output()
            trace.reply = ids if p.input_ids is not None and ids is not None else text
        return trace

    def _start(self, p: Prompt, sem: asyncio.Semaphore | None, sink: list[RequestTrace],
               due: float | None = None) -> asyncio.Task[Any]:
        body = self._payload(p)
        st = _InFlight(time.perf_counter(), None)
        prep = self._prepare(p, st, due)
        # written now when a connection is idle (the send time is exact), else by the task
        sent = self.stream_pool.send_now(self.spec.endpoint, body, prep[2])
        if sent is not None:
            st.start = st.last = prep[1].start = time.perf_counter()
        task = asyncio.get_running_loop().create_task(self._request(p, body, st, prep, sent))
        st.task = task
        self.inflight[task] = st

        def done(t: asyncio.Task[Any]) -> None:
            self.inflight.pop(t, None)
            if sem is not None:
                sem.release()
            if t.cancelled():
                self._wake.set()
                return
            exc = t.exception()
            if exc is not None:  # a bug in the client, not a failed request: end the load point loudly
                log.error("load generator request task crashed", exc_info=exc)
                self.abort_reason = self.abort_reason or f"load generator bug: {exc!r}"
                self._wake.set()
                return
            trace: RequestTrace = t.result()
            sink.append(trace)
            if trace.ok:
                self.consecutive_failures = 0
            else:
                self.consecutive_failures += 1
                if self.consecutive_failures >= self.spec.abort_after_consecutive_failures:
                    self.abort_reason = self.abort_reason or (
                        f"{self.consecutive_failures} requests failed in a row, last: {trace.error}"
                    )
            if self.abort_reason or not self.inflight:
                self._wake.set()

        task.add_done_callback(done)
        return task

    # ---- background helpers ------------------------------------------------------------
    async def _watchdog(self) -> None:
        t = self.spec.timeouts
        first_s, between_s = t.first_token_s, t.between_tokens_s
        limits = [v for v in (first_s, between_s) if v]
        period = max(min([*(v / 4 for v in limits), _DRAIN_S / 4]), 0.01)
        while True:
            await asyncio.sleep(period)
            now = time.perf_counter()
            for st in list(self.inflight.values()):
                if st.reason is not None:
                    continue
                if st.done:  # finished stream whose body does not end: stop waiting for it
                    if now - st.last > _DRAIN_S:
                        st.reason = _DRAINED
                elif not st.first and first_s and now - st.start > first_s:
                    st.reason = f"first-token timeout: no token within {first_s:g} s"
                elif st.first and between_s and now - st.last > between_s:
                    st.reason = f"between-tokens timeout: no token for {between_s:g} s"
                if st.reason is not None and st.task is not None:
                    st.task.cancel()
            if between_s and self.inflight and self.abort_reason is None and now - self.last_data > between_s:
                self.abort_reason = (f"server stalled: no data on any of {len(self.inflight)} streams "
                                     f"for {between_s:g} s")
                for st in list(self.inflight.values()):
                    if st.reason is None and st.task is not None:
                        st.reason = self.abort_reason
                        st.task.cancel()
                self._wake.set()

    async def _lag_probe(self, lags: list[float]) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(_LAG_PROBE_S)
            lags.append(max(time.perf_counter() - t - _LAG_PROBE_S, 0.0))

    async def _snapshots(
        self,
        t0: float,
        on_snapshot: SnapshotCallback,
        clock: ClockProbe | None,
        clock_start: tuple[float, float] | None,
    ) -> None:
        x = self.time_scale
        while True:
            await asyncio.sleep(self.spec.snapshot_interval_s)
            if clock is not None and clock_start is not None:  # the simulator's real pace so far
                now_clock = await clock()
                if now_clock is not None and now_clock[0] - clock_start[0] > 0 and now_clock[1] > clock_start[1]:
                    pace = (now_clock[1] - clock_start[1]) / (now_clock[0] - clock_start[0])
                    x = pace if MIN_TIME_SCALE <= pace <= MAX_SIM_FACTOR else x
            elapsed = (time.perf_counter() - t0) * x
            ok = [tr for tr in self.traces if tr.ok]
            ttfts = [(tr.times[0] - tr.start) * 1000 * x for tr in ok if tr.times]
            snap = Snapshot(
                elapsed_s=elapsed,
                completed=len(ok),
                failed=len(self.traces) - len(ok),
                in_flight=len(self.inflight),
                output_tokens=self.streamed_tokens,
                output_throughput=self.streamed_tokens / elapsed if elapsed > 0 else 0.0,
                request_throughput=len(ok) / elapsed if elapsed > 0 else 0.0,
                mean_ttft_ms=sum(ttfts) / len(ttfts) if ttfts else None,
            )
            verdict = on_snapshot(snap)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if verdict is False:
                log.info("load point stopped early by its snapshot callback at %.1f s", elapsed)
                self.stopped_early = True
                self._wake.set()
                return

    async def _end_tasks(self, tasks: list[asyncio.Task[Any]]) -> None:
        """Cancel ``tasks`` and wait for them, boundedly: a request that outlives its cancel (a
        lost cancel, a reply that never comes) has its connection aborted, which ends it."""
        for task in tasks:
            task.cancel()
        left = {t for t in tasks if not t.done()}
        if left:
            _, left = await asyncio.wait(left, timeout=_END_S)
        if left:
            log.warning("%d task(s) of the load point still ran %g s after their cancel: aborting the "
                        "connections", len(left), _END_S)
            self.stream_pool.close()  # a request waiting for its reply ends with HttpError
            _, left = await asyncio.wait(left, timeout=_END_S)
        if left:
            log.error("%d task(s) of the load point did not end; left to the event loop's close", len(left))
        for task in tasks:  # retrieved here: the caller reads the dispatcher's, the others are ended runs
            if task.done() and not task.cancelled():
                task.exception()

    # ---- phases --------------------------------------------------------------------
    async def warmup(self) -> None:
        """Send the warm-up requests (excluded from metrics); fail clearly if all of them fail."""
        n = self.spec.warmup_requests
        if n <= 0:
            return
        prompts = prompt_stream(self.spec, warmup=True)
        self.last_data = time.perf_counter()
        sink: list[RequestTrace] = []
        conc = min(n, self.spec.concurrency or n)
        sem = asyncio.Semaphore(conc)
        tasks = []
        for _, p in zip(range(n), prompts, strict=False):  # prompts may be endless
            await sem.acquire()
            tasks.append(self._start(p, sem, sink))
        await asyncio.gather(*tasks, return_exceptions=True)
        self.abort_reason = None  # judged below, on all of them
        self.consecutive_failures = 0
        bad = [t for t in sink if not t.ok]
        if len(bad) == len(sink):
            raise LoadPointFailed(f"warm-up failed: all {n} warm-up requests failed, first: {bad[0].error}")
        log.debug("warm-up: %d requests, %d failed", n, len(bad))

    async def preopen(self) -> None:
        """Open ``concurrency`` keep-alive connections so the timed run does not pay for them."""
        n = min(self.spec.concurrency or _OPEN_LOOP_PREOPEN, self.spec.num_prompts or _MAX_PREOPEN, _MAX_PREOPEN)
        if n <= 1:
            return
        await self.stream_pool.preopen(n)

    async def measure(self, on_snapshot: SnapshotCallback | None, clock: ClockProbe | None = None) -> LoadResult:
        """Run the timed part of the load point and compute its metrics.

        ``clock`` reads the simulated server's modelled clock; when given, the
        wall-to-modelled factor is measured over the run (it falls below the nominal
        time scale when the simulator cannot keep up on a busy host) and used instead.
        """
        s = self.spec
        x = self.time_scale
        clock_start = await clock() if clock is not None else None
        sem = asyncio.Semaphore(s.concurrency) if s.concurrency else None
        rng = np.random.default_rng(s.seed + 104729)
        arrivals = arrival_offsets(s.request_rate, s.num_prompts, rng)
        prompts: Iterator[Prompt] = prompt_stream(s)
        lags: list[float] = []
        loop = asyncio.get_running_loop()
        self.streamed_tokens = 0  # warm-up tokens do not count
        read_lags = self.stream_pool.read_lags
        read_lags.clear()
        gc_on = gc.isenabled()
        gc.disable()  # its pauses (up to ~30 ms for a full collection) would delay sends and reads
        t0 = self.last_data = time.perf_counter()
        cpu0 = time.thread_time()
        deadline = t0 + s.duration_s / x if s.duration_s else math.inf
        helpers = [loop.create_task(self._lag_probe(lags))]
        if on_snapshot is not None:
            helpers.append(loop.create_task(self._snapshots(t0, on_snapshot, clock, clock_start)))
        for h in helpers:
            h.add_done_callback(lambda _t: self._wake.set())
        if is_conversational(s):
            dispatcher = loop.create_task(self._dispatch_conversations(arrivals, sem, t0, deadline))
        else:
            dispatcher = loop.create_task(self._dispatch(prompts, arrivals, sem, t0, deadline))
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                if self.abort_reason or self.stopped_early:
                    break
                if dispatcher.done() and not self.inflight:
                    break
                for h in helpers:  # a failing snapshot callback ends the run with its error
                    if h.done() and not h.cancelled() and h.exception() is not None:
                        raise h.exception()  # type: ignore[misc]
        finally:
            t_end = time.perf_counter()
            cpu = time.thread_time() - cpu0
            if gc_on:
                gc.enable()
            await self._end_tasks([dispatcher, *helpers, *self.inflight])
        if dispatcher.done() and not dispatcher.cancelled() and dispatcher.exception() is not None:
            raise dispatcher.exception()  # type: ignore[misc]
        ends = [tr.end for tr in self.traces if tr.ok]
        if not self.stopped_early and not self.abort_reason and ends:
            t_end = max(ends)  # bench_serving: first dispatch to last completion
        if self.traces:  # the clock starts with the first request actually sent
            t0 = min(tr.start for tr in self.traces)
        nominal = x
        clock_end = await clock() if clock is not None else None
        if clock_start is not None and clock_end is not None and t_end > t0:
            # modelled span of the run: the probes' span less the idle edges, which the
            # simulator lets flow at its nominal scale
            (w0, m0), (w1, m1) = clock_start, clock_end
            span = (m1 - m0) - max(t0 - w0, 0.0) * nominal - max(w1 - t_end, 0.0) * nominal
            x = span / (t_end - t0) if span > 0 else nominal
            if not MIN_TIME_SCALE <= x <= MAX_SIM_FACTOR:  # no simulator runs at that pace: its clock is wrong
                log.warning("the server's modelled clock gave %.3g modelled s per wall s: ignored", x)
                x = nominal
            if abs(x / nominal - 1) > _SCALE_DRIFT_WARN:
                log.warning(
                    "the simulated server ran at %.3g modelled s per wall s, not its nominal %.3g "
                    "(host too slow for that time scale); figures use its modelled clock",
                    x,
                    nominal,
                )
        metrics, records = compute_metrics(
            self.traces, t0=t0, duration_wall=t_end - t0, time_scale=x, client_cpu_s=cpu, loop_lags_s=lags,
            goodput_slo=s.goodput_slo, read_lags_s=read_lags,
        )
        note = counter_for(s.tokenizer).note
        uses_text = s.backend != "sglang" or (s.dataset is not None and s.dataset.kind in ("sharegpt", "file"))
        metrics["dataset_name"] = s.dataset.kind if s.dataset is not None else (
            "custom" if s.dataset_path else "random-ids")
        metrics["token_count_note"] = note if uses_text else None
        metrics["stopped_early"] = self.stopped_early
        metrics["time_scale"] = x
        metrics["time_scale_nominal"] = nominal
        result = LoadResult(metrics=metrics, records=records, time_scale=x, stopped_early=self.stopped_early)
        if self.abort_reason:
            raise LoadPointFailed(
                f"load point failed after {metrics['completed']} completed requests: {self.abort_reason}",
                result=result,
            )
        if metrics["completed"] == 0 and not self.stopped_early:
            kinds = ", ".join(f"{k} x{v}" for k, v in metrics["errors"].items()) or "no requests sent"
            raise LoadPointFailed(f"load point failed: no request completed ({kinds})", result=result)
        if metrics["client_bound"]:
            log.warning(
                "the load generator may have been the bottleneck: %.0f%% of a core, loop lag p99 %.1f ms",
                100 * metrics["client_cpu_share"],
                metrics["event_loop_lag_p99_ms"],
            )
        return result

    async def _dispatch(
        self,
        prompts: Iterator[Prompt],
        arrivals: Iterator[float],
        sem: asyncio.Semaphore | None,
        t0: float,
        deadline: float,
    ) -> None:
        s = self.spec
        x = self.time_scale
        limit = s.num_prompts if s.num_prompts is not None else None
        sent = 0
        clock = time.perf_counter
        # send lateness is the client's own only in an open loop with a schedule (Poisson or a trace)
        scheduled = not math.isinf(s.request_rate) or (s.dataset is not None and s.dataset.kind == "trace")
        timed = sem is None and scheduled
        held = clock()  # when the dispatcher last let the loop run other callbacks
        try:
            for p, offset in zip(prompts, arrivals, strict=False):  # either may be endless
                if limit is not None and sent >= limit:
                    break
                due = t0 + (p.at_s if p.at_s is not None else offset) / x
                if due >= deadline or self.abort_reason:
                    break
                delay = due - clock()
                if delay > 0:
                    if timed:  # wake a little early, then wait out the rest without yielding
                        if delay > _SPIN_S:
                            await asyncio.sleep(delay - _SPIN_S)
                            held = clock()
                        elif clock() - held > _MAX_HOLD_S:  # sends close together: let the streams be read
                            await asyncio.sleep(0)
                            held = clock()
                        while clock() < due:
                            pass
                    else:
                        await asyncio.sleep(delay)
                if sem is not None:
                    await sem.acquire()
                if clock() >= deadline or self.abort_reason:
                    if sem is not None:
                        sem.release()
                    break
                self._start(p, sem, self.traces, due if timed else None)
                sent += 1
                if delay <= 0 and (not timed or clock() - held > _MAX_HOLD_S):
                    await asyncio.sleep(0)  # in a burst, let streams already sending be read between sends
                    held = clock()
        finally:
            self._wake.set()
        log.debug("dispatched %d requests", sent)

    async def _dispatch_conversations(
        self, arrivals: Iterator[float], sem: asyncio.Semaphore | None, t0: float, deadline: float
    ) -> None:
        """Conversations: each starts at its arrival (and holds a concurrency slot while it lasts);
        each turn is sent ``think_time_s`` after the previous reply, with the whole history."""
        s = self.spec
        x = self.time_scale
        clock = time.perf_counter
        plans = conversation_plans(s)
        tasks: list[asyncio.Task[Any]] = []

        async def converse(plan: ConversationPlan) -> None:
            try:
                for turn in range(len(plan.users)):
                    if clock() >= deadline or self.abort_reason or self.stopped_early:
                        return
                    task = self._start(turn_prompt(s, plan, turn), None, self.traces)
                    trace: RequestTrace = await asyncio.shield(task)
                    if not trace.ok:
                        return  # the rest of a conversation depends on this reply
                    plan.replies.append(trace.reply if trace.reply is not None else "")
                    if plan.think_time_s and turn + 1 < len(plan.users):
                        await asyncio.sleep(plan.think_time_s / x)
            finally:
                if sem is not None:
                    sem.release()

        try:
            for plan, offset in zip(plans, arrivals, strict=False):  # arrivals may be endless
                due = t0 + offset / x
                if due >= deadline or self.abort_reason:
                    break
                delay = due - clock()
                if delay > 0:
                    await asyncio.sleep(delay)
                if sem is not None:
                    await sem.acquire()
                tasks.append(asyncio.get_running_loop().create_task(converse(plan)))
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            self._wake.set()
