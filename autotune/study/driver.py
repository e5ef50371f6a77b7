"""The study driver: the only writer of optuna storage (ask/tell).

The loop is four named phases, run in turn until the sweep is over:

* budget - stop asking for search trials once ``n_trials``, the wall time or the GPU
  hours are spent, or the grid is exhausted;
* confirmation - once the search is over and nothing runs, queue the re-runs of the
  top trials and the baseline (:mod:`autotune.study.phases`);
* next launch - while the executor has room: ask, build and check the candidate
  (:mod:`autotune.study.candidates`: pruned before launch when SGLang would refuse it,
  the memory model condemns it or an earlier failure implies it), reuse the stored
  result of a launch with the same resolved argv (search phase only), else submit;
* finish - record what a finished trial carries (:mod:`autotune.study.record`) and tell.

Resume: a study left with RUNNING trials by a killed run gets those trials marked
FAIL (interrupted) and their parameters enqueued again (the same path as a Ctrl-C of
this run); server processes of the killed run are reaped before anything launches.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import AutotuneError
from autotune.launch import ProcessRegistry
from autotune.launch.cleanup import note_interrupt, raise_if_interrupted
from autotune.outcome import FailureKind
from autotune.spec import StudySpec
from autotune.study import attrs
from autotune.study.candidates import Candidates, SglangCheck, check_sglang, without_dead_knobs
from autotune.study.execution.disk_fault import as_disk_fault
from autotune.study.execution.executor import Executor, InlineExecutor
from autotune.study.infeasible import LEARNED_KINDS
from autotune.study.observer import NO_KNOB_SET, Progress, budget_used, count_states
from autotune.study.phases import Phases
from autotune.study.prediction import Predictor
from autotune.study.record import Recorder
from autotune.study.rerun import run_once_more
from autotune.study.reuse import copy_result, launch_key, stored_result
from autotune.study.search import race
from autotune.study.search.policy import SearchPolicy
from autotune.study.search.pruner import make_pruner
from autotune.study.search.samplers import make_sampler
from autotune.study.storage.identity import check_same_study
from autotune.study.storage.lock import DriverLock, study_lock
from autotune.study.storage.opening import artifact_store, open_storage, open_study, store_artifact
from autotune.study.warm_start import LINEAGE, PriorSampler, WarmStart
from autotune.trial.contract import TrialRequest, TrialResult
from autotune.trial.contract import TrialState as BodyState

log = logging.getLogger(__name__)


@dataclass
class RunSummary:
    study_name: str
    finished: int
    states: dict[str, int] = field(default_factory=dict)
    reaped: list[int] = field(default_factory=list)
    interrupted: list[int] = field(default_factory=list)
    confirmations: int = 0  # re-runs of the top trials and the baseline (not in ``finished``)
    retried: int = 0  # interrupted trials, each re-run by another (not in ``finished``)


@dataclass
class _LoopState:
    """Where the sweep stands between two steps of the loop."""

    t0: float
    confirming: bool  # the confirmation re-runs are queued
    stopped: str | None = None  # why no new search trial starts (budget, exhausted grid)
    out_of_budget: bool = False  # wall time or GPU hours: no confirmation re-runs either


class StudyDriver:
    def __init__(self, spec: StudySpec, *, executor: Executor | None = None, progress: Progress | None = None,
                 sglang: SglangCheck | None = None):
        self._sglang = sglang  # check_sglang's answer when run_study asked first (else _prepare asks)
        predictor = Predictor(spec, self._stored_calibration)
        # The space after pruning (a value or knob that cannot run or matter on this node and
        # release is out), once: the sampler, the designed start, the warm start's configurations,
        # the references and every check below draw from it, never from the study file's lists.
        spec, removed = without_dead_knobs(spec, predictor)
        self.spec = spec
        self.progress = progress or Progress()
        self.warm = WarmStart.load(spec)  # earlier studies: a missing one stops here, before any storage is made
        self.storage = open_storage(spec)
        # A study of the same name created from another study file: refused before anything is
        # asked, launched or written (its trials measured something else).
        check_same_study(spec, self.storage)
        # Storage only opens; the search (sampler, pruner) is the driver's. The one "sampler: ..." line.
        self.study = open_study(spec, storage=self.storage, sampler=make_sampler(spec, say=True),
                                pruner=make_pruner(spec))
        self.store = artifact_store(spec)
        self.candidates = Candidates(spec, self.study, predictor, removed)
        self.recorder = Recorder(spec, self.study, self.candidates)
        self.phases = Phases(spec, self.study)
        self.phases.policy = SearchPolicy.for_study(spec, self.study, self.candidates)
        self._live: dict[int, optuna.Trial] = {}  # launched or waiting on a launch of the same argv
        self._launching: dict[str, int] = {}  # launch key -> the trial in flight with it
        self._followers: dict[int, list[optuna.Trial]] = {}  # trial in flight -> trials reusing its result
        self._baseline_queued = False  # SGLang's defaults are in the study (see _baseline_due)
        self.executor = executor or self._default_executor()

    # ---- setup ---------------------------------------------------------
    def _stored_calibration(self) -> dict[str, Any] | None:
        cal = self.study.user_attrs.get(attrs.CALIBRATION) or self.warm.calibration()
        return dict(cal) if cal else None

    def _start_warm(self, new: bool) -> None:
        """Decide what the earlier studies carry, say it, and give it to the study: the top
        configurations queued (a new study only), the sampler's prior, the lineage."""
        if not self.warm:
            return
        widened = self.candidates.widened_spec()
        self.warm.decide(widened, self.candidates.outside)
        for line in self.warm.lines():
            log.info("%s", line)
        if new:
            n = self.warm.enqueue_top(self.study)
            self.study.set_user_attr(LINEAGE, self.warm.lineage())
            if n:
                log.info("warm start: %d earlier configuration(s) queued first", n)
        prior = self.warm.prior_trials(widened)
        if prior and not isinstance(self.study.sampler, optuna.samplers.BruteForceSampler):
            self.study.sampler = PriorSampler(self.study.sampler, prior)
            log.info("warm start: %d earlier trial(s) in the sampler's history", len(prior))

    def _default_executor(self) -> Executor:
        if self.spec.executor.kind == "ray":
            from autotune.study.execution.ray.executor import RayExecutor  # Ray is imported only when used

            return RayExecutor(self.spec, reporter_factory=self._reporter)
        return InlineExecutor(reporter_factory=self._reporter)

    def _reporter(self, number: int) -> Callable[[int, float], bool] | None:
        trial = self._live.get(number)
        if trial is None or trial.user_attrs.get(attrs.CONFIRM_OF) is not None:
            return None  # confirmation re-runs are never stopped early
        if trial.user_attrs.get(attrs.BASELINE) or trial.user_attrs.get(attrs.REFERENCE):
            # SGLang's defaults and the study's references are what the gain is measured
            # against: run last (search.baseline: last), a worse baseline would be cut short
            # and the study would report no gain at all.
            return None
        if self.spec.has_slo:
            return None  # throughput so far says nothing about meeting the SLO: no early stop

        def report(step: int, value: float) -> bool:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trial.report(value, step)
                return not trial.should_prune()

        return report

    def reap_leftovers(self) -> list[int]:
        return ProcessRegistry(str(self.spec.run_path), self.spec.name).reap_leftovers()

    # ---- interrupted trials: the one way to mark and requeue them -------
    def _requeue_interrupted(self, number: int, params: dict[str, Any], user_attrs: dict[str, Any],
                             reason: str) -> None:
        """FAIL (interrupted) trial ``number`` and enqueue its parameters again (outside the budget)."""
        trial_id = self._trial_id(number)
        for key, value in ((attrs.FAILURE_KIND, FailureKind.INTERRUPTED.value), (attrs.REASON, reason),
                           (attrs.RETRIED, True)):
            self.storage.set_trial_user_attr(trial_id, key, value)
        self.study.tell(number, state=TrialState.FAIL, skip_if_finished=True)
        self._enqueue_retry(number, params, user_attrs)

    def _trial_id(self, number: int) -> int:
        return self.storage.get_trial_id_from_study_id_trial_number(
            self.storage.get_study_id_from_name(self.spec.name), number)

    def recover_interrupted(self) -> list[int]:
        """RUNNING trials of a dead run: FAIL (interrupted), parameters enqueued again."""
        numbers = []
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            self._requeue_interrupted(t.number, t.params, t.user_attrs,
                                      "the orchestrator stopped during this trial; re-run")
            numbers.append(t.number)
        return numbers

    def _fail_in_flight(self) -> None:
        for number, trial in list(self._live.items()):
            try:
                self._requeue_interrupted(number, trial.params, trial.user_attrs,
                                          "interrupted by the user; re-run on resume")
            except Exception as exc:  # storage may be gone on the way down; resume handles RUNNING too
                log.warning("could not mark trial %d interrupted: %s", number, exc)
            self._live.pop(number, None)

    def _enqueue_retry(self, number: int, params: dict[str, Any], user_attrs: dict[str, Any],
                       **extra: Any) -> None:
        kept: dict[str, Any] = {attrs.RETRY_OF: number, **{k: v for k, v in extra.items() if v is not None}}
        for key in (attrs.BASELINE, attrs.CONFIRM_OF, attrs.STAGE):
            if user_attrs.get(key) is not None:
                kept[key] = user_attrs[key]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.study.enqueue_trial(params, user_attrs=kept)

    # ---- the run ---------------------------------------------------------
    def run(self) -> RunSummary:
        """Run the study to its budget; the caller holds its locks (:func:`run_study`)."""
        spec = self.spec
        summary = RunSummary(study_name=spec.name, finished=0)
        try:
            self._prepare(summary)
        except BaseException:  # a damaged study, a refused warm start: no Ray instance left behind
            self.executor.shutdown(cancel=True)
            raise
        if self.progress.on_start:
            self.progress.on_start(self.study, spec.n_trials)
        old_term = signal.signal(signal.SIGTERM, _raise_interrupt) if _main_thread() else None
        try:
            self._loop()
        except KeyboardInterrupt:
            log.warning("interrupted: tearing down %d trial(s) in flight", len(self.executor.in_flight()))
            self.executor.shutdown(cancel=True)
            self._fail_in_flight()
            raise
        except OSError as exc:  # a full or read-only disk under the run directory
            fault = as_disk_fault(exc)
            if fault is None:
                raise
            log.error("stopping: %s", fault)
            self.executor.shutdown(cancel=True)
            raise fault from None
        except AutotuneError as exc:  # storage gone for good, the local Ray instance died, ...
            log.error("stopping: %s; tearing down %d trial(s) in flight (they run again on resume)",
                      str(exc).splitlines()[0], len(self.executor.in_flight()))
            self.executor.shutdown(cancel=True)  # left RUNNING: resume marks them interrupted
            raise
        finally:
            if old_term is not None:
                signal.signal(signal.SIGTERM, old_term)
            if self.progress.on_end:
                self.progress.on_end()
        self.executor.shutdown(cancel=False)
        summary.finished = budget_used(self.study)
        summary.states = count_states(self.study)
        done = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))
        summary.confirmations = sum(1 for t in done if t.user_attrs.get(attrs.CONFIRM_OF) is not None)
        summary.retried = sum(1 for t in done if t.user_attrs.get(attrs.RETRIED)
                              and t.user_attrs.get(attrs.CONFIRM_OF) is None)
        return summary

    def _prepare(self, summary: RunSummary) -> None:
        """Before the loop: the study's own checks, what an earlier run left (servers, trials
        it was running), the baseline and the warm start."""
        self.candidates.preflight(self._sglang)
        summary.reaped = self.reap_leftovers()
        if summary.reaped:
            log.warning("ended %d server process(es) left behind by an earlier run", len(summary.reaped))
        summary.interrupted = self.recover_interrupted()
        if summary.interrupted:
            log.warning("trials %s were interrupted by an earlier run; their parameters run again",
                        summary.interrupted)
        new = not self.study.get_trials(deepcopy=False)
        self.candidates.ensure_baseline()
        self._start_warm(new)

    # ---- the loop, as named phases ----------------------------------------
    def _loop(self) -> None:
        # A resumed study may hold confirmation re-runs queued by the interrupted run.
        st = _LoopState(t0=time.monotonic(), confirming=bool(self.study.user_attrs.get(attrs.CONFIRMATION_STARTED)))
        while True:
            raise_if_interrupted()  # a Ctrl-C whose KeyboardInterrupt a transport callback swallowed
            self._budget_phase(st)
            self._confirmation_phase(st)
            self._launch_phase(st)
            self._finish_phase()
            if self._sweep_over(st):
                if st.confirming:
                    self.phases.summarize_confirmation()
                return

    def _searching(self, st: _LoopState) -> bool:
        return st.stopped is None and budget_used(self.study) < self.spec.n_trials

    def _budget_phase(self, st: _LoopState) -> None:
        """Stop asking for search trials once a budget is spent or the grid is exhausted."""
        if st.stopped is not None:
            return
        b = self.spec.budget
        if b.wall_time_s is not None and time.monotonic() - st.t0 >= b.wall_time_s:
            st.stopped = f"wall time {b.wall_time_s:g} s reached"
        elif b.gpu_hours is not None:
            spent = sum(t.user_attrs.get(attrs.GPU_SECONDS) or 0.0 for t in self.study.get_trials(deepcopy=False))
            if spent >= b.gpu_hours * 3600:
                st.stopped = f"GPU budget {b.gpu_hours:g} h reached ({spent / 3600:.2f} h spent)"
        if st.stopped is not None:
            st.out_of_budget = True
            log.warning("budget: %s; no new trials", st.stopped)
        elif self._grid_exhausted():
            st.stopped = "every candidate of the grid was tried"
            log.info("budget: %s", st.stopped)

    def _grid_exhausted(self) -> bool:
        return bool(getattr(self.study.sampler, "exhausted", False))  # only autotune's GridSampler has it

    def _wants_confirmation(self, st: _LoopState) -> bool:
        return not st.out_of_budget and not st.confirming and self.phases.wants_confirmation()

    def _baseline_due(self, st: _LoopState) -> bool:
        """Queue SGLang's defaults (``search.baseline: last``) once the search is down to the trials
        they take, or over early (exhausted grid); never past a wall-time or GPU budget. The search's
        first launch is then a candidate that can win rather than a reference point, and the defaults
        run right before the confirmation re-runs, back to back with the winner."""
        if self._baseline_queued or st.out_of_budget:
            return False
        if self.candidates.baseline_enqueued():  # "first", or a resumed study
            self._baseline_queued = True
            return False
        left = self.spec.n_trials - budget_used(self.study) - len(self._live)
        if st.stopped is None and not self._grid_exhausted() and left > self.candidates.baseline_launches():
            return False
        self.candidates.enqueue_baseline()
        self._baseline_queued = True
        log.info("launching SGLang's defaults (the baseline) as the search's last trial")
        return True

    def _confirmation_phase(self, st: _LoopState) -> None:
        """Once the search is over and nothing runs: queue the re-runs of the top trials and the baseline."""
        self._baseline_due(st)
        if self._searching(st) or self._live or (self.phases.pending() and not st.confirming) \
                or not self._wants_confirmation(st):
            return
        numbers = self.phases.enqueue_confirmation()
        st.confirming = True
        base = {t.number for t in self.study.get_trials(deepcopy=False) if t.user_attrs.get(attrs.BASELINE)}
        shown = [f"{n} (the baseline)" if n in base else str(n) for n in numbers]
        log.info("confirming trials %s with %d more run(s) each", ", ".join(shown) or "none",
                 self.spec.search.repeats)

    def _launch_phase(self, st: _LoopState) -> None:
        """Start trials while the executor has room: search trials within the budget, then the
        queued confirmation re-runs."""
        while self.executor.slots_free() > 0:
            self._baseline_due(st)
            used = budget_used(self.study)
            if st.stopped is None and not self._grid_exhausted() and used + len(self._live) < self.spec.n_trials:
                if race.enqueue_race(self.spec, self.study) is None:  # a new leader on a noisy node: re-run first
                    self.phases.before_ask(used)
            elif not (self.phases.pending() and (st.confirming or not st.out_of_budget)):
                return
            req = self._next_launch(confirming=st.confirming)
            if req is not None:
                self.executor.submit(req.trial_number, req)

    def _finish_phase(self) -> None:
        for number, result in self.executor.wait(timeout=1.0):
            self._finish(number, result)

    def _sweep_over(self, st: _LoopState) -> bool:
        if self._live or self.executor.in_flight():
            return False
        if self._searching(st) and not self._grid_exhausted():
            return False
        if self.phases.pending() and (st.confirming or not st.out_of_budget):
            return False
        return not self._wants_confirmation(st)

    # ---- one trial -------------------------------------------------------
    def _next_launch(self, *, confirming: bool) -> TrialRequest | None:
        """Ask for a trial; prune it before launch, reuse a stored result of the same launch, or
        return the request to run it."""
        self._drop_outside()
        trial = self.study.ask()
        try:
            cand = self.candidates.candidate(trial)
        except Exception as exc:  # a bug, not the candidate's: the asked trial is not left RUNNING but
            # marked interrupted and queued again, as a resume would have done with it
            asked = self.storage.get_trial(self._trial_id(trial.number))
            self._requeue_interrupted(trial.number, {**(asked.system_attrs.get(_FIXED_PARAMS) or {}), **asked.params},
                                      asked.user_attrs, f"{type(exc).__name__}: {str(exc)[:300]}")
            raise
        trial.set_user_attr(attrs.PREDICTION, cand.prediction.to_dict())
        if cand.baseline:
            trial.set_user_attr(attrs.BASELINE, True)
        if cand.notes:
            trial.set_user_attr(attrs.NOTES, cand.notes)
        refusal = self.candidates.refusal(cand, [*self.recorder.failures(), *self.warm.failures()])
        if refusal is not None:
            trial.set_user_attr(attrs.FAILURE_KIND, refusal.kind.value)
            trial.set_user_attr(attrs.REASON, refusal.reason)
            trial.set_user_attr(attrs.NOTE, f"pruned before launch: {refusal.reason}")
            self.recorder.mark_constraint(trial, violated=True)
            self.study.tell(trial, state=TrialState.PRUNED)
            log.info("trial %d pruned before launch (%s): %s", trial.number, refusal.kind, refusal.reason)
            self._notify(trial.number)
            return None
        key = launch_key(cand.config, self.spec.server.sglang_version)
        trial.set_user_attr(attrs.LAUNCH_KEY, key)
        self._live[trial.number] = trial
        if not confirming and trial.user_attrs.get(attrs.CONFIRM_OF) is None \
                and trial.user_attrs.get(attrs.RETRY_OF) is None:
            if key in self._launching:  # the same launch is in flight: take its result when it ends
                self._followers.setdefault(self._launching[key], []).append(trial)
                return None
            stored = stored_result(self.study, key)
            if stored is not None:
                self._reuse(trial, stored)
                return None
        self._launching[key] = trial.number
        req = self.candidates.request(trial.number, cand)
        # What the launch passes: a knob left unset (the CPU baseline's f: SGLang picks its own) is left out.
        shown = {k: v for k, v in attrs.as_launched(cand.params, trial.user_attrs).items() if v is not None}
        if self.progress.on_launch:
            self.progress.on_launch(trial.number, shown)
        log.info("trial %d launching %s", trial.number, _fmt_params(shown) if shown else NO_KNOB_SET)
        return req

    def _drop_outside(self) -> None:
        """Take every queued configuration the space after pruning does not hold out of the queue,
        whatever queued it (a reference, a warm start, an earlier run of a resumed study), with one
        line saying which value of which knob and why; optuna's ask would raise on it. Optuna cannot
        delete a queued trial, and a finished one without parameters breaks the grid sampler, so the
        queued trial loses its fixed parameters and the marks of what queued it: the sampler picks
        its configuration (the slot a reference or a warm start would have taken goes to the search; a
        re-run's slot, left in the queue of a study whose space changed since, is one search trial more)."""
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            self._into_space(t)
            why = self.candidates.outside(self._fixed(t))
            if why is None:
                continue
            line = f"queued {_queued_by(t.user_attrs)} dropped: {why}"
            trial_id = self._trial_id(t.number)
            self.storage.set_trial_system_attr(trial_id, _FIXED_PARAMS, {})
            for key in t.user_attrs:
                self.storage.set_trial_user_attr(trial_id, key, None)
            self.storage.set_trial_user_attr(trial_id, attrs.DROPPED, line)
            log.warning("trial %d: %s; the sampler picks this trial's configuration instead", t.number, line)

    def _fixed(self, t: FrozenTrial) -> dict[str, Any]:
        fixed = self.storage.get_trial(self._trial_id(t.number)).system_attrs.get(_FIXED_PARAMS)
        return dict(fixed or {})

    def _into_space(self, t: FrozenTrial) -> None:
        """A queued search trial launches the study file's space only: a value only the baseline holds
        (SGLang's automatic ``max_running_requests 3327``, carried by a stage built on the baseline, a
        warm start's earlier baseline, a step of f below the file's range) is replaced by its nearest
        value of the space (Candidates.into_space). SGLang's defaults, the references, and re-runs of
        a trial (confirmation, race, interrupted) launch what they queued."""
        if any(t.user_attrs.get(k) is not None for k in (attrs.BASELINE, attrs.REFERENCE, attrs.CONFIRM_OF,
                                                         attrs.RETRY_OF)):
            return
        fixed = self._fixed(t)
        inside = self.candidates.into_space(fixed)
        if inside != fixed:
            self.storage.set_trial_system_attr(self._trial_id(t.number), _FIXED_PARAMS, inside)
            moved = {k: f"{fixed[k]!r} -> {v!r}" for k, v in inside.items() if v != fixed[k]}
            log.info("trial %d: queued values outside the search space moved into it: %s", t.number, moved)

    def _reuse(self, trial: optuna.Trial, source: FrozenTrial) -> None:
        """Tell ``trial`` what ``source`` measured for the same launch argv (no launch)."""
        self._live.pop(trial.number, None)
        copy_result(trial, source)
        if source.state == TrialState.COMPLETE and source.value is not None:
            self.study.tell(trial, source.value)
        else:
            self.study.tell(trial, state=source.state)
        log.info("trial %d: same launch as trial %d, its result reused", trial.number, source.number)
        self._notify(trial.number)

    def _finish(self, number: int, result: TrialResult) -> None:
        trial = self._live.pop(number)
        self._launching = {k: n for k, n in self._launching.items() if n != number}
        self.recorder.record_result(trial, result)
        # The node's fault, not the candidate's (worker died, port taken, server killed or hung): once more.
        first_death = run_once_more(result.failure_kind, result.evidence, trial.user_attrs)
        retried = result.failure_kind == FailureKind.INTERRUPTED or first_death
        if retried:
            trial.set_user_attr(attrs.RETRIED, True)
            self._enqueue_retry(number, trial.params, trial.user_attrs, after_death=first_death or None)
        self._store_artifacts(trial, result)
        if result.state == BodyState.COMPLETE and result.value is not None:
            self.recorder.mark_constraint(trial, violated=False, slo_violation=result.slo_violation)
            self.study.tell(trial, result.value)
        elif result.state == BodyState.PRUNED:
            self.study.tell(trial, state=TrialState.PRUNED)
        else:
            if result.failure_kind in LEARNED_KINDS:
                self.recorder.mark_constraint(trial, violated=True)
            self.study.tell(trial, state=TrialState.FAIL)
        log.info("trial %d %s%s", number, result.state,
                 f" value={result.value:.1f}" if result.value is not None
                 else f" ({result.failure_kind}: {result.evidence[:160]})")
        self._notify(number)
        for follower in self._followers.pop(number, []):
            if retried:  # nothing was measured: the follower launches on its own later
                self._live.pop(follower.number, None)
                self._requeue_interrupted(follower.number, follower.params, follower.user_attrs,
                                          f"waited on trial {number}, which did not finish; re-run")
            else:
                self._reuse(follower, self.study.get_trials(deepcopy=False)[number])

    def _store_artifacts(self, trial: optuna.Trial, result: TrialResult) -> None:
        for name, path in sorted(result.artifacts.items()):
            if os.path.isfile(path):
                try:
                    mimetype = "text/plain" if path.endswith((".log", ".sh", ".jsonl")) else None
                    store_artifact(self.store, trial, path, mimetype)
                except Exception as exc:  # an artifact must never lose the trial
                    log.warning("could not store artifact %s of trial %d: %s", name, trial.number, exc)

    def _notify(self, number: int) -> None:
        if self.progress.on_trial_end:
            # One trial, not study.trials (a deep copy of every trial: 3.5 s per trial at 700
            # trials, benchmarks/scale.py).
            self.progress.on_trial_end(self.study, self.study.get_trials(deepcopy=False)[number])


#: Where optuna keeps an enqueued trial's parameters (``Study.enqueue_trial``'s system attribute).
_FIXED_PARAMS = "fixed_params"


def _queued_by(user_attrs: dict[str, Any]) -> str:
    """What queued a trial, from the marks its enqueue left (for the line that drops it)."""
    if user_attrs.get(attrs.REFERENCE):
        return f"reference {user_attrs[attrs.REFERENCE]!r}"
    if user_attrs.get(attrs.WARM_FROM):
        return f"warm start configuration ({user_attrs[attrs.WARM_FROM]})"
    if user_attrs.get(attrs.STAGE) == "design":
        return f"designed start point ({user_attrs.get('design') or 'design'})"
    if user_attrs.get(attrs.CONFIRM_OF) is not None:
        return f"re-run of trial {user_attrs[attrs.CONFIRM_OF]}"
    if user_attrs.get(attrs.RETRY_OF) is not None:
        return f"re-run of interrupted trial {user_attrs[attrs.RETRY_OF]}"
    return "configuration"


def _fmt_params(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def _raise_interrupt(signum: int, frame: Any) -> None:
    note_interrupt(signum)  # raised again between trials if a callback swallows this raise
    raise KeyboardInterrupt(f"signal {signum}")


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def run_study(spec: StudySpec, *, progress: Progress | None = None, executor: Executor | None = None) -> RunSummary:
    """Create or resume the study and run it until it holds ``n_trials`` finished trials."""
    t0 = time.monotonic()
    # The installed SGLang before anything (a subprocess; nothing for the simulated backend): a study
    # it cannot run is refused before Ray starts, the storage is written or the run directory made.
    sglang = check_sglang(spec)
    # The study's lock first (one run per storage + name, whatever its run directory), then the run
    # directory's, both before the driver opens anything: a refused run creates nothing (no run directory
    # or artifacts folder, no study in the storage, no Ray instance, not even the sampler's line).
    with study_lock(spec.storage_url, spec.name) or nullcontext(), DriverLock(spec.run_path / "driver.lock"):
        summary = StudyDriver(spec, executor=executor, progress=progress, sglang=sglang).run()
    log.info("study %s: %d finished trials in %.1f s", spec.name, summary.finished, time.monotonic() - t0)
    return summary
