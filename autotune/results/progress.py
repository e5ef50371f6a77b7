"""Progress of a sweep for the person watching: a rich live view on a terminal, plain
one-line-per-event log lines everywhere else (CI, pipes, ``--no-progress``).

Both are :class:`autotune.study.observer.Progress` observers built by
:func:`make_progress`; both show finished / running / pruned / failed counts,
the best value so far and an ETA against the study's trial budget (the mean
duration of launched trials x the launches left / trials in flight).
"""

from __future__ import annotations

import atexit
import logging
import statistics
import sys
import threading
import time
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.results import trials as _trials
from autotune.study import attrs
from autotune.study.observer import NO_KNOB_SET, Progress, budget_used

log = logging.getLogger("autotune.progress")

# Pruned before launch: no GPU time, so they say nothing about how long a launch takes.
_NOT_LAUNCHED = {"predicted_oom", "infeasible"}


class Tracker:
    """What the views show, kept from the driver's events (thread-safe: Ray callbacks)."""

    def __init__(self) -> None:
        self.study: optuna.Study | None = None
        self.n_trials = 0
        self.t0 = time.monotonic()
        self.running: dict[int, float] = {}
        self.max_parallel = 1
        self._lock = threading.Lock()

    def start(self, study: optuna.Study, n_trials: int) -> None:
        with self._lock:
            self.study, self.n_trials, self.t0 = study, n_trials, time.monotonic()

    def launch(self, number: int) -> None:
        with self._lock:
            self.running[number] = time.monotonic()
            self.max_parallel = max(self.max_parallel, len(self.running))

    def end(self, number: int) -> None:
        with self._lock:
            self.running.pop(number, None)

    def snapshot(self) -> dict[str, Any]:
        """Counts, best so far and ETA, read from the study now."""
        study = self.study
        snap: dict[str, Any] = {"n_trials": self.n_trials, "finished": 0, "complete": 0, "pruned": 0, "failed": 0,
                                "running": len(self.running), "best": None, "best_number": None, "eta_s": None,
                                "elapsed_s": time.monotonic() - self.t0}
        if study is None:
            return snap
        trials = study.get_trials(deepcopy=False)
        snap["finished"] = budget_used(study)
        snap["complete"] = sum(t.state == TrialState.COMPLETE for t in trials)
        snap["pruned"] = sum(t.state == TrialState.PRUNED for t in trials)
        snap["failed"] = sum(t.state == TrialState.FAIL for t in trials)
        done = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
        if done:
            pick = max if _trials.is_maximize(study) else min
            best = pick(done, key=lambda t: float(t.value))  # type: ignore[arg-type]
            snap["best"], snap["best_number"] = best.value, best.number
        snap["eta_s"] = self._eta(trials, snap["finished"])
        return snap

    def _eta(self, trials: list[FrozenTrial], finished: int) -> float | None:
        durations = [
            (t.datetime_complete - t.datetime_start).total_seconds()
            for t in trials
            if t.datetime_start and t.datetime_complete and t.state != TrialState.RUNNING
            and t.user_attrs.get(attrs.FAILURE_KIND) not in _NOT_LAUNCHED
        ]
        left = max(0, self.n_trials - finished)
        if left == 0:
            return 0.0
        if not durations:
            return None
        in_flight = len(self.running)
        parallel = max(1, self.max_parallel)
        return max(0.0, left - in_flight / 2) * statistics.mean(durations) / parallel


def fmt_duration(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(round(s))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def status_line(snap: dict[str, Any]) -> str:
    best = "-" if snap["best"] is None else f"{snap['best']:.2f} (trial {snap['best_number']})"
    return (f"{snap['finished']}/{snap['n_trials']} finished: complete {snap['complete']}, pruned {snap['pruned']}, "
            f"failed {snap['failed']}, running {snap['running']} | best {best} | ETA {fmt_duration(snap['eta_s'])}")


def _launched_text(params: dict[str, Any]) -> str:
    """``k=v, ...`` for the knobs a launch sets (the driver leaves an unset one out: ``Progress.on_launch``)."""
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items())) or NO_KNOB_SET


def _plain(tracker: Tracker) -> Progress:
    def on_start(study: optuna.Study, n_trials: int) -> None:
        tracker.start(study, n_trials)
        log.info("study %s: %s", study.study_name, status_line(tracker.snapshot()))

    def on_launch(number: int, params: dict[str, Any]) -> None:
        tracker.launch(number)
        log.info("trial %d launched %s", number, _launched_text(params))

    def on_trial_end(study: optuna.Study, t: FrozenTrial) -> None:
        tracker.end(t.number)
        what = f"value {t.value:.2f}" if t.value is not None else str(t.user_attrs.get(attrs.REASON, ""))[:160]
        log.info("trial %d %s %s | %s", t.number, _trials.outcome(t), what, status_line(tracker.snapshot()))

    return Progress(on_start=on_start, on_trial_end=on_trial_end, on_launch=on_launch)


class _LiveView:
    """A rich Live panel on stderr; log lines printed above it while it runs."""

    def __init__(self, tracker: Tracker, console: Any) -> None:
        self.tracker = tracker
        self.console = console
        self.live: Any = None
        self.last: list[str] = []
        self._swapped: list[tuple[logging.StreamHandler[Any], Any]] = []

    def render(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        # Text objects, not markup strings: a log line printed above the panel re-renders
        # it with that print's options, and those must not change how the panel looks.
        m = Text.from_markup
        snap = self.tracker.snapshot()
        table = Table.grid(padding=(0, 2))
        table.add_row(m("[bold]autotune[/]"), Text(f"{snap['finished']}/{snap['n_trials']} finished"),
                      m(f"[green]complete {snap['complete']}[/]"), m(f"[cyan]running {snap['running']}[/]"),
                      m(f"[yellow]pruned {snap['pruned']}[/]"), m(f"[red]failed {snap['failed']}[/]"))
        best = "-" if snap["best"] is None else f"[bold]{snap['best']:.2f}[/] (trial {snap['best_number']})"
        table.add_row(Text(""), m(f"best {best}"), Text(f"elapsed {fmt_duration(snap['elapsed_s'])}"),
                      Text(f"ETA {fmt_duration(snap['eta_s'])}"), Text(""), Text(""))
        for line in self.last[-3:]:
            table.add_row(Text(""), Text(line, no_wrap=True, overflow="ellipsis"), Text(""), Text(""),
                          Text(""), Text(""))
        return table

    def start(self) -> None:
        from rich.live import Live

        if self.live is not None:
            return
        self.live = Live(get_renderable=self.render, console=self.console, refresh_per_second=2,
                         transient=False, redirect_stderr=False, redirect_stdout=False)
        self.live.start()
        # Log lines written to the same terminal would tear the panel: print them above it.
        for h in logging.getLogger().handlers:
            if isinstance(h, logging.StreamHandler) and h.stream in (sys.stderr, sys.__stderr__):
                self._swapped.append((h, h.stream))
                h.setStream(_ConsoleWriter(self.console))
        atexit.register(self.stop)

    def stop(self) -> None:
        for h, stream in self._swapped:
            h.setStream(stream)
        self._swapped.clear()
        if self.live is not None:
            self.live.stop()
            self.live = None

    def progress(self) -> Progress:
        def on_start(study: optuna.Study, n_trials: int) -> None:
            self.tracker.start(study, n_trials)
            self.start()

        def on_launch(number: int, params: dict[str, Any]) -> None:
            self.tracker.launch(number)
            self.last.append(f"trial {number} launched")

        def on_trial_end(study: optuna.Study, t: FrozenTrial) -> None:
            self.tracker.end(t.number)
            value = f" {t.value:.2f}" if t.value is not None else ""
            self.last.append(f"trial {t.number} {_trials.outcome(t)}{value}")
            if self.live is not None:
                self.live.refresh()
            snap = self.tracker.snapshot()
            if snap["finished"] >= snap["n_trials"] and not self.tracker.running:
                self.stop()

        return Progress(on_start=on_start, on_trial_end=on_trial_end, on_launch=on_launch, on_end=self.stop)


class _ConsoleWriter:
    """A file-like stream that prints through the rich console (above the live panel)."""

    def __init__(self, console: Any) -> None:
        self.console = console

    def write(self, text: str) -> int:
        if text.strip():
            from rich.text import Text

            self.console.print(Text(text.rstrip("\n")))
        return len(text)

    def flush(self) -> None:
        pass


def make_progress(enabled: bool, *, console: Any = None) -> Progress:
    """The sweep's progress observer: a rich live view when ``enabled`` and stderr is a
    terminal (or a ``console`` is given), plain log lines otherwise."""
    tracker = Tracker()
    if enabled and (console is not None or _isatty(sys.stderr)):
        from rich.console import Console

        return _LiveView(tracker, console or Console(stderr=True)).progress()
    return _plain(tracker)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced streams (pytest capture, CI)
        return False
