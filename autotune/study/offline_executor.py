"""An executor that runs trial bodies offline, through :func:`autotune.sim.offline.evaluate`.

``run_study(spec, executor=OfflineExecutor())`` runs a whole study of the simulated
backend with the real driver (suggestion, memory pruning before launch, calibration,
failure learning, the sampler) in seconds: no server process, no HTTP, every figure
in modelled time. It is an :class:`~autotune.study.executor.InlineExecutor` whose
trial body is the offline evaluator (one trial at a time, synchronously). Used to
measure search strategies (``benchmarks/search_efficiency.py``) and to try a study
file before spending GPUs.
"""

from __future__ import annotations

from typing import Callable

from autotune.study.executor import InlineExecutor
from autotune.study.trial import Reporter, TrialRequest, TrialResult

Evaluator = Callable[[TrialRequest], TrialResult]


class OfflineExecutor(InlineExecutor):
    """Runs each submitted trial through an offline evaluator, one at a time.

    ``evaluate`` defaults to :func:`autotune.sim.offline.evaluate`; a benchmark may pass
    a cached lookup of the same evaluator. ``on_result(number, request, result)`` is
    called for every finished trial (for accounting: GPU-seconds, launches). No reporter:
    offline evaluation has no mid-load early stopping.
    """

    def __init__(self, evaluate: Evaluator | None = None,
                 on_result: Callable[[int, TrialRequest, TrialResult], None] | None = None) -> None:
        if evaluate is None:
            from autotune.sim.offline import evaluate as default_evaluate

            evaluate = default_evaluate
        chosen: Evaluator = evaluate

        def body(request: TrialRequest, _reporter: Reporter | None) -> TrialResult:
            return chosen(request)

        super().__init__(None, body=body, on_result=on_result)


__all__ = ["OfflineExecutor", "Evaluator"]
