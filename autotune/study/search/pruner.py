"""Early stopping that stops only clearly worse trials.

A load point's intermediate throughput is noisy early on (ramp-up, a loaded host),
and a wrong stop loses a configuration for good, so the rule is conservative: stop a
trial only when its value at a step is worse than the median of earlier trials at
the same step by more than ``margin`` (15 % by default), after ``n_warmup_steps``
and once ``n_startup_trials`` trials have reported that step.
"""

from __future__ import annotations

import statistics

import optuna
from optuna.pruners import BasePruner
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from autotune.spec import StudySpec


class ClearlyWorsePruner(BasePruner):
    def __init__(self, *, margin: float = 0.15, n_startup_trials: int = 4, n_warmup_steps: int = 2) -> None:
        if not 0 < margin < 1:
            raise ValueError(f"margin must be in (0, 1), got {margin}")
        if n_startup_trials < 1 or n_warmup_steps < 0:
            raise ValueError(f"n_startup_trials >= 1 and n_warmup_steps >= 0, got {n_startup_trials}, {n_warmup_steps}")
        self.margin = margin
        self.n_startup_trials = n_startup_trials
        self.n_warmup_steps = n_warmup_steps

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or step < self.n_warmup_steps:
            return False
        value = trial.intermediate_values[step]
        others = [
            t.intermediate_values[step]
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if step in t.intermediate_values
        ]
        if len(others) < self.n_startup_trials:
            return False
        median = statistics.median(others)
        if study.direction == StudyDirection.MAXIMIZE:
            return value < median * (1 - self.margin)
        return value > median * (1 + self.margin)


def make_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    """The study's pruner: ``search.early_stopping`` on, the clearly-worse rule; off, none."""
    es = spec.search.early_stopping
    if not es.enabled:
        return optuna.pruners.NopPruner()
    return ClearlyWorsePruner(margin=es.margin, n_startup_trials=es.n_startup_trials,
                              n_warmup_steps=es.n_warmup_steps)
