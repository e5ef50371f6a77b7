"""The study driver: the only writer of optuna storage (ask/tell).

For each trial: suggest, predict memory (prune before launch when the formula
condemns it), hand the body to an executor, tell the result with its evidence.
Resume: a study left with RUNNING trials by a killed run gets those trials marked
FAIL (interrupted) and their parameters enqueued again; server processes of the
killed run are reaped before anything launches.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import optuna
from optuna.artifacts import upload_artifact
from optuna.trial import TrialState

from autotune.errors import AutotuneError, ConfigError
from autotune.outcome import FailureKind
from autotune.spec import StudySpec
from autotune.study import space_bridge
from autotune.study.disk_fault import as_disk_fault
from autotune.study.executor import Executor, InlineExecutor
from autotune.study.infeasible import LEARNED_KINDS, implied_by, inert_knobs
from autotune.study.phases import Phases
from autotune.study.rerun import run_once_more
from autotune.study.storage import artifact_store, open_study
from autotune.study.trial import TrialRequest, TrialResult

log = logging.getLogger(__name__)

# A trial whose body died for reasons outside the candidate is run again and does not
# use up the budget: always when the orchestrator was stopped, once when a Ray worker died.
PRUNE_VERDICTS = {"kv_oom", "graph_oom", "too_few_tokens"}


@dataclass
class Progress:
    """Observer of the sweep; every hook optional. The CLI plugs rich or plain lines in."""

    on_start: Callable[[optuna.Study, int], None] | None = None
    on_trial_end: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None
    on_launch: Callable[[int, dict[str, Any]], None] | None = None
    on_end: Callable[[], None] | None = None  # the sweep ended (done, interrupted or failed)


@dataclass
class RunSummary:
    study_name: str
    finished: int
    states: dict[str, int] = field(default_factory=dict)
    reaped: list[int] = field(default_factory=list)
    interrupted: list[int] = field(default_factory=list)


def budget_used(study: optuna.Study) -> int:
    """Finished trials that count towards ``n_trials`` (interrupted ones are re-run instead)."""
    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)):
        if t.user_attrs.get("retried") or t.user_attrs.get("confirm_of") is not None:
            continue
        n += 1
    return n


class _DriverLock:
    """One driver per study: a lock file holding the owner's pid and start time, taken over
    only when that process is gone (a recycled pid does not count: its start time differs)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> "_DriverLock":
        import psutil

        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            pid_s, born_s = self.path.read_text().split()[:2]
            pid, born = int(pid_s), float(born_s)
        except (OSError, ValueError):
            pid, born = -1, 0.0
        if pid > 0 and pid != os.getpid():
            try:
                alive = abs(psutil.Process(pid).create_time() - born) < 1.0
            except psutil.Error:
                alive = False
            if alive:
                raise ConfigError(f"study is already being run by pid {pid} (lock {self.path})")
        me = psutil.Process()
        self.path.write_text(f"{me.pid} {me.create_time()!r}\n")
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.path.read_text().split()[0] == str(os.getpid()):
                self.path.unlink()
        except (OSError, IndexError):
            pass


class StudyDriver:
    def __init__(self, spec: StudySpec, *, executor: Executor | None = None, progress: Progress | None = None):
        self.spec = spec
        self.progress = progress or Progress()
        self.study = open_study(spec)
        self.store = artifact_store(spec)
        self.bridge = space_bridge.SpaceBridge(spec, self.study)
        self.phases = Phases(spec, self.study)
        self._live: dict[int, optuna.Trial] = {}
        self.executor = executor or self._default_executor()

    # ---- setup ---------------------------------------------------------
    def _default_executor(self) -> Executor:
        if self.spec.executor.kind == "ray":
            from autotune.study.ray_executor import RayExecutor

            return RayExecutor(self.spec, reporter_factory=self._reporter)
        return InlineExecutor(reporter_factory=self._reporter)

    def _reporter(self, number: int) -> Callable[[int, float], bool] | None:
        trial = self._live.get(number)
        if trial is None or trial.user_attrs.get("confirm_of") is not None:
            return None  # confirmation re-runs are never stopped early
        if self.spec.objective.slo:
            return None  # throughput so far says nothing about meeting the SLO: no early stop

        def report(step: int, value: float) -> bool:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trial.report(value, step)
                return not trial.should_prune()

        return report

    def reap_leftovers(self) -> list[int]:
        from autotune.launch import ProcessRegistry

        return ProcessRegistry(str(self.spec.run_path), self.spec.name).reap_leftovers()

    def recover_interrupted(self) -> list[int]:
        """RUNNING trials of a dead run: FAIL (interrupted), parameters enqueued again."""
        numbers = []
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            storage = self.study._storage
            storage.set_trial_user_attr(t._trial_id, "failure_kind", FailureKind.INTERRUPTED.value)
            storage.set_trial_user_attr(t._trial_id, "reason", "the orchestrator stopped during this trial; re-run")
            storage.set_trial_user_attr(t._trial_id, "retried", True)
            self.study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
            self._enqueue_retry(t.number, t.params, t.user_attrs)
            numbers.append(t.number)
        return numbers

    # ---- the loop --------------------------------------------------------
    def run(self) -> RunSummary:
        spec = self.spec
        summary = RunSummary(study_name=spec.name, finished=0)
        with _DriverLock(spec.run_path / "driver.lock"):
            self.bridge.preflight()
            summary.reaped = self.reap_leftovers()
            if summary.reaped:
                log.warning("ended %d server process(es) left behind by an earlier run", len(summary.reaped))
            summary.interrupted = self.recover_interrupted()
            if summary.interrupted:
                log.warning("trials %s were interrupted by an earlier run; their parameters run again",
                            summary.interrupted)
            self.bridge.ensure_baseline()
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
        return summary

    def _budget_stop(self, t0: float) -> str | None:
        b = self.spec.budget
        if b.wall_time_s is not None and time.monotonic() - t0 >= b.wall_time_s:
            return f"wall time {b.wall_time_s:g} s reached"
        if b.gpu_hours is not None:
            spent = sum(t.user_attrs.get("gpu_seconds") or 0.0 for t in self.study.get_trials(deepcopy=False))
            if spent >= b.gpu_hours * 3600:
                return f"GPU budget {b.gpu_hours:g} h reached ({spent / 3600:.2f} h spent)"
        return None

    def _loop(self) -> None:
        t0 = time.monotonic()
        # A resumed study may hold confirmation re-runs queued by the interrupted run.
        confirming = bool(self.study.user_attrs.get("confirmation_started"))
        stopped: str | None = None
        out_of_budget = False  # wall time or GPU hours: no confirmation re-runs either
        while True:
            used = budget_used(self.study)
            if stopped is None:
                stopped = self._budget_stop(t0)
                if stopped:
                    out_of_budget = True
                    log.warning("budget: %s; no new trials", stopped)
            if stopped is None and getattr(self.study.sampler, "exhausted", False):
                stopped = "every candidate of the grid was tried"
                log.info("budget: %s", stopped)
            searching = used < self.spec.n_trials and stopped is None
            wants = not out_of_budget and self.phases.wants_confirmation()
            if not searching and not confirming and not self.executor.in_flight() and wants:
                numbers = self.phases.enqueue_confirmation()
                confirming = True
                log.info("confirming trials %s (and the baseline) with %d more run(s) each", numbers,
                         self.spec.search.repeats)
            while self.executor.slots_free() > 0:
                if searching and used + len(self.executor.in_flight()) < self.spec.n_trials:
                    self.phases.before_ask(used)
                elif not (confirming and self.phases.pending()):
                    break
                req = self._next_launch()
                if req is None:  # pruned before launch
                    used = budget_used(self.study)
                    searching = used < self.spec.n_trials and stopped is None and \
                        not getattr(self.study.sampler, "exhausted", False)
                    continue
                self.executor.submit(req.trial_number, req)
            for number, result in self.executor.wait(timeout=1.0):
                self._finish(number, result)
            if not self.executor.in_flight() and not searching and not (confirming and self.phases.pending()):
                if wants and not confirming:
                    continue
                if confirming:
                    self.phases.summarize_confirmation()
                return

    def _next_launch(self) -> TrialRequest | None:
        """Ask for a trial; prune it before launch, or return the request to run it."""
        trial = self.study.ask()
        cand = self.bridge.candidate(trial)
        pred = cand.prediction
        trial.set_user_attr("prediction", pred)
        if cand.baseline:
            trial.set_user_attr("baseline", True)
        if cand.notes:
            trial.set_user_attr("notes", cand.notes)
        reason = None
        kind = None
        if cand.invalid:
            kind, reason = FailureKind.INVALID_ARGS.value, cand.invalid
        elif pred.get("should_prune", pred.get("verdict") in PRUNE_VERDICTS and not pred.get("uncertain")):
            kind, reason = FailureKind.PREDICTED_OOM.value, pred.get("reason", "")
        else:
            hit = implied_by(cand.params, self.bridge.failures(),
                             inert_knobs(self.spec.server.tp_size, self.spec.hardware.interconnect))
            if hit is not None:
                kind, reason = FailureKind.INFEASIBLE.value, hit[1]
        if kind is not None:
            trial.set_user_attr("failure_kind", kind)
            trial.set_user_attr("reason", reason)
            trial.set_user_attr("note", f"pruned before launch: {reason}")
            self.bridge.mark_constraint(trial, violated=True)
            self.study.tell(trial, state=TrialState.PRUNED)
            log.info("trial %d pruned before launch (%s): %s", trial.number, kind, reason)
            self._notify(trial.number, trial)
            return None
        self._live[trial.number] = trial
        req = self.bridge.request(trial, cand)
        if self.progress.on_launch:
            self.progress.on_launch(trial.number, cand.params)
        log.info("trial %d launching %s", trial.number, _fmt_params(cand.params))
        return req

    def _enqueue_retry(self, number: int, params: dict[str, Any], user_attrs: dict[str, Any],
                       **extra: Any) -> None:
        attrs: dict[str, Any] = {"retry_of": number, **{k: v for k, v in extra.items() if v is not None}}
        for key in ("baseline", "confirm_of", "stage"):
            if user_attrs.get(key) is not None:
                attrs[key] = user_attrs[key]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.study.enqueue_trial(params, user_attrs=attrs)

    def _finish(self, number: int, result: TrialResult) -> None:
        trial = self._live.pop(number)
        self.bridge.record_result(trial, result)
        first_death = run_once_more(result.failure_kind, result.evidence, trial.user_attrs)
        if result.failure_kind == FailureKind.INTERRUPTED.value or first_death:
            trial.set_user_attr("retried", True)
            self._enqueue_retry(number, trial.params, trial.user_attrs, after_death=first_death or None)
        for name, path in sorted(result.artifacts.items()):
            if os.path.isfile(path):
                try:
                    mimetype = "text/plain" if path.endswith((".log", ".sh", ".jsonl")) else None
                    upload_artifact(artifact_store=self.store, file_path=path, study_or_trial=trial,
                                    mimetype=mimetype)
                except Exception as exc:  # an artifact must never lose the trial
                    log.warning("could not store artifact %s of trial %d: %s", name, number, exc)
        if result.state == "complete" and result.value is not None:
            self.bridge.mark_constraint(trial, violated=False, slo_violation=result.slo_violation)
            self.study.tell(trial, result.value)
        elif result.state == "pruned":
            self.study.tell(trial, state=TrialState.PRUNED)
        else:
            if result.failure_kind in LEARNED_KINDS:
                self.bridge.mark_constraint(trial, violated=True)
            self.study.tell(trial, state=TrialState.FAIL)
        log.info("trial %d %s%s", number, result.state,
                 f" value={result.value:.1f}" if result.value is not None else f" ({result.failure_kind}: {result.evidence[:160]})")
        self._notify(number, trial)

    def _fail_in_flight(self) -> None:
        for number, trial in list(self._live.items()):
            try:
                trial.set_user_attr("failure_kind", FailureKind.INTERRUPTED.value)
                trial.set_user_attr("reason", "interrupted by the user; re-run on resume")
                trial.set_user_attr("retried", True)
                self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
                self._enqueue_retry(number, trial.params, trial.user_attrs)
            except Exception as exc:  # storage may be gone on the way down; resume handles RUNNING too
                log.warning("could not mark trial %d interrupted: %s", number, exc)
            self._live.pop(number, None)

    def _notify(self, number: int, trial: optuna.Trial | None = None) -> None:
        # One trial by id: study.trials[number] deep-copied every trial of the study (3.5 s per
        # trial at 700 trials, benchmarks/scale.py).
        frozen = (self.study._storage.get_trial(trial._trial_id) if trial is not None
                  else self.study.get_trials(deepcopy=False)[number])
        if trial is not None:
            _save_note(trial, frozen)
        if self.progress.on_trial_end:
            self.progress.on_trial_end(self.study, frozen)


def _save_note(trial: optuna.Trial, frozen: optuna.trial.FrozenTrial) -> None:
    """A Markdown note per trial, so that plain ``optuna-dashboard`` shows it too."""
    try:
        from optuna_dashboard._note import save_note_with_version

        from autotune.results.dashboard import trial_note

        # A trial's note is written once, when it ends: version 1. (save_note reads every
        # system attribute of the study to find the next version: O(trials) per trial.)
        save_note_with_version(trial.storage, trial.study._study_id, trial._trial_id, 1, trial_note(frozen))
    except Exception as exc:  # a note is a convenience: never lose a trial over it
        log.debug("no note for trial %d: %s", frozen.number, exc)


def count_states(study: optuna.Study) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        out[t.state.name] = out.get(t.state.name, 0) + 1
    return out


def _fmt_params(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def run_study(spec: StudySpec, *, progress: Progress | None = None, executor: Executor | None = None) -> RunSummary:
    """Create or resume the study and run it until it holds ``n_trials`` finished trials."""
    t0 = time.monotonic()
    summary = StudyDriver(spec, executor=executor, progress=progress).run()
    log.info("study %s: %d finished trials in %.1f s", spec.name, summary.finished, time.monotonic() - t0)
    return summary
