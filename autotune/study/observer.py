"""What the views of a running or finished study read from the study layer: the ``Progress`` hooks the
driver calls, and the trial counts (``budget_used``, ``count_states``) both the driver's budget and the
views (``autotune status``, the progress bar) go by. Here, not in the driver, so the results layer
reads them without importing the driver."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.study import attrs

NO_KNOB_SET = "with no knob set (SGLang's own values)"  # a launch line's params when it sets none


@dataclass
class Progress:
    """Observer of the sweep; every hook optional. The CLI plugs rich or plain lines in."""

    on_start: Callable[[optuna.Study, int], None] | None = None
    on_trial_end: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None
    on_launch: Callable[[int, dict[str, Any]], None] | None = None  # the knobs it sets; an unset one left out
    on_end: Callable[[], None] | None = None  # the sweep ended (done, interrupted or failed)


def budget_used(study: optuna.Study) -> int:
    """Finished trials that count towards ``n_trials`` (interrupted ones are re-run instead)."""
    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)):
        if t.user_attrs.get(attrs.RETRIED) or t.user_attrs.get(attrs.CONFIRM_OF) is not None:
            continue
        n += 1
    return n


def count_states(study: optuna.Study) -> dict[str, int]:
    """How many trials the study holds in each state (``COMPLETE``, ``PRUNED``, ``FAIL``, ...)."""
    out: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        out[t.state.name] = out.get(t.state.name, 0) + 1
    return out
