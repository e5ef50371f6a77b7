"""Racing on a noisy node: each new leader runs again during the search, to three runs (at most ``repeats``).

A study that asks for several repeats (``search.repeats >= 2``) says its node is noisy. There a
lucky single run takes the lead, and until the confirmation re-runs at the end it is what
``best`` hands over. Re-running each new leader at once (as successive halving and racing
confirm a challenger before trusting it) measures the run-to-run noise early, so the
noise-aware estimate (:mod:`autotune.study.search.estimate`) ranks from then on and a lucky leader
loses the lead after a launch or two (:data:`RACE_RUNS`). A re-run is a confirmation re-run
(``confirm_of``, outside the trial budget) and counts towards the leader's confirmation repeats
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

#: A leader is re-run until it has this many runs (at most the study's ``repeats``). Two (one re-run)
#: let a configuration that drew two lucky runs take the pick and hold it until the confirmation; with
#: three, it must be lucky three times. Measured with ``benchmarks/search_efficiency.py`` (GPU-seconds
#: until the pick stays within 2 % of the optimum, median; benchmarks/README.md), two runs -> three:
#: ``benchmarks/scenarios/6-noisy-qwen32b-h200.yaml`` (4 % noise, confirmation 3 x 3), 80 seeds,
#: 1,294 -> 58 (58: the first launch, 1.9 % off, keeps the pick to the end in most seeds; on target
#: at the end in 56 -> 61 of 80; per set of 20: 1,331 / 1,274 / 524 / 1,916 ->
#: 707 / 1,078 / 58 / 58; within 1 %, on target at the end 45 -> 48 of 80); four runs (the whole
#: confirmation during the search) 1,308 / 1,727 on seeds 0-39. The price, where the leaders are far
#: apart and every extra run is spent for nothing (``benchmarks/scenarios_noise/``, 40 seeds):
#: scenario 2 at 4 % 6,013 -> 8,978, scenario 3 at 4 % 726 -> 963, on target at the end unchanged
#: (39 and 40 of 40); scenario 4 at 4 % and scenario 6 at 2 % unchanged; at 8 % 2,313 -> 2,390, on
#: target 22 -> 25 of 40. A third run only when the leader's lead is within one standard error of the
#: runner-up (tried) gave two runs' figures on scenario 6; within two, three runs' on scenarios 6 and 3.
#: A study that asks for repeats asks for a pick it can trust: on every landscape measured, the pick was
#: on target at the end as often or more often.
RACE_RUNS = 3


def races(spec: StudySpec) -> bool:
    """Whether the study's leaders are re-run during the search (several repeats asked for)."""
    return spec.search.confirm_top > 0 and spec.search.repeats >= 2


def enqueue_race(spec: StudySpec, study: optuna.Study) -> int | None:
    """Queue one re-run of the best-ranked configuration when it has fewer than :func:`race_runs` runs
    and nothing else is queued; returns the trial it re-runs."""
    if not races(spec) or study.user_attrs.get(attrs.CONFIRMATION_STARTED) \
            or study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        return None
    top = standings(study)
    if not top or _runs_of(study, top[0]) >= race_runs(spec):
        return None
    leader = top[0]
    rerun: dict[str, Any] = {attrs.CONFIRM_OF: leader.number, attrs.RACE: True}
    if leader.user_attrs.get(attrs.BASELINE):
        rerun[attrs.BASELINE] = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study.enqueue_trial(dict(leader.params), user_attrs=rerun)
    return leader.number


def race_runs(spec: StudySpec) -> int:
    """Runs a leader gets during the search: :data:`RACE_RUNS`, at most the study's ``repeats`` (so at
    least one of its confirmation runs is left for the end, where every finalist is run)."""
    return min(RACE_RUNS, spec.search.repeats)


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


__all__ = ["RACE_RUNS", "enqueue_race", "race_runs", "races", "standings"]
