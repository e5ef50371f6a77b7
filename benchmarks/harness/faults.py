"""What the two fault tables share (benchmarks/faults.py: simulated SGLang; benchmarks/faults_real.py:
real SGLang on CPU): a row of the table, the driver run with this fault's marker in its
environment, the processes carrying that marker, and what the study recorded around the fault.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

CHILD = Path(__file__).with_name("fault_child.py")
WATCHDOG_GRACE_S = 15.0


@dataclass
class Row:
    fault: str
    lost: int = 0
    repeated: int = 0
    left: int = 0
    recovery_s: float | None = None
    note: str = ""
    runs: list[int] = field(default_factory=list)  # exit codes of the driver runs


def start_run(study: Path, log: Path, child: str | None = None, env: dict[str, str] | None = None) -> subprocess.Popen:
    argv = [sys.executable, "-m", "autotune", "run", str(study), "--no-progress"]
    if child:  # a driver with one fault patched in (fault_child.py)
        argv = [sys.executable, str(CHILD), child, str(study)]
    e = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
         "RAY_USAGE_STATS_ENABLED": "0", MARK: str(study.parent), **(env or {})}
    with log.open("a") as out:
        # SIGINT as a terminal delivers it: a harness started in the background inherits SIG_IGN.
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=e,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509


MARK = "AUTOTUNE_FAULT_ROOT"  # in the driver's environment, so in every server it starts


def marked_processes(root: Path, needles: tuple[str, ...]) -> list[psutil.Process]:
    """Processes whose command line holds one of ``needles`` and whose environment carries this
    fault's marker, wherever they were reparented."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info.get("cmdline") or [])
        if not any(n in cmd for n in needles):
            continue
        with contextlib.suppress(psutil.Error):
            if p.environ().get(MARK) == str(root):
                out.append(p)
    return out


def servers_of(root: Path) -> list[psutil.Process]:
    """Simulated servers (and watchdogs) started for this fault, wherever they were reparented."""
    return marked_processes(root, ("autotune.sim", "autotune.launch.watchdog"))


def settle(proc: subprocess.Popen, timeout: float = 300) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def snapshot(study_path: Path) -> dict[int, str]:
    import optuna

    from autotune.spec import load_study_spec
    from autotune.study.storage.opening import open_study

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        st = open_study(load_study_spec(study_path), create=False)
    except Exception:  # noqa: BLE001 - not created yet
        return {}
    return {t.number: t.state.name for t in st.get_trials(deepcopy=False)}


def measure(row: Row, study_path: Path, victim: int, before: dict[int, str], t_fault: float, n_trials: int) -> None:
    """Fill ``row`` from the study after the fault: what it lost, repeated, and the recovery time."""
    from datetime import datetime

    from autotune.spec import load_study_spec
    from autotune.study.observer import budget_used
    from autotune.study.storage.opening import open_study

    st = open_study(load_study_spec(study_path), create=False)
    trials = st.get_trials(deepcopy=False)
    by_n = {t.number: t for t in trials}
    complete_before = {n for n, s in before.items() if s == "COMPLETE"}
    gone = [n for n in complete_before if by_n.get(n) is None or by_n[n].state.name != "COMPLETE"]

    def measured(n: int, depth: int = 0) -> bool:
        t = by_n.get(n)
        if t is None or depth > 5:
            return False
        if t.state.name == "COMPLETE" or (t.state.name in ("FAIL", "PRUNED") and not _fault_kind(t)):
            return True
        return any(measured(r.number, depth + 1) for r in trials if r.user_attrs.get("retry_of") == n)

    row.lost = len(gone) + (0 if measured(victim) else 1) + max(0, n_trials - budget_used(st))
    row.repeated = sum(1 for t in trials if t.user_attrs.get("retry_of") is not None)
    wall = datetime.fromtimestamp(t_fault)
    after = [t.datetime_complete for t in trials if t.state.name == "COMPLETE" and t.datetime_complete
             and t.datetime_complete > wall]
    row.recovery_s = (min(after) - wall).total_seconds() if after else None
    if not measured(victim):
        t = by_n.get(victim)
        row.note = (row.note + f"; hit trial {victim} ended {t.state.name if t else '?'} "
                    f"({t.user_attrs.get('failure_kind') if t else ''}), not re-run").lstrip("; ")


# Failure kinds the faults cause (a trial ending in one of these and never re-run is lost).
FAULT_KINDS = {"interrupted", "worker_died", "crashed", "load_failed", "port_in_use", "startup_timeout"}


def _fault_kind(t: Any) -> bool:
    return t.user_attrs.get("failure_kind") in FAULT_KINDS


def budget(study: Path) -> int:
    """Trials of the study that count against its budget (autotune.study.observer.budget_used)."""
    from autotune.spec import load_study_spec
    from autotune.study.observer import budget_used
    from autotune.study.storage.opening import open_study

    return budget_used(open_study(load_study_spec(study), create=False))


def clean_up(root: Path, row: Row, procs: list[psutil.Process]) -> None:
    """Kill what a fault left (counted already), and remove its directory (AUTOTUNE_FAULTS_KEEP keeps it)."""
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    if not os.environ.get("AUTOTUNE_FAULTS_KEEP"):
        shutil.rmtree(root, ignore_errors=True)
    else:
        row.note += f" [{root}]"
