"""Sampler adaptations for an ask/tell driver."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.samplers import BruteForceSampler


class GridSampler(BruteForceSampler):
    """Exhaustive grid (optuna's BruteForceSampler, conditional spaces and stepped floats
    included) that says when it is done instead of calling ``study.stop()``, which only
    works inside ``Study.optimize`` and would leave the told trial unfinished under ask/tell."""

    exhausted = False

    def after_trial(self, study: optuna.Study, trial: Any, state: Any, values: Any) -> None:
        try:
            super().after_trial(study, trial, state, values)
        except RuntimeError as exc:
            if "Study.stop" not in str(exc):
                raise
            self.exhausted = True
