"""What a trial is and how it is measured (see docs/ARCHITECTURE.md).

* :mod:`~autotune.trial.contract` - :class:`TrialRequest`, :class:`TrialResult`, :class:`TrialState`;
* :mod:`~autotune.trial.load_points` - the load-point plan (concurrency levels x rate bisection)
  and the value pick, ONE function over a ``measure(point)`` callback;
* :mod:`~autotune.trial.live` - the live evaluator: launch, load, live kill, teardown;
* :mod:`~autotune.trial.offline` - the offline evaluator: the simulator's engine in modelled time;
* :mod:`~autotune.trial.argv`, :mod:`~autotune.trial.live_kill` - shared by both evaluators.

Change "how a trial is evaluated" in :mod:`~autotune.trial.load_points` (and the study file's
``workload`` / ``objective`` in :mod:`autotune.spec`).

``offline_load``, ``offline_startup``: the offline evaluator's load and startup in modelled time (private to it).
"""

from autotune.trial.contract import Reporter, TrialRequest, TrialResult, TrialState

__all__ = ["Reporter", "TrialRequest", "TrialResult", "TrialState"]
