"""An executor that runs trials offline, through :func:`autotune.trial.offline.evaluate`.

``run_study(spec, executor=OfflineExecutor())`` runs a whole study of the simulated
backend with the real driver (suggestion, memory pruning before launch, calibration,
failure learning, the sampler) in seconds: no server process, no HTTP, every figure
in modelled time. It is an :class:`~autotune.study.execution.executor.InlineExecutor` whose
trial body is the offline evaluator (one trial at a time, synchronously). Used to
measure search strategies (``benchmarks/search_efficiency.py``) and to try a study
file before spending GPUs.
"""

from __future__ import annotations

from collections.abc import Callable

from autotune.study.execution.executor import InlineExecutor
from autotune.trial.contract import Reporter, TrialRequest, TrialResult
from autotune.trial.offline import evaluate as offline_evaluate

Evaluator = Callable[[TrialRequest], TrialResult]


class OfflineExecutor(InlineExecutor):
    """Runs each submitted trial through an offline evaluator, one at a time.

    ``evaluate`` defaults to :func:`autotune.trial.offline.evaluate`; a benchmark may pass
    a cached lookup of the same evaluator. ``on_result(number, request, result)`` is
    called for every finished trial (for accounting: GPU-seconds, launches). No reporter:
    offline evaluation has no mid-load early stopping.
    """

    def __init__(self, evaluate: Evaluator = offline_evaluate,
                 on_result: Callable[[int, TrialRequest, TrialResult], None] | None = None) -> None:
        def body(request: TrialRequest, _reporter: Reporter | None) -> TrialResult:
            return evaluate(request)

        super().__init__(None, body=body, on_result=on_result)


__all__ = ["Evaluator", "OfflineExecutor"]
