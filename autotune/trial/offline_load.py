"""The load generator against the simulated engine, in pure modelled time (private to
:mod:`autotune.trial.offline`).

The simulated server's :class:`~autotune.sim.engine.core.Engine` is never started: it is
stepped through its public stepping API (:meth:`~autotune.sim.engine.core.Engine.submit`,
:meth:`~autotune.sim.engine.core.Engine.step_once`, :meth:`~autotune.sim.engine.core.Engine.idle_until`),
which runs the very step function the server's asyncio task runs, in pure modelled
time. The scheduling, the KV accounting, retraction, speculative acceptance and the
runtime OOM are the engine's own code; only the consumers differ. Each step reports
the requests that ended in it, so the client never scans what is still in flight.

The client side mirrors :mod:`autotune.load`: the same seeded prompts
(:func:`~autotune.load.prompts.prompt_stream`), the same arrival offsets, the
warm-up requests first (excluded), a closed loop of ``concurrency`` slots (the next
request is sent the instant a slot frees, as the real client does within the same
modelled instant), and the metrics computed by the load generator's own
:func:`~autotune.load.metrics.compute_metrics` over per-request traces stamped in
modelled seconds (time scale 1).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.load.metrics import RequestTrace, compute_metrics
from autotune.load.prompts import Prompt, arrival_offsets
from autotune.load.sources import is_conversational, prompt_stream
from autotune.load.spec import LoadSpec
from autotune.sim.engine.core import Engine, RequestHandle
from autotune.sim.tokenizer import WordTokenizer

log = logging.getLogger(__name__)

_TOKENIZER = WordTokenizer()


@dataclass
class PointOutcome:
    """One load point: bench_serving metrics (or why it failed) and its modelled span."""

    metrics: dict[str, Any] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    duration_s: float = 0.0  # modelled seconds the point held the server (warm-up included)
    error: str | None = None  # the load generator's LoadPointFailed message
    died: bool = False  # the engine died (runtime OOM)


@dataclass
class _Sent:
    prompt: Prompt
    req: RequestHandle | None
    trace: RequestTrace


def _input_keys(prompt: Prompt, backend: str) -> list[int]:
    """Prompt token ids as the simulated server reads them (its stand-in tokenizer): the prefix cache's key."""
    if prompt.input_ids is not None:
        return prompt.input_ids
    text = prompt.text or ""
    if backend == "openai-chat":
        return _TOKENIZER.encode_messages(prompt.messages or [{"role": "user", "content": text}])
    return _TOKENIZER.encode(text)


class _Client:
    """Sends prompts into the engine, steps it, and turns ended requests into load-generator traces."""

    def __init__(self, engine: Engine, spec: LoadSpec, context_len: int, max_req_input_len: int) -> None:
        self.engine = engine
        self.spec = spec
        self.context_len = context_len
        self.max_req_input_len = max_req_input_len
        self.live: dict[int, _Sent] = {}  # by submission order
        self.ended: list[_Sent] = []  # ended since the last collect()

    def send(self, prompt: Prompt, at: float | None = None) -> _Sent:
        """Send ``prompt`` at modelled time ``at`` (default now; never later than now): an arrival that fell
        inside the step just modelled is stamped with its own time, as the live client's would be."""
        now = self.engine.modelled_now() if at is None else min(at, self.engine.modelled_now())
        keys = _input_keys(prompt, self.spec.backend)
        n_in = len(keys)
        trace = RequestTrace(start=now, input_len=prompt.input_len, output_len=prompt.output_len,
                             group=prompt.group, conversation=prompt.conversation, turn=prompt.turn)
        if n_in < 1 or n_in > self.max_req_input_len:  # the server answers 400
            trace.end = now
            trace.error = f"HTTP 400: input of {n_in} tokens refused"
            return _Sent(prompt, None, trace)
        max_new = min(prompt.output_len, self.context_len - n_in)
        handle = self.engine.submit(f"offline-{next(_RIDS)}", n_in, max_new, keys=keys, at=now)
        sent = _Sent(prompt, handle, trace)
        if handle.done:  # nothing to generate, or an input the pool can never hold
            self.ended.append(sent)
        else:
            self.live[handle.seq] = sent
        return sent

    def step(self) -> None:
        """One engine iteration; the requests it ended move from ``live`` to ``ended``."""
        result = self.engine.step_once()
        if result is None:
            return
        for handle in result.ended:
            sent = self.live.pop(handle.seq, None)
            if sent is not None:
                self.ended.append(sent)

    def collect(self) -> list[_Sent]:
        """Requests that ended (finished, aborted or failed) since the last call, in finish order."""
        done = self.ended
        if not done:
            return done
        self.ended = []
        done.sort(key=_finish_order)
        for s in done:
            _fill_trace(s)
        return done


_RIDS = itertools.count()


def _finish_order(sent: _Sent) -> tuple[float, int]:
    req = sent.req
    assert req is not None
    return (req.finish_s if req.finish_s is not None else math.inf, req.seq)


def _fill_trace(sent: _Sent) -> None:
    req, trace = sent.req, sent.trace
    assert req is not None
    trace.times = req.chunk_times
    trace.counts = req.chunk_counts
    trace.end = req.finish_s if req.finish_s is not None else (trace.times[-1] if trace.times else trace.start)
    trace.prompt_tokens = req.input_len
    trace.completion_tokens = req.output_tokens
    trace.cached_tokens = req.cached_tokens
    if req.error is not None:
        trace.error = f"ClientPayloadError: the server closed the stream ({req.error})"
    elif req.finish_reason == "abort":
        trace.error = "stream ended before [DONE]" if req.output_tokens else "no tokens: the stream carried no output"
    elif not trace.times:
        trace.error = "no tokens: the stream carried no output"


def _run_until_drained(engine: Engine, client: _Client, on_done: Any) -> None:
    """Step the engine until nothing is in flight, calling ``on_done(sent)`` for each ended request."""
    while True:
        for s in client.collect():
            on_done(s)
        if engine.dead or not client.live:
            return
        if engine.idle:  # every live request is queued elsewhere: cannot happen, but never spin
            return
        client.step()


def run_point(engine: Engine, spec: LoadSpec, *, context_len: int, max_req_input_len: int) -> PointOutcome:
    """One load point: warm-up, then the timed closed loop (or Poisson arrivals), then metrics."""
    out = PointOutcome()
    if is_conversational(spec):  # each turn waits for the previous reply: only the live client models that
        out.error = (f"workload kind {spec.dataset.kind if spec.dataset else '?'} with turns is not modelled "
                     "offline: run it against the simulated server (server.backend: sim)")
        return out
    client = _Client(engine, spec, context_len, max_req_input_len)
    t_start = engine.modelled_now()
    # -- warm-up: excluded from the metrics, but it runs through the engine (its state carries on)
    n_warm = spec.warmup_requests
    if n_warm > 0:
        warm = list(itertools.islice(prompt_stream(spec, warmup=True), n_warm))
        conc = min(n_warm, spec.concurrency or n_warm)
        queue = iter(warm)
        ended: list[_Sent] = []

        def send_next() -> None:  # a refused request frees its slot at once, as with the real client
            for p in queue:
                sent = client.send(p)
                if sent.req is not None:
                    return
                ended.append(sent)

        def warm_done(s: _Sent) -> None:
            ended.append(s)
            if not engine.dead:
                send_next()

        for _ in range(conc):
            send_next()
        _run_until_drained(engine, client, warm_done)
        if engine.dead:
            out.died = True
        if ended and all(s.trace.error for s in ended):
            out.error = f"warm-up failed: all {n_warm} warm-up requests failed, first: {ended[0].trace.error}"
        if out.error or out.died:
            out.duration_s = engine.modelled_now() - t_start
            out.error = out.error or "warm-up failed: the server died"
            return out
    if spec.flush_cache:  # as the live load generator does after its warm-up
        engine.flush_cache()
    _measure(engine, client, spec, out)
    out.duration_s = engine.modelled_now() - t_start
    return out


def _measure(engine: Engine, client: _Client, spec: LoadSpec, out: PointOutcome) -> None:
    rng = np.random.default_rng(spec.seed + 104729)
    offsets = arrival_offsets(spec.request_rate, spec.num_prompts, rng)
    prompts = prompt_stream(spec)
    limit = spec.num_prompts
    slots = spec.concurrency or math.inf
    t0 = engine.modelled_now()
    deadline = t0 + spec.duration_s if spec.duration_s else math.inf
    traces: list[RequestTrace] = []
    due: list[tuple[float, int, Prompt]] = []  # arrivals not yet sent (waiting for their time or a slot)
    sent = 0
    in_flight = 0
    order = itertools.count()
    source = zip(prompts, offsets, strict=False)  # offsets may outnumber a finite dataset
    exhausted = False

    def refill() -> None:
        nonlocal exhausted
        while not exhausted and len(due) < 1 and (limit is None or sent + len(due) < limit):
            nxt = next(source, None)
            if nxt is None:
                exhausted = True
                return
            at = nxt[0].at_s if nxt[0].at_s is not None else nxt[1]  # a trace's own send time
            heapq.heappush(due, (t0 + at, next(order), nxt[0]))

    checked = [t0]  # when dispatch last ran: a slot free then stayed free until now

    def dispatch() -> None:
        nonlocal sent, in_flight, exhausted
        free_since = checked[0]
        checked[0] = engine.modelled_now()
        while True:
            refill()
            if not due or in_flight >= slots or (limit is not None and sent >= limit):
                return
            when = due[0][0]
            if when >= deadline or engine.modelled_now() >= deadline:  # the load generator stops dispatching
                due.clear()
                exhausted = True
                return
            if when > engine.modelled_now():
                return
            _, _, p = heapq.heappop(due)
            # due while a slot was free: it went out at its own time; due earlier, it waited for the slot
            s = client.send(p, when if when > free_since else None)
            sent += 1
            if s.req is None:
                traces.append(s.trace)
            else:
                in_flight += 1

    dispatch()
    while True:
        for s in client.collect():
            traces.append(s.trace)
            in_flight -= 1
        if engine.dead:
            out.died = True
            break
        dispatch()
        if not client.live and not due:
            refill()
            if not due:
                break
        if engine.idle:
            if due and in_flight < slots:
                if due[0][0] >= deadline:
                    break
                engine.idle_until(due[0][0])
                dispatch()
                continue
            if not client.live:
                break
        client.step()
    for s in client.live.values():  # the engine died under them
        _fill_trace(s)
        traces.append(s.trace)
    client.live.clear()
    ok_ends = [t.end for t in traces if t.ok]
    start = min((t.start for t in traces), default=t0)
    end = max(ok_ends) if ok_ends and not out.died else engine.modelled_now()
    metrics, records = compute_metrics(traces, t0=start, duration_wall=max(end - start, 0.0), time_scale=1.0,
                                       client_cpu_s=0.0, loop_lags_s=[])
    metrics["accept_length"] = engine.spec_accept_length()
    metrics["stopped_early"] = False
    metrics["time_scale"] = 1.0
    metrics["time_scale_nominal"] = 1.0
    out.metrics, out.records = metrics, records
    if out.died:
        out.error = (f"load point failed after {metrics['completed']} completed requests: "
                     "the server closed the connection (it died)")
    elif metrics["completed"] == 0:
        kinds = ", ".join(f"{k} x{v}" for k, v in metrics["errors"].items()) or "no requests sent"
        out.error = f"load point failed: no request completed ({kinds})"


__all__ = ["PointOutcome", "run_point"]
