"""How a study spends its budget: staged search and the confirmation of the winner.

Fixed stages (``search.stages: fixed``, on when the space has speculative choices): the
first ``stage1_fraction`` of the trial budget searches the base knobs with
speculative decoding off; the rest searches speculative settings on top of the best
base configuration found, as SGLang's own auto_benchmark orders them. Each stage is
expressed as optuna's partially fixed parameters (``enqueue_trial``), so the sampler
still proposes everything that is not fixed.

Confirmation (``search.confirm_top``, ``search.repeats``): once the budget is spent,
the top configurations and the baseline run again; the winner is reported with the
median and spread of its runs. Config-only gains on one node are often single-digit
percent, so one lucky measurement must not crown a winner. A study that asks for several
repeats (``search.repeats >= 2``: a noisy node) also re-runs each new leader once during the
search (:mod:`autotune.study.search.race`), so the noise-aware estimate ranks long before the end.

``search.stages: auto`` (the default) hands the stages to
:class:`autotune.study.search.policy.SearchPolicy` (``Phases.policy``): a designed start
and stages that end when they stop improving.
"""

from __future__ import annotations

import math
import statistics
import warnings
from typing import Any, cast

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.spec import StudySpec
from autotune.study import attrs

SPEC_KEYS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")


def is_extra(t: FrozenTrial) -> bool:
    """Confirmation re-runs: outside the trial budget and the search."""
    return t.user_attrs.get(attrs.CONFIRM_OF) is not None


def feasible(t: FrozenTrial) -> bool:
    v = t.user_attrs.get(attrs.SLO_VIOLATION)
    return v is None or v <= 0


def ranked(study: optuna.Study, *, feasible_only: bool = True) -> list[FrozenTrial]:
    """Completed search trials, best first (SLO-meeting ones only when any exist)."""
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.value is not None and not is_extra(t)]
    if feasible_only and any(feasible(t) for t in done):
        done = [t for t in done if feasible(t)]
    sign = 1 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1
    return sorted(done, key=lambda t: -sign * cast(float, t.value))  # COMPLETE with a value (filtered above)


class Phases:
    def __init__(self, spec: StudySpec, study: optuna.Study) -> None:
        self.spec = spec
        self.study = study
        sp = spec.search_space.speculative
        self.spec_algos = [a for a in sp.algorithm.choices if a != "none"] if sp else []
        self.staged = spec.search.stages == "fixed" and bool(self.spec_algos)
        self.policy: Any = None  # a SearchPolicy for stages "auto", set by the driver
        self.stage1_trials = max(1, math.ceil(spec.n_trials * spec.search.stage1_fraction))
        self._rr = 0

    # ---- stages ----------------------------------------------------------
    def _waiting(self) -> int:
        return len(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    def before_ask(self, used: int) -> str | None:
        """Fix the stage's parameters for the next ask(); returns the stage name."""
        if self.policy is not None:
            return self.policy.before_ask(used)
        if not self.staged or self._waiting():
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if used < self.stage1_trials:
                self.study.enqueue_trial({"speculative_algorithm": "none"}, user_attrs={attrs.STAGE: 1})
                return "base"
            best = ranked(self.study)
            if not best:
                return None
            base = {k: v for k, v in best[0].params.items() if k not in SPEC_KEYS}
            algo = self.spec_algos[self._rr % len(self.spec_algos)]
            self._rr += 1
            self.study.enqueue_trial({**base, "speculative_algorithm": algo},
                                     user_attrs={attrs.STAGE: 2, attrs.STAGE_BASE: best[0].number})
        return "speculative"

    # ---- confirmation ----------------------------------------------------
    def _extra_runs(self, t: FrozenTrial) -> int:
        """Re-runs of ``t`` already made during the search (:mod:`autotune.study.search.race`): they count
        towards its repeats."""
        return sum(1 for u in self.study.get_trials(deepcopy=False)
                   if u.user_attrs.get(attrs.CONFIRM_OF) == t.number and u.state != TrialState.FAIL)

    def wants_confirmation(self) -> bool:
        s = self.spec.search
        return s.confirm_top > 0 and s.repeats > 0 and not self.study.user_attrs.get(attrs.CONFIRMATION_STARTED)

    def enqueue_confirmation(self) -> list[int]:
        """Queue the re-runs; returns the trial numbers they confirm."""
        s = self.spec.search
        top = ranked(self.study)[: s.confirm_top]
        seen = {json_key(t.params) for t in top}
        base = next((t for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                     if t.user_attrs.get(attrs.BASELINE) and not is_extra(t)), None)
        targets = list(top) + ([base] if base is not None and json_key(base.params) not in seen else [])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for t in targets:
                for _ in range(max(0, s.repeats - self._extra_runs(t))):
                    rerun: dict[str, Any] = {attrs.CONFIRM_OF: t.number}
                    if t.user_attrs.get(attrs.BASELINE):
                        rerun[attrs.BASELINE] = True
                    self.study.enqueue_trial(dict(t.params), user_attrs=rerun)
        self.study.set_user_attr(attrs.CONFIRMATION_STARTED, True)
        return [t.number for t in targets]

    def pending(self) -> int:
        return self._waiting()

    def summarize_confirmation(self) -> dict[str, Any]:
        """Median and spread per confirmed trial, stored with the study."""
        runs: dict[int, list[float]] = {}
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if t.value is None:
                continue
            key = t.user_attrs[attrs.CONFIRM_OF] if is_extra(t) else t.number
            runs.setdefault(key, []).append(t.value)
        out = {}
        for number, values in runs.items():
            if len(values) < 2:
                continue
            out[str(number)] = {
                "values": values,
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
                "spread_pct": round((max(values) - min(values)) / statistics.median(values) * 100, 2)
                if statistics.median(values) else None,
            }
        self.study.set_user_attr(attrs.CONFIRMATION, out)
        return out


def json_key(params: dict[str, Any]) -> str:
    import json

    return json.dumps(params, sort_keys=True, default=str)
