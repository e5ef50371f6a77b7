"""Plain data of the simulated engine's public API (:mod:`autotune.sim.engine.core` re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import AutotuneError
from autotune.sim.engine.request import RequestHandle


class EngineStopped(AutotuneError):
    """The engine stopped (shut down or died of a runtime OOM) while a request was in flight,
    or it was asked for something its mode does not allow (stepping a started engine)."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """New tokens of one request, as one streamed piece (what :meth:`Engine.generate` yields)."""

    token_ids: list[int]
    modelled_time_s: float
    finished: bool
    finish_reason: str | None


@dataclass(frozen=True, slots=True)
class StepResult:
    """One scheduler iteration, as :meth:`Engine.step_once` reports it.

    ``kind`` is "prefill", "decode" or "abort" (a request dropped because it can never
    fit: no modelled time passes). ``tokens``/``chunks`` count what the step streamed
    (each request's chunks are on its :class:`RequestHandle`); ``ended`` holds every
    request that finished, was aborted or failed in this step, in submission order.
    ``died`` is the engine's death reason when this step killed it (runtime OOM).
    """

    kind: str
    start_s: float
    duration_s: float
    batch_size: int
    tokens: int
    chunks: int
    ended: tuple[RequestHandle, ...]
    died: str | None = None

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


__all__ = ["Chunk", "EngineStopped", "StepResult"]
