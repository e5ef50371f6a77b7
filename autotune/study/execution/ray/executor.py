"""``RayExecutor``: trial bodies as Ray tasks, in parallel on a node's GPUs and across nodes.

Each trial is one Ray task reserving ``tp_size x dp_size`` GPUs plus the study's
``executor.resources``, ``num_cpus=0``, ``max_retries=0`` (the driver decides about
re-runs, not Ray). Ray sets ``CUDA_VISIBLE_DEVICES`` for the task; the task copies
that assignment into ``TrialRequest.gpu_ids`` so the server sees exactly its GPUs, and
trials of different TP share a node without oversubscription.

The executor keeps a ledger of what its trials hold and hands a trial to Ray only
when it fits a node now (first fit); the rest wait in a local queue and start from
``wait()``. A trial that can never fit (more GPUs than any node has) fails at once.

Failures of the worker itself (killed, crashed, node lost, OOM-killed, cancelled)
come back as ``TrialResult(state=FAILED, failure_kind=WORKER_DIED, evidence=<Ray
error>)``. Servers never outlive their task: the launcher's watchdog ends a server
group whose launching worker died, and teardown on shutdown cancels softly first
(the body's ``finally`` stops its server) and then by force.
"""

from __future__ import annotations

import logging
import re
import socket
import time
from collections import deque
from typing import Any

from autotune.errors import AutotuneError
from autotune.outcome import FailureKind
from autotune.study.execution.disk_fault import as_disk_fault
from autotune.study.execution.executor import Executor, ReporterFactory
from autotune.study.execution.ray import capacity, cluster
from autotune.trial.contract import Reporter, TrialRequest, TrialResult, TrialState
from autotune.trial.live import run_trial_body

log = logging.getLogger(__name__)

_NODES_TTL_S = 5.0
_POLL_S = 0.2
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class RayExecutor(Executor):
    """Runs trial bodies as Ray tasks; see the module docstring.

    ``spec`` is the :class:`~autotune.spec.StudySpec` (its ``executor``, ``hardware``
    and ``server`` sections are read). ``body`` is the trial body run inside the task
    (default :func:`~autotune.trial.live.run_trial_body`; tests pass cheap ones; it
    must be picklable). ``cancel_grace_s`` is how long a soft cancel may take before
    the rest are cancelled by force.
    """

    def __init__(
        self,
        spec: Any,
        reporter_factory: ReporterFactory | None = None,
        *,
        body: Any = None,
        cancel_grace_s: float = 15.0,
    ) -> None:
        import ray

        from autotune.study.execution.ray.task import ReportHub

        ex = spec.executor
        self._max_parallel: int | None = ex.max_parallel
        self._resources = {k: float(v) for k, v in (ex.resources or {}).items()}
        self._default_gpus = max(1, int(spec.server.tp_size) * int(spec.server.dp_size))
        self._reporter_factory = reporter_factory
        self._body = body or run_trial_body
        self._cancel_grace_s = cancel_grace_s
        declared = ex.num_gpus if ex.num_gpus is not None else spec.hardware.num_gpus
        self._owned = cluster.connect(ex.address, num_cpus=ex.num_cpus, num_gpus=int(declared))
        self._hub = ReportHub.options(num_cpus=0).remote()  # type: ignore[attr-defined]  # a Ray actor class
        self._driver_host = socket.gethostname()
        self._queued: deque[tuple[int, TrialRequest, dict[str, float]]] = deque()
        self._running: dict[Any, tuple[int, dict[str, float]]] = {}  # ObjectRef -> (number, need)
        self._done: list[tuple[int, TrialResult]] = []
        self._reporters: dict[int, Reporter | None] = {}
        self._nodes: list[dict[str, float]] = []
        self._nodes_at = -_NODES_TTL_S
        self._closed = False
        self._ray = ray
        log.info("Ray executor: %s", capacity.describe(self._cluster()))

    # ---- capacity --------------------------------------------------------------------
    def _cluster(self) -> list[dict[str, float]]:
        now = time.monotonic()
        if now - self._nodes_at >= _NODES_TTL_S:
            self._nodes = cluster.node_totals()
            self._nodes_at = now
        return self._nodes

    def _need(self, request: TrialRequest | None) -> dict[str, float]:
        gpus = self._default_gpus
        if request is not None:
            gpus = request.config.num_gpus
        return capacity.trial_need(gpus, self._resources)

    def _held(self) -> list[dict[str, float]]:
        return [need for _, need in self._running.values()]

    def slots_free(self, request: TrialRequest | None = None) -> int:
        """More trials with ``request``'s needs (default: the study's tp x dp) that could start now."""
        if self._closed:
            return 0
        held = self._held() + [need for _, _, need in self._queued]
        n = capacity.how_many_more(self._cluster(), held, self._need(request))
        if self._max_parallel is not None:
            n = min(n, self._max_parallel - len(held))
        return max(0, n)

    # ---- submit and dispatch ---------------------------------------------------------
    def submit(self, number: int, request: TrialRequest) -> None:
        """Queue trial ``number``; it goes to Ray now if it fits a node, else from a later ``wait``."""
        if self._closed:
            raise RuntimeError("submit after shutdown")
        need = self._need(request)
        if self._reporter_factory is not None:
            self._reporters[number] = self._reporter_factory(number)
        nodes = self._cluster()
        if not capacity.fits_anywhere(nodes, need):
            self._reporters.pop(number, None)
            self._done.append((number, _never_fits(need, nodes)))
            return
        self._queued.append((number, request, need))
        self._dispatch()

    def _dispatch(self) -> None:
        from autotune.study.execution.ray.task import trial_task

        while self._queued:
            number, request, need = self._queued[0]
            nodes = self._cluster()
            if not capacity.fits_anywhere(nodes, need):  # a node left since submit
                self._queued.popleft()
                self._reporters.pop(number, None)
                self._done.append((number, _never_fits(need, nodes)))
                continue
            room = capacity.how_many_more(nodes, self._held(), need, limit=1)
            if room < 1 or (self._max_parallel is not None and len(self._running) >= self._max_parallel):
                return
            self._queued.popleft()
            extra = {k: v for k, v in need.items() if k != "GPU"}
            ref = trial_task.options(
                num_gpus=need.get("GPU", 0.0), num_cpus=0, resources=extra, max_retries=0, name=f"trial-{number}",
            ).remote(self._body, request, self._hub, self._driver_host)
            self._running[ref] = (number, need)
            log.info("trial %d handed to Ray (%s)", number, need)

    # ---- results ---------------------------------------------------------------------
    def wait(self, timeout: float) -> list[tuple[int, TrialResult]]:
        """Finished trials; waits up to ``timeout`` for one, delivering reports meanwhile."""
        if self._closed:
            return []
        ray = self._ray
        deadline = time.monotonic() + max(0.0, timeout)
        out: list[tuple[int, TrialResult]] = []
        while True:
            self._dispatch()
            out.extend(self._done)
            self._done.clear()
            refs = list(self._running)
            ready: list[Any] = []
            if refs:
                left = deadline - time.monotonic()
                wait_s = 0.0 if out else max(0.0, min(_POLL_S, left))
                ready, rest = ray.wait(refs, num_returns=1, timeout=wait_s)
                if ready and rest:
                    more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                    ready += more
            self._drain_reports()  # reports a body sent before it finished come first
            for ref in ready:
                number, _ = self._running.pop(ref)
                out.append((number, self._collect(number, ref)))
            if ready:
                self._dispatch()
            if out or not refs or time.monotonic() >= deadline:
                return out

    def _drain_reports(self) -> None:
        ray = self._ray
        try:
            reports = ray.get(self._hub.drain.remote(), timeout=10)
        except ray.exceptions.RayError as exc:
            log.warning("could not read intermediate reports: %s", exc)
            return
        live = {n for n, _ in self._running.values()}
        for number, step, value in reports:
            if number not in live:
                continue
            reporter = self._reporters.get(number)
            if reporter is not None and not reporter(step, value):
                log.info("trial %d: stop requested at step %d (value %.1f)", number, step, value)
                self._hub.stop.remote(number)

    def _collect(self, number: int, ref: Any) -> TrialResult:
        from autotune.study.execution.ray.task import write_shipped

        ray = self._ray
        self._reporters.pop(number, None)
        self._hub.forget.remote(number)
        try:
            result, files = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # the body raised: a bug, not a trial outcome
            disk = as_disk_fault(exc)
            if disk is not None:  # unless the node's disk is full or read-only: stop, re-run on resume
                raise disk from None
            log.error("trial %d: the trial body raised: %s", number, exc)
            return TrialResult(state=TrialState.FAILED, failure_kind=FailureKind.CRASHED,
                               evidence=f"trial body raised {type(getattr(exc, 'cause', None) or exc).__name__}: "
                                        f"{_first_lines(exc)}")
        except ray.exceptions.RayError as exc:  # worker killed, node died, OOM kill, cancelled
            lost = cluster.local_instance_lost() if self._owned else None
            if lost:  # the instance itself died: stop cleanly, the trial re-runs on resume
                raise RayInstanceLost(f"ray: the local Ray instance lost its {lost} during trial {number}; "
                                      "run the study again to resume (the trial in flight runs again)") from None
            log.warning("trial %d: Ray worker died: %s", number, _first_lines(exc, 1))
            return TrialResult(state=TrialState.FAILED, failure_kind=FailureKind.WORKER_DIED,
                               evidence=f"{type(exc).__name__}: {_first_lines(exc)}")
        if files:
            write_shipped(files)
        return result

    def in_flight(self) -> list[int]:
        """Trials handed to Ray or queued here, plus finished ones not yet returned by ``wait``."""
        return ([n for n, _ in self._running.values()] + [n for n, _, _ in self._queued]
                + [n for n, _ in self._done])

    # ---- teardown --------------------------------------------------------------------
    def shutdown(self, *, cancel: bool) -> None:
        """Cancel what still runs (soft, then force after ``cancel_grace_s``); release Ray.

        Without ``cancel`` nothing should be running (the driver waited); whatever is
        left is cancelled all the same, because it could not be told anyway.
        """
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        numbers = [n for n, _ in self._running.values()] + [n for n, _, _ in self._queued]
        self._queued.clear()
        if numbers:
            (log.warning if cancel else log.error)("cancelling trial(s) %s", sorted(numbers))
        refs = list(self._running)
        try:
            if refs:
                self._cancel(refs)
            self._running.clear()
            try:
                ray.kill(self._hub)
            except ray.exceptions.RayError:
                pass
        finally:
            cluster.disconnect(self._owned)

    def _cancel(self, refs: list[Any]) -> None:
        ray = self._ray
        if self._cancel_grace_s > 0:
            for ref in refs:
                ray.cancel(ref, force=False)  # KeyboardInterrupt in the body: its finally stops the server
            _, refs = ray.wait(refs, num_returns=len(refs), timeout=self._cancel_grace_s)
        for ref in refs:
            ray.cancel(ref, force=True)  # kills the worker; the server's watchdog ends its group
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=10.0)


class RayInstanceLost(AutotuneError):
    """The local Ray instance this driver started died (its raylet or GCS was killed)."""


def _never_fits(need: dict[str, float], nodes: list[dict[str, float]]) -> TrialResult:
    wanted = ", ".join(f"{k}={v:g}" for k, v in sorted(need.items()))
    return TrialResult(
        state=TrialState.FAILED,
        failure_kind=FailureKind.INVALID_ARGS,
        evidence=f"needs {wanted} on one node, but the Ray cluster has {capacity.describe(nodes)}: "
                 "it can never run",
    )


def _first_lines(exc: BaseException, n: int = 12) -> str:
    text = _ANSI.sub("", str(exc)).strip()  # Ray colours task names in its errors
    return "\n".join(text.splitlines()[:n])[:2000]
