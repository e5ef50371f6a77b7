"""Racing on a noisy node: each new leader runs once more during the search.

A study that asks for several repeats (``search.repeats >= 2``) says its node is noisy. There a
lucky single run takes the lead, and until the confirmation re-runs at the end it is what
``best`` hands over. Re-running each new leader once, at once (as successive halving and racing
confirm a challenger before trusting it), measures the run-to-run noise early, so the
noise-aware estimate (:mod:`autotune.study.search.estimate`) ranks from then on and a lucky leader
loses the lead after one launch. The re-run is a confirmation re-run (``confirm_of``, outside
the trial budget) and counts towards the leader's confirmation repeats
(:meth:`autotune.study.phases.Phases.enqueue_confirmation`).
"""

from __future__ import annotations

import warnings
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.spec import StudySpec
from autotune.study import attrs
from autotune.study.phases import ranked
from autotune.study.search.estimate import by_estimate, estimates, key_of


def races(spec: StudySpec) -> bool:
    """Whether the study's leaders are re-run during the search (several repeats asked for)."""
    return spec.search.confirm_top > 0 and spec.search.repeats >= 2


def enqueue_race(spec: StudySpec, study: optuna.Study) -> int | None:
    """Queue one re-run of the configuration the study would hand over now, when it rests on a
    single run and nothing else is queued; returns the trial it re-runs."""
    if not races(spec) or study.user_attrs.get(attrs.CONFIRMATION_STARTED) \
            or study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        return None
    top = standings(study)
    if not top or _runs_of(study, top[0]) >= 2:
        return None
    leader = top[0]
    rerun: dict[str, Any] = {attrs.CONFIRM_OF: leader.number, attrs.RACE: True}
    if leader.user_attrs.get(attrs.BASELINE):
        rerun[attrs.BASELINE] = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study.enqueue_trial(dict(leader.params), user_attrs=rerun)
    return leader.number


def standings(study: optuna.Study) -> list[FrozenTrial]:
    """One search trial per configuration, best first: by the noise-aware estimate once re-runs
    measured the noise, else by the best single run (``autotune.results.summary.best_trial``
    without the confirmation medians, which exist only after the search)."""
    top = ranked(study)
    pooled = estimates(study)
    if pooled:
        top = by_estimate(top, pooled, study.direction)
    out, seen = [], set()
    for t in top:
        if key_of(t) not in seen:
            seen.add(key_of(t))
            out.append(t)
    return out


def _runs_of(study: optuna.Study, t: FrozenTrial) -> int:
    """Completed and running launches of ``t``'s parameters (search trials and re-runs; a queued
    one is not counted: :func:`enqueue_race` waits until nothing is queued)."""
    key = key_of(t)
    return sum(1 for u in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
               if key_of(u) == key and u.user_attrs.get(attrs.REUSED_FROM) is None)


__all__ = ["enqueue_race", "races", "standings"]
