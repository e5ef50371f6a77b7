"""Executors run trial bodies. The driver owns the interface; Ray and inline implement it.

The driver never blocks inside an executor for longer than ``wait(timeout)``; ask/tell
stay in the driver.
"""

from __future__ import annotations

import abc
from collections.abc import Callable

from autotune.trial.contract import Reporter, TrialRequest, TrialResult
from autotune.trial.live import run_trial_body

ReporterFactory = Callable[[int], Reporter | None]
#: A trial body: ``body(request, reporter) -> TrialResult`` (run_trial_body, or an offline evaluator).
TrialBody = Callable[[TrialRequest, Reporter | None], TrialResult]


class Executor(abc.ABC):
    """Runs trial bodies; at most ``slots_free()`` more may start now."""

    @abc.abstractmethod
    def slots_free(self, request: TrialRequest | None = None) -> int:
        """How many more trials may start now (for ``request``'s GPU needs when given)."""

    @abc.abstractmethod
    def submit(self, number: int, request: TrialRequest) -> None:
        """Start the trial body of optuna trial ``number``."""

    @abc.abstractmethod
    def wait(self, timeout: float) -> list[tuple[int, TrialResult]]:
        """Results of trials that finished, waiting at most ``timeout`` seconds for one."""

    @abc.abstractmethod
    def in_flight(self) -> list[int]:
        """Numbers of the trials still running."""

    @abc.abstractmethod
    def shutdown(self, *, cancel: bool) -> None:
        """Stop; with ``cancel`` tear down what still runs (servers included)."""


class InlineExecutor(Executor):
    """One trial at a time, in this process: for debugging and the simplest setups.

    ``body(request, reporter)`` runs one trial (default :func:`run_trial_body`: a real
    launch); :class:`~autotune.study.execution.offline.OfflineExecutor` passes an offline
    evaluator. ``on_result(number, request, result)`` is called for every finished trial.
    """

    def __init__(self, reporter_factory: ReporterFactory | None = None, *, body: TrialBody | None = None,
                 on_result: Callable[[int, TrialRequest, TrialResult], None] | None = None) -> None:
        self._pending: list[tuple[int, TrialRequest]] = []
        self._reporter_factory = reporter_factory
        self._body: TrialBody = body if body is not None else run_trial_body
        self._on_result = on_result

    def slots_free(self, request: TrialRequest | None = None) -> int:
        return 0 if self._pending else 1

    def submit(self, number: int, request: TrialRequest) -> None:
        self._pending.append((number, request))

    def wait(self, timeout: float) -> list[tuple[int, TrialResult]]:
        if not self._pending:
            return []
        number, request = self._pending[0]
        reporter = self._reporter_factory(number) if self._reporter_factory else None
        result = self._body(request, reporter)
        self._pending.pop(0)
        if self._on_result is not None:
            self._on_result(number, request, result)
        return [(number, result)]

    def in_flight(self) -> list[int]:
        return [n for n, _ in self._pending]

    def shutdown(self, *, cancel: bool) -> None:
        self._pending.clear()  # a running body tears its own server down in its finally
