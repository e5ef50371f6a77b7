"""An executor that runs trial bodies offline, through :func:`autotune.sim.offline.evaluate`.

``run_study(spec, executor=OfflineExecutor())`` runs a whole study of the simulated
backend with the real driver (suggestion, memory pruning before launch, calibration,
failure learning, the sampler) in seconds: no server process, no HTTP, every figure
in modelled time. One trial at a time, synchronously, like
:class:`~autotune.study.executor.InlineExecutor`. Used to measure search strategies
(``benchmarks/search_efficiency.py``) and to try a study file before spending GPUs.
"""

from __future__ import annotations

import logging
from typing import Callable

from autotune.study.executor import Executor
from autotune.study.trial import TrialRequest, TrialResult

log = logging.getLogger(__name__)

Evaluator = Callable[[TrialRequest], TrialResult]


class OfflineExecutor(Executor):
    """Runs each submitted trial through an offline evaluator, one at a time.

    ``evaluate`` defaults to :func:`autotune.sim.offline.evaluate`; a benchmark may pass
    a cached lookup of the same evaluator. ``on_result(number, request, result)`` is
    called for every finished trial (for accounting: GPU-seconds, launches).
    """

    def __init__(self, evaluate: Evaluator | None = None,
                 on_result: Callable[[int, TrialRequest, TrialResult], None] | None = None) -> None:
        if evaluate is None:
            from autotune.sim.offline import evaluate as default_evaluate

            evaluate = default_evaluate
        self._evaluate = evaluate
        self._on_result = on_result
        self._pending: list[tuple[int, TrialRequest]] = []

    def slots_free(self, request: TrialRequest | None = None) -> int:
        return 0 if self._pending else 1

    def submit(self, number: int, request: TrialRequest) -> None:
        self._pending.append((number, request))

    def wait(self, timeout: float) -> list[tuple[int, TrialResult]]:
        if not self._pending:
            return []
        number, request = self._pending[0]
        result = self._evaluate(request)
        self._pending.pop(0)
        if self._on_result is not None:
            self._on_result(number, request, result)
        return [(number, result)]

    def in_flight(self) -> list[int]:
        return [n for n, _ in self._pending]

    def shutdown(self, *, cancel: bool) -> None:
        self._pending.clear()


__all__ = ["OfflineExecutor", "Evaluator"]
