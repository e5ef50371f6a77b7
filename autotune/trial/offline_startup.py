"""The simulated server's startup, run in pure modelled time (private to :mod:`autotune.trial.offline`).

The offline evaluator must fail where the simulated server fails, with the same
evidence, and know how long the startup took in modelled seconds. Rather than
re-deriving either, it runs the server's own :func:`autotune.sim.startup.boot`
on an event loop whose clock is virtual: every ``asyncio.sleep`` of a startup
phase advances the clock by its duration instantly, so the loop's elapsed time
*is* the modelled startup duration. The log lines ``boot`` writes go through
the same consumers as on a real launch: the trial body's live KV-OOM kill
(``LiveKill``: a weights-loaded line proving ``A - P (1 - f) < 0`` ends the launch
there) and, on failure, the launcher's :func:`autotune.launch.failures.classify`.
"""

from __future__ import annotations

import asyncio
import logging
import selectors
from dataclasses import dataclass, field
from typing import Any

from autotune.errors import AutotuneError
from autotune.launch.failures import classify
from autotune.outcome import FailureKind
from autotune.sglang.logparse import summarize
from autotune.sglang.models.profile import ModelProfile
from autotune.sim.args import Launch, SimOptions
from autotune.sim.hardware import MemoryPlan
from autotune.sim.startup import READY_LINE, LogWriter, StartupFailure, boot, runtime_oom_failure, warmup
from autotune.trial.live_kill import LiveKill

log = logging.getLogger(__name__)

#: Exit status of a server that failed at startup: SGLang SIGKILLs its own tree.
KILLED_RC = -9


class _VirtualSelector(selectors.DefaultSelector):
    """A selector whose waits advance a virtual clock instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:  # nothing scheduled and nothing to wake us: a bug, not a wait
            raise AutotuneError("virtual-time loop: nothing left to run (would block forever)")
        if timeout > 0:
            self.now += timeout
        return super().select(0)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on a virtual clock: idle waits cost no wall time; ``time()`` is modelled seconds."""

    def __init__(self) -> None:
        self._vsel = _VirtualSelector()
        super().__init__(self._vsel)

    def time(self) -> float:
        return self._vsel.now


class _Killed(Exception):
    """Raised through ``boot`` when the live kill fires (the launcher SIGKILLs the server)."""


class _LogSink:
    """The server's stderr: keeps every line and hands each to ``on_line`` as it is written."""

    def __init__(self, on_line: Any) -> None:
        self.lines: list[str] = []
        self.on_line = on_line
        self._buf = ""

    def write(self, text: str) -> int:
        self._buf += text
        *done, self._buf = self._buf.split("\n")
        for line in done:
            self.lines.append(line)
            if self.on_line is not None:
                self.on_line(line)
        return len(text)

    def flush(self) -> None:
        return None


class _KillSwitch:
    """What :class:`LiveKill` calls ``server``: records the kill and stops the boot at that line."""

    def __init__(self) -> None:
        self.kind: str | None = None
        self.evidence = ""

    def kill_now(self, kind: str, evidence: str) -> None:
        self.kind, self.evidence = str(kind), evidence
        raise _Killed()


@dataclass
class StartupOutcome:
    """How the startup of one launch ended, in modelled time."""

    ready: bool
    duration_s: float  # modelled seconds from launch to ready (or to the failure / the kill)
    failure_kind: str | None = None
    evidence: str = ""
    lines: list[str] = field(default_factory=list)
    observed: dict[str, Any] = field(default_factory=dict)


def run_startup(plan: MemoryPlan, launch: Launch, sim: SimOptions, model: ModelProfile,
                *, live_kill_f: float | None, p_predicted: float | None) -> StartupOutcome:
    """Run ``boot`` (and the server's own warm-up request) in virtual time; see the module docstring.

    ``live_kill_f`` / ``p_predicted`` are what the live evaluator's kill watches with
    (the launch's explicit ``mem_fraction_static`` and the predicted P); None disables it.
    """
    watcher = LiveKill(live_kill_f, p_predicted)
    switch = _KillSwitch()
    watcher.server = switch
    sink = _LogSink(watcher)
    writer = LogWriter(sim, launch, stream=sink)  # type: ignore[arg-type]
    failure: StartupFailure | None = None

    async def _boot() -> None:
        nonlocal failure
        try:
            await boot(plan, launch, sim, model, writer)
        except StartupFailure as exc:
            failure = exc
            return
        await warmup(sim, launch)
        writer.line(READY_LINE)

    loop = VirtualTimeLoop()
    try:
        try:
            loop.run_until_complete(_boot())
        except _Killed:
            pass
        elapsed = loop.time()
    finally:
        loop.close()
    # boot() sleeps duration / time_scale: scale the virtual seconds back to modelled ones
    duration = elapsed * sim.time_scale
    observed = {k: v for k, v in summarize(watcher.events).items() if v is not None}
    if switch.kind is not None:
        return StartupOutcome(False, duration, switch.kind, switch.evidence, sink.lines, observed)
    if failure is not None:
        writer.failure(failure)  # SGLang's failure wrapper, as the dying server prints it
        kind, evidence = classify(sink.lines, KILLED_RC)
        observed = {k: v for k, v in summarize(watcher.events).items() if v is not None}
        return StartupOutcome(False, duration, str(kind), evidence, sink.lines, observed)
    return StartupOutcome(True, duration, None, "", sink.lines, observed)


def runtime_oom_evidence(sim: SimOptions, launch: Launch) -> tuple[FailureKind, str]:
    """Failure kind and evidence line of a server that died of "Prefill out of memory" under load,
    as the trial body classifies the tail of its log."""
    sink = _LogSink(None)
    LogWriter(sim, launch, stream=sink).failure(runtime_oom_failure())  # type: ignore[arg-type]
    kind, evidence = classify(sink.lines, KILLED_RC)
    return (FailureKind(kind) if kind else FailureKind.RUNTIME_OOM), evidence


__all__ = ["StartupOutcome", "VirtualTimeLoop", "run_startup", "runtime_oom_evidence"]
