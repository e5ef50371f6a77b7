"""The simulated engine's scheduler: SGLang's continuous batching as a synchronous state machine
(private to :mod:`autotune.sim.engine.core`, which documents the policy).

Every scheduler iteration has two halves, so that one implementation serves both of the
engine's drivers (the asyncio task that sleeps the step's wall share in between, and
:meth:`Engine.step_once <autotune.sim.engine.core.Engine.step_once>` that does not):
:meth:`Scheduler.begin_step` decides the step (admission, KV reserved, retraction,
the step's modelled duration) and :meth:`Scheduler.end_step` emits its tokens at the
step's modelled end. Modelled timestamps of aborts and arrivals are read from the
shared clock's ``t``.

Per-token cost matters (the exhaustive offline pass runs ~1,800 candidates of
hundreds of requests x hundreds of tokens): the decode step inlines the common case,
and a streamed chunk is two list appends on the request (no ids, no objects).
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Callable
from typing import Any

from autotune.errors import ConfigError
from autotune.sim.engine.api import StepResult
from autotune.sim.engine.cache import RadixCache
from autotune.sim.engine.clock import ModelledClock
from autotune.sim.engine.request import TOKEN_ID_RANGE, Request
from autotune.sim.perf.knobs import CACHE_AWARE_POLICIES

log = logging.getLogger("autotune.sim.engine")  # the engine's log lines, one logger for the engine

INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = 0.1
NEW_TOKEN_RATIO_DECAY = 0.001
CLIP_MAX_NEW_TOKENS = 4096
RETRACT_DECODE_STEPS = 20
#: Finished requests whose summary ``/sim/stats`` still lists (about 0.3 KB each: 30 MB at most); older ones are
#: counted (``requests_dropped``), not kept. A trial's load is a few hundred requests; a long-lived server is not.
RECORDS_KEPT = 100_000


class Step:
    """A scheduler iteration between its decision (KV reserved) and its end (tokens emitted)."""

    __slots__ = ("kind", "start", "dt", "prefill", "decode", "ended", "tokens", "chunks")

    def __init__(self, kind: str, start: float, dt: float = 0.0) -> None:
        self.kind = kind
        self.start = start
        self.dt = dt
        self.prefill: list[tuple[Request, int]] = []
        self.decode: list[Request] = []
        self.ended: list[Request] = []
        self.tokens = 0
        self.chunks = 0


class Scheduler:
    """Queues, KV accounting and the step function of one engine (see the module docstring)."""

    def __init__(
        self,
        perf: Any,
        clock: ModelledClock,
        *,
        kv_tokens: int,
        max_running_requests: int,
        chunked_prefill_size: int,
        seed: int,
        prefill_oom_tokens: int | None,
        on_runtime_oom: Callable[[int], Any] | None,
        stream_interval: int,
        radix_cache: bool = True,
    ) -> None:
        if kv_tokens < 1:
            raise ConfigError(f"kv_tokens: must be >= 1, got {kv_tokens}")
        if max_running_requests < 1:
            raise ConfigError(f"max_running_requests: must be >= 1, got {max_running_requests}")
        if stream_interval < 1:
            raise ConfigError(f"stream_interval: must be >= 1, got {stream_interval}")
        self.perf = perf
        self.kv_tokens = int(kv_tokens)
        self.max_running_requests = int(max_running_requests)
        self.chunked_prefill_size = int(chunked_prefill_size) if chunked_prefill_size > 0 else 1 << 60
        self.prefill_oom_tokens = prefill_oom_tokens
        self.on_runtime_oom = on_runtime_oom
        self.stream_interval = int(stream_interval)
        self.rng = random.Random(seed)
        accepted = float(perf.accepted_tokens_per_step(1))
        self._spec = accepted > 1.0
        self._accept_p = float(getattr(perf, "accept_p", 0.0))
        self._spec_depth = int(getattr(perf, "spec_draft_tokens", 2)) - 1 if self._spec else 0
        if self._spec and not (0.0 < self._accept_p < 1.0):
            self._accept_p = 1.0 - 1.0 / accepted  # geometric with the same mean (no depth cap)
            self._spec_depth = 1 << 30
        self._kv_per_decode = max(int(getattr(perf, "spec_draft_tokens", 1)), 1) if self._spec else 1
        # tokens each request gained per verify (the bonus token included) and the verifies: SGLang's
        # cum_spec_accept_length / cum_spec_accept_count, reported as avg_spec_accept_length
        self.spec_accepted = 0
        self.spec_verifies = 0
        # SGLang's overlap scheduler (on unless --disable-overlap-schedule or speculative decoding: PerfModel.overlap)
        # decides batch k+1 while the GPU runs batch k, so a request that arrived after batch k started waits
        # for the batch after next (see _admission_cutoff)
        self._overlap = bool(getattr(perf, "overlap", False))
        # a request reaches the scheduler this long after the client sent it, plus tokenisation per input token
        # (PerfModel.request_path_s, request_path_per_token_s)
        self._path_s = float(getattr(perf, "request_path_s", 0.0))
        self._path_per_token_s = float(getattr(perf, "request_path_per_token_s", 0.0))
        self._last_start: float | None = None  # the last timed step's start and end (modelled)
        self._last_end: float | None = None

        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # prefill finished, decoding
        self.chunked: Request | None = None  # partially prefilled, holds KV
        # every request by rid, in submission order: the live ones whole, a finished one as its summary record
        # (RECORDS_KEPT of them at most: :meth:`_retire`)
        self.records: dict[str, Request | dict[str, object]] = {}
        self._retired: deque[tuple[str, dict[str, object]]] = deque()
        self.records_dropped = 0
        self.kv_used = 0
        self.ratio = INIT_NEW_TOKEN_RATIO
        knobs = getattr(perf, "inputs", None) and getattr(perf.inputs, "knobs", None)
        self.min_ratio = MIN_NEW_TOKEN_RATIO
        if knobs is not None and knobs.schedule_conservativeness != 1.0:  # --schedule-conservativeness
            self.ratio, self.min_ratio = knobs.new_token_ratios()
        # --schedule-policy lpm / dfs-weight: each admission round matches the waiting queue against the radix
        # tree on the scheduler's CPU (KnobSpeed.schedule_round_s); SGLang runs them as FCFS without the tree
        matching = knobs is not None and radix_cache and knobs.schedule_policy in CACHE_AWARE_POLICIES
        self._policy = knobs if matching else None
        self._round_full = False  # SGLang's batch_is_full: no admission round until the running batch shrinks
        self._round_cpu_s = 0.0  # the pending round's CPU time, charged to the step it decides
        self.tokens_emitted = 0
        self.requests_served = 0
        self.submitted = 0
        self.retractions = 0
        self.steps = {"prefill": 0, "decode": 0}

        self.clock = clock
        self.dead: str | None = None
        # SGLang's radix prefix cache (on unless --disable-radix-cache); it shares the KV pool
        # with the running requests: kv_used counts their private tokens, cache.size the tree's.
        self.cache: RadixCache | None = RadixCache() if radix_cache else None
        self.tree_read = 0  # context tokens running requests read from the tree (attention cost, not pool use)
        self.cached_tokens = 0  # prompt tokens served from the cache, over admitted requests
        self.prompt_tokens = 0  # prompt tokens of admitted requests (first admission)

    @property
    def idle(self) -> bool:
        """Nothing waits, runs or is half prefilled."""
        return not self.waiting and not self.running and self.chunked is None

    def submit(self, rid: str, input_len: int, max_new: int, now: float, keys: Any = None) -> Request:
        """Queue one request arriving at modelled time ``now`` (or end it at once: nothing to
        generate, or an input that can never fit the pool). Returns it. ``keys``: the prompt's
        token ids, for the prefix cache (None: the request neither hits nor fills it)."""
        req = Request(rid, self.submitted, int(input_len), max(int(max_new), 0), now,
                      self.rng.randrange(TOKEN_ID_RANGE), keys if self.cache is not None else None)
        self.submitted += 1
        self.records[rid] = req
        if req.max_new == 0:
            req.finish(now, "length")
            self.requests_served += 1
            self._retire(req)
        elif req.input_len + 1 > self.kv_tokens:
            req.finish(now, "abort")
            self._retire(req)
        else:
            self.waiting.append(req)
        return req

    def _retire(self, req: Request) -> None:
        """A finished request keeps only its summary record (``Request.record``), and only the newest
        ``RECORDS_KEPT`` summaries stay: a live request holds its chunk times and its prompt's token ids, and a
        long-lived server (``python -m autotune.sim`` under ``autotune bench``) serves without end, so keeping
        every request whole grew the server by kilobytes a request for as long as it ran."""
        if self.records.get(req.rid) is not req:
            return
        rec = req.record()
        self.records[req.rid] = rec  # in place: the submission order stays
        self._retired.append((req.rid, rec))
        while len(self._retired) > RECORDS_KEPT:
            rid, old = self._retired.popleft()
            if self.records.get(rid) is old:
                del self.records[rid]
                self.records_dropped += 1

    def cached_tokens_of(self, rid: str) -> int:
        """Prompt tokens of request ``rid`` served from the prefix cache (0 when unknown or dropped)."""
        rec = self.records.get(rid)
        if isinstance(rec, Request):
            return rec.cached
        cached = rec.get("cached_tokens") if rec is not None else None
        return cached if isinstance(cached, int) else 0

    def stats(self, requests: bool = True) -> dict[str, Any]:
        """Counters and per-request modelled timestamps (``/sim/stats``); ``requests=False`` leaves out the
        per-request records (one per request served: what a clock probe polled during a load run does not need)."""
        out = {
            "tokens_emitted": self.tokens_emitted,
            "requests_served": self.requests_served,
            "running": len(self.running) + (1 if self.chunked is not None else 0),
            "waiting": len(self.waiting),
            "retractions": self.retractions,
            "kv_tokens": self.kv_tokens,
            "kv_used": self.kv_used,
            "new_token_ratio": self.ratio,
            "cache": self.cache_stats(),
            "steps": dict(self.steps),
            "dead": self.dead,
            "spec_accept_length": self.spec_accept_length(),
        }
        if requests:
            out["requests"] = [r.record() if isinstance(r, Request) else r for r in self.records.values()]
            out["requests_dropped"] = self.records_dropped  # the oldest finished ones past RECORDS_KEPT
        return out

    def spec_accept_length(self) -> float | None:
        """Mean tokens a request gained per draft/verify cycle since the server started; None without
        speculative decoding or before its first verify."""
        return self.spec_accepted / self.spec_verifies if self.spec_verifies else None

    def cache_stats(self) -> dict[str, Any]:
        """The prefix cache's ground truth: tokens held, hit tokens over prompt tokens."""
        c = self.cache
        return {
            "enabled": c is not None,
            "size_tokens": c.size if c is not None else 0,
            "locked_tokens": c.locked if c is not None else 0,
            "cached_tokens": self.cached_tokens,
            "prompt_tokens": self.prompt_tokens,
            "hit_rate": self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0,
        }

    def flush_cache(self) -> bool:
        """Empty the prefix cache (``/flush_cache``); False while requests hold parts of it."""
        if self.cache is None:
            return True
        if not self.idle:
            return False
        return self.cache.flush()

    def _held(self) -> int:
        """KV tokens that cannot be given out: private ones and the cache's locked paths."""
        return self.kv_used + (self.cache.locked if self.cache is not None else 0)

    def _make_room(self) -> None:
        """Evict least recently used cache leaves until the pool holds what was allocated."""
        cache = self.cache
        if cache is not None:
            over = self.kv_used + cache.size - self.kv_tokens
            if over > 0:
                cache.evict(over)

    def _admit_match(self, req: Request) -> int:
        """Match ``req``'s prompt against the cache before admission; returns the tokens it would
        newly lock (they stop being evictable). Sets ``req.prefilled`` to the hit."""
        cache = self.cache
        if cache is None or req.keys is None or req.prefilled or req.match is not None:
            return 0
        m = cache.match(req.keys, max_len=req.input_len - 1)
        if m.length == 0:
            return 0
        req.match = m
        req.prefilled = m.length
        return cache.unlocked_on(m)

    def _drop_match(self, req: Request) -> None:
        """Unlock ``req``'s cache match (finished, retracted, aborted); an unadmitted one is forgotten."""
        m = req.match
        if m is not None:
            req.match = None
            if self.cache is not None and req.kv_locked:
                self.cache.release(m)
            req.kv_locked = False
        self.tree_read -= req.tree_tokens
        req.tree_tokens = 0

    def _finish_into_cache(self, req: Request) -> None:
        """A finished request's prompt + output enter the cache (SGLang's ``cache_finished_req``)."""
        cache = self.cache
        if cache is None or req.keys is None:
            self._drop_match(req)
            return
        seq = list(req.keys)
        if req.output > 1:  # the last token's KV is never computed
            seq.extend(req.token_ids(0, req.output - 1))
        self._drop_match(req)
        cache.insert(seq)
        self._make_room()

    def begin_step(self) -> Step | None:
        """Decide the next iteration as SGLang's scheduler: prefill first, else decode, else abort."""
        if self.idle:
            return None
        batch = self._plan_prefill()
        if batch:
            return self._charge_round(self._begin_prefill(batch))
        if self.running:
            return self._charge_round(self._begin_decode())
        self._round_cpu_s = 0.0
        head = self.waiting[0] if self.waiting else None
        if head is not None and not self._received_by(head, self.clock.t):
            # nothing in flight and the next request still on its way to the scheduler: the loop spins until then
            return Step("wait", self.clock.t, self._received_at(head) - self.clock.t)
        step = Step("abort", self.clock.t)  # waiting requests that cannot be admitted while nothing runs
        step.ended.append(self._abort_unadmittable())
        return step

    def _charge_round(self, step: Step) -> Step:
        """Add what the admission round's CPU time (schedule policy) delays the step by. Under the overlap
        scheduler (0.5.9 ``event_loop_overlap``) the round that decided this step ran while the GPU ran the
        previous one, so only its excess over that step's time shows; without it, or after the GPU idled, all
        of it does."""
        cpu, self._round_cpu_s = self._round_cpu_s, 0.0
        if cpu <= 0.0 or step.kind not in ("prefill", "decode"):
            return step
        last, end = self._last_start, self._last_end
        if self._overlap and last is not None and end is not None and self.clock.t <= end + 1e-12:
            cpu = max(0.0, cpu - (end - last))
        step.dt += cpu
        return step

    def end_step(self, step: Step, t_end: float) -> StepResult:
        """Emit the step's tokens at its modelled end ``t_end``; fail everything if it killed the engine."""
        if step.kind in ("prefill", "decode"):
            self._last_start, self._last_end = step.start, t_end
        if step.prefill:
            self._end_prefill(step, t_end)
        elif step.decode:
            self._end_decode(step, t_end)
        if self.dead:
            step.ended.extend(self.fail_all(self.dead))
        ended = step.ended
        if ended:
            self._round_full = False  # the running batch shrank (SGLang resets batch_is_full)
        if len(ended) > 1:
            ended.sort(key=lambda r: r.seq)
        for req in ended:
            self._retire(req)
        return StepResult(step.kind, step.start, t_end - step.start, len(step.prefill) or len(step.decode),
                          step.tokens, step.chunks, tuple(r.handle for r in ended), self.dead)

    def _reserve(self, req: Request) -> float:
        return min(req.max_new - req.output, CLIP_MAX_NEW_TOKENS) * self.ratio

    def _admission_cutoff(self) -> float:
        """Requests the scheduler received by this time may join the next batch.

        SGLang's overlap event loop (0.5.9 ``scheduler.py`` ``event_loop_overlap``) receives requests,
        builds batch k+1 and launches it, and only then waits for batch k's results: the batch that
        starts when batch k ends was decided when batch k started, from the requests received by then
        **[code]**. Without overlap (``event_loop_normal``) the batch is decided when it starts. With
        nothing in flight the loop spins and takes a request as soon as it is received. A request is
        received ``request_path_s`` (+ tokenisation per input token) after the client sent it (HTTP, the tokenizer
        manager, ZMQ), so one sent
        the instant a step ends (a closed-loop client reacting to a finished request) misses the batch
        decided then: it waits one step without overlap, two with it."""
        now = self.clock.t
        if not self._overlap or self._last_start is None or self._last_end is None:
            return now
        if now > self._last_end or not (self.running or self.chunked is not None):
            return now  # the GPU idled, or nothing is in flight
        return self._last_start

    def _received_at(self, req: Request) -> float:
        return req.arrival_s + self._path_s + self._path_per_token_s * req.input_len

    def _received_by(self, req: Request, cutoff: float) -> bool:
        return self._received_at(req) <= cutoff + 1e-12

    def _plan_prefill(self) -> list[tuple[Request, int]]:
        """Pick (request, new tokens) pairs for the next prefill step, as SGLang's PrefillAdder."""
        if self.chunked is None and (not self.waiting or len(self.running) >= self.max_running_requests):
            return []  # nothing to continue and no request may start (the reserves need not be summed)
        if self._policy is not None and (not self._round_full or self.chunked is not None):
            waiting = self.waiting
            self._round_cpu_s += self._policy.schedule_round_s(
                len(waiting), sum(r.input_len + r.output for r in waiting))
        cutoff = self._admission_cutoff()
        budget = self.chunked_prefill_size
        rem = self.kv_tokens - self._held() - sum(self._reserve(r) for r in self.running)
        batch: list[tuple[Request, int]] = []
        chunked = self.chunked
        if chunked is not None:
            take = min(chunked.prefill_left, budget)
            batch.append((chunked, take))
            budget -= take
            rem -= take
        slots = self.max_running_requests - len(self.running) - (1 if chunked is not None else 0)
        while self.waiting and budget > 0 and slots > 0:
            req = self.waiting[0]
            if not self._received_by(req, cutoff):
                break  # not yet received when this batch was decided: a later one
            newly_locked = self._admit_match(req)
            if req.prefill_left + newly_locked + self._reserve(req) > rem:
                if req.match is not None and not req.kv_locked:  # not admitted: match again next time
                    req.match = None
                    req.prefilled = 0
                self._round_full = True  # SGLang's AddReqResult.NO_TOKEN
                break
            self.waiting.popleft()
            if req.match is not None and self.cache is not None:
                self.cache.lock(req.match)
                req.kv_locked = True
                req.tree_tokens = req.match.length
                self.tree_read += req.tree_tokens
                rem -= newly_locked
            if not req.counted:
                req.counted = True
                req.cached = req.prefilled
                self.cached_tokens += req.prefilled
                self.prompt_tokens += req.input_len
            take = min(req.prefill_left, budget)
            batch.append((req, take))
            budget -= take
            rem -= take + self._reserve(req)
            slots -= 1
            if take < req.prefill_left:
                break  # this request is now the chunked one
        if slots <= 0 and self.waiting:
            self._round_full = True  # as many running as may run
        return batch

    def _abort_unadmittable(self) -> Request:
        """Nothing runs and the head of the queue still does not fit: SGLang would never serve it."""
        req = self.waiting.popleft()
        log.warning("request %s (%d input tokens) can never fit the KV pool of %d tokens; aborted",
                    req.rid, req.input_len, self.kv_tokens)
        req.finish(self.clock.t, "abort")
        req.wake()
        return req

    def _begin_prefill(self, batch: list[tuple[Request, int]]) -> Step:
        tokens = sum(take for _, take in batch)
        step = Step("prefill", self.clock.t)
        if self.prefill_oom_tokens is not None and tokens > self.prefill_oom_tokens:
            log.error("prefill batch of %d tokens exceeds the %d tokens that fit: runtime OOM",
                      tokens, self.prefill_oom_tokens)
            self.dead = f"Prefill out of memory ({tokens} tokens)"
            for req, _ in batch:
                req.fail(self.dead)
                step.ended.append(req)
            if self.on_runtime_oom is not None:
                self.on_runtime_oom(tokens)
            return step
        pairs = 0.0  # attention's (query, key) pairs: a later chunk attends to its request's earlier ones too
        for req, take in batch:  # reserve KV before the step's time passes: admission is decided now
            pairs += take * (req.prefilled + (take + 1) / 2.0)
            req.prefilled += take
            req.kv += take
            self.kv_used += take
        self._make_room()
        self.chunked = None
        step.prefill = batch
        step.dt = self.perf.prefill_time_s(tokens, len(batch), pairs)
        self.steps["prefill"] += 1
        return step

    def _prompt_into_cache(self, req: Request) -> None:
        """A prefilled prompt enters the cache at once (SGLang's ``cache_unfinished_req``), so later
        prefill steps hit it; the request keeps it locked, and its prompt KV stops being private."""
        cache = self.cache
        if cache is None or req.keys is None or req.prefill_target != req.input_len:
            return
        moved = req.input_len - req.cached
        self._drop_match(req)
        cache.insert(req.keys)
        m = cache.match(req.keys, max_len=req.input_len)
        cache.lock(m)
        req.match = m
        req.kv_locked = True
        req.tree_tokens = req.input_len
        self.tree_read += req.input_len
        req.kv -= moved
        self.kv_used -= moved

    def _end_prefill(self, step: Step, t_end: float) -> None:
        for req, _ in step.prefill:
            if req.aborted:
                continue
            if req.prefill_left > 0:
                self.chunked = req
                continue
            self._prompt_into_cache(req)
            self.running.append(req)
            self._emit(req, 1, t_end, step)

    def _begin_decode(self) -> Step:
        need = len(self.running) * self._kv_per_decode
        retracted = False
        while self._held() + need > self.kv_tokens and len(self.running) > 1:
            self._retract_one()
            retracted = True
            need = len(self.running) * self._kv_per_decode
        if self._held() + len(self.running) > self.kv_tokens:  # a lone request filled the pool
            step = Step("abort", self.clock.t)
            req = self.running.pop()
            self._free(req)
            self._drop_match(req)
            req.finish(self.clock.t, "abort")
            req.wake()
            step.ended.append(req)
            return step
        if self.cache is not None and self.cache.size:
            over = self.kv_used + self.cache.size + need - self.kv_tokens
            if over > 0:
                self.cache.evict(over)
        step = Step("decode", self.clock.t)
        step.decode = list(self.running)
        # attention reads every request's whole context, the shared prefix once per request
        step.dt = self.perf.decode_step_time_s(len(step.decode), self.kv_used + self.tree_read)
        self.steps["decode"] += 1
        if not retracted:  # SGLang decays the ratio only on steps without a retraction
            self.ratio = max(self.ratio - NEW_TOKEN_RATIO_DECAY, self.min_ratio)
        return step

    def _end_decode(self, step: Step, t_end: float) -> None:
        """One token (or the accepted draft tokens) for every request of the batch still there.

        The common case (a request neither starting nor finishing) is inlined: it is
        the engine's per-token cost.
        """
        free = self.kv_tokens - self.kv_used
        spec = self._spec
        si = self.stream_interval
        fast = 0  # tokens emitted on the inlined path (KV and counters settled after the loop)
        accepted = verifies = 0
        for req in step.decode:
            if req.aborted or req.finish_s is not None:
                continue
            if spec:
                n = min(self._sample_accepted(), max(free, 1))
                accepted += n
                verifies += 1
            else:
                n = 1
            free -= n
            out = req.output
            if out == 0 or out + n >= req.max_new:
                self._emit(req, n, t_end, step)
                continue
            req.output = out + n
            req.kv += n
            fast += n
            pending = req.pending + n
            if pending >= si:
                req.times.append(t_end)
                req.counts.append(pending)
                req.pending = 0
                step.chunks += 1
                if req.waiter is not None:
                    req.wake()
            else:
                req.pending = pending
        self.kv_used += fast
        self.tokens_emitted += fast
        step.tokens += fast
        self.spec_accepted += accepted
        self.spec_verifies += verifies

    def _sample_accepted(self) -> int:
        n = 1
        rnd = self.rng.random
        while n <= self._spec_depth and rnd() < self._accept_p:
            n += 1
        return n

    def _emit(self, req: Request, n: int, t: float, step: Step) -> None:
        """Give ``req`` up to ``n`` new tokens made at modelled time ``t``; stream and finish."""
        n = min(n, req.max_new - req.output)
        if n <= 0:
            return
        first = req.output == 0
        req.output += n
        req.kv += n
        self.kv_used += n
        self.tokens_emitted += n
        step.tokens += n
        if first and req.first_token_s is None:
            req.first_token_s = t
        req.pending += n
        if req.output >= req.max_new:
            self.running.remove(req)
            self._free(req)
            self._finish_into_cache(req)
            req.finish(t, "length")
            self.requests_served += 1
            req.flush(t)
            step.chunks += 1
            step.ended.append(req)
        elif first or req.pending >= self.stream_interval:
            req.flush(t)
            step.chunks += 1

    def _retract_one(self) -> None:
        """Send the request with the fewest output tokens (longest input on ties) back to waiting."""
        victim = min(self.running, key=lambda r: (r.output, -r.input_len))
        self.running.remove(victim)
        self._free(victim)
        self._drop_match(victim)
        victim.prefilled = 0
        victim.prefill_target = victim.input_len + victim.output
        self.waiting.appendleft(victim)
        self.retractions += 1
        self._round_full = False
        total_decoded = sum(r.output for r in self.running)
        total_max_new = sum(r.max_new for r in self.running) or 1
        self.ratio = min(1.0, (total_decoded + RETRACT_DECODE_STEPS * len(self.running)) / total_max_new)
        log.debug("retracted %s (output %d); new_token_ratio %.3f", victim.rid, victim.output, self.ratio)

    def _free(self, req: Request) -> None:
        self.kv_used -= req.kv
        req.kv = 0

    def abort(self, req: Request) -> None:
        """The consumer went away: drop the request wherever it is and free its KV."""
        req.aborted = True
        if req in self.running:
            self.running.remove(req)
        elif self.chunked is req:
            self.chunked = None
        else:
            try:
                self.waiting.remove(req)
            except ValueError:
                pass
        self._free(req)
        self._drop_match(req)
        req.finish(self.clock.t, "abort")
        self._retire(req)

    def fail_all(self, reason: str) -> list[Request]:
        """Fail every request still queued or in flight; returns them."""
        failed = list(self.running) + list(self.waiting) + ([self.chunked] if self.chunked else [])
        for req in failed:
            req.fail(reason)
        self.running.clear()
        self.waiting.clear()
        self.chunked = None
        return failed
