"""The modelled clock of the simulated engine (private to :mod:`autotune.sim.engine.core`).

Stepped synchronously (:meth:`Engine.step_once <autotune.sim.engine.core.Engine.step_once>`,
never started), the clock is modelled time alone: ``advance_instant`` and ``skip_to``.
Started on an event loop, modelled time advances in steps; wall time follows it at ``1 / time_scale``,
anchored at (``wall0``, ``model0``) so that sleeping step after step does not
accumulate drift. Two rules keep modelled time honest when the host is slow
or a client needs CPU to react:

* **lag**: when a step ends later on the wall than its modelled end (huge time
  scales, a busy host), the anchor moves once the lag exceeds
  ``LAG_REANCHOR_S``: modelled time never runs ahead of the steps, so modelled
  throughput does not depend on the host.
* **reaction**: a reading taken during a step lies inside that step; if the
  host is behind, it reads the step's start, and an arrival that wakes an idle
  engine starts the engine's next step. Host CPU time (a client reading a chunk
  and sending its next request) is not modelled time.
"""

from __future__ import annotations

import asyncio

LAG_REANCHOR_S = 0.05  # wall seconds of lag after which the clock re-anchors


class ModelledClock:
    """Step-wise modelled time, anchored to the event loop's wall clock."""

    def __init__(self, time_scale: float) -> None:
        self.time_scale = time_scale
        self.t = 0.0  # modelled time at the end of the last step
        self.step_start = 0.0
        self.step_end = 0.0
        self.busy = False  # a step (or a wake-up) is in progress: readings stay inside it
        self.running = False
        self._wall0 = 0.0
        self._model0 = 0.0
        self._last = 0.0

    def start(self) -> None:
        """Modelled time 0 is now."""
        self._wall0 = asyncio.get_running_loop().time()
        self._model0 = 0.0
        self.running = True

    def stop(self) -> None:
        """Frozen at the end of the last step (readings no longer need an event loop)."""
        self.running = False
        self.busy = False

    def _wall_model(self) -> float:
        return self._model0 + (asyncio.get_running_loop().time() - self._wall0) * self.time_scale

    def now(self) -> float:
        """The modelled time of a reading taken now (monotonic)."""
        if not self.running:
            return self.t
        now = self._wall_model()
        if self.busy:
            now = self.step_start if now > self.step_end else max(now, self.step_start)
        else:
            now = max(now, self.t)
        now = max(now, self._last)
        self._last = now
        return now

    async def advance(self, dt: float) -> float:
        """Model a step of ``dt`` seconds: sleep its wall share; returns the step's end."""
        loop = asyncio.get_running_loop()
        self.step_start = self.t
        self.step_end = self.t + dt
        self.busy = True
        delay = self._wall0 + (self.step_end - self._model0) / self.time_scale - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            await asyncio.sleep(0)  # still let consumers run between steps
            if -delay > LAG_REANCHOR_S:
                self._wall0 = loop.time()
                self._model0 = self.step_end
        self.t = self.step_end
        return self.t

    def advance_instant(self, dt: float) -> float:
        """Model a step of ``dt`` seconds without sleeping (the engine stepped synchronously)."""
        self.step_start = self.t
        self.step_end = self.t = self.t + dt
        return self.t

    def skip_to(self, t: float) -> None:
        """Stepped synchronously and idle: modelled time moves on to ``t`` (never back)."""
        self.t = self.step_start = self.step_end = max(self.t, t)

    def hold(self) -> None:
        """Out of work for now: readings return the end of the last step."""
        self.busy = True
        self.step_start = self.step_end = self.t

    def go_idle(self) -> None:
        """Idle: modelled time flows with the wall from ``t``; any lag is dropped."""
        self.busy = False
        if self._wall_model() > self.t:
            self._wall0 = asyncio.get_running_loop().time()
            self._model0 = self.t

    def wake(self, arrival: float) -> None:
        """An arrival woke the idle engine: its next step starts at ``arrival``."""
        if not self.busy:
            self.busy = True
            self.step_start = self.step_end = arrival

    def resume(self) -> None:
        """The engine runs again: re-anchor at the wake-up arrival."""
        self.t = max(self.t, self.step_start)
        self._wall0 = asyncio.get_running_loop().time()
        self._model0 = self.t
