"""Benchmark: what each fault costs a study on the simulated backend.

Each fault hits a short study (4 trials, simulated SGLang, TP 8) while a trial's server
is under load, then the study is repaired and resumed (when the fault stopped it) until
it holds all its trials. Per fault it prints:

- lost: measurements the fault destroyed: a trial recorded before the fault and gone
  after, the hit candidate ending as a failure that was never run again, or the budget
  not reached after recovery;
- repeated: trials run again because of the fault (the price of not losing one);
- left: simulated servers of the study alive after the faulted run ended (and the
  watchdog's 15 s of grace), or at the end for faults the run survives;
- recovery: seconds from the fault to the next trial completing (repair and resume
  included; the harness repairs at once, a person would take longer).

Faults: orchestrator kill -9; Ctrl-C (SIGINT); a Ray worker killed (SIGKILL to the
``ray::`` process running the trial); the local Ray instance's raylet killed; the server
hung mid-load (SIGSTOP); the server killed mid-load (SIGKILL); the server dying of its own
prefill out-of-memory with 256 streams in flight (no injection: the demo's trial 10); a port taken between the
probe and the bind (a listener is bound on the port autotune picked); the artifact
directory read-only (a tmpfs remounted ``ro`` when the machine allows mounts, else a
simulated EROFS at the trial's writes); the disk nearly full (a small tmpfs filled to
the last 16 KiB, else a simulated ENOSPC); storage down (PostgreSQL stopped for 5 s
when PostgreSQL is installed, else skipped).

Everything is measured here; nothing is modelled except the servers themselves
(simulated SGLang at time scale 50). Exit 1 if any row loses a trial or leaves a server.

    python benchmarks/faults.py                 # every fault (~10-25 min on 2 cores)
    python benchmarks/faults.py --only sigstop,port
    python benchmarks/faults.py --engine real-cpu [--sglang-version 0.5.9]   # real SGLang: faults_real.py
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "studies" / "models" / "kimi-k2-class"
N_TRIALS = 4
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


# ---- the study and its processes -------------------------------------------------------
def write_study(root: Path, *, executor: str = "inline", storage: str | None = None, oom: bool = False) -> Path:
    """The faults' study; ``oom``: one whose first trial runs out of memory under load by itself
    (SGLang 0.5.23, f 0.91 with decode graphs up to bs 256, the demo's trial 10: prefill batches of
    8,192 tokens where 6,792 fit), beside the baseline and two more."""
    ex: dict[str, Any] = {"kind": executor}
    if executor == "ray":
        ex.update(num_cpus=2, num_gpus=8, max_parallel=1)
    data: dict[str, Any] = {
        "name": "faults",
        "n_trials": N_TRIALS,
        "sampler": {"kind": "tpe", "seed": 1, "n_startup_trials": 2},
        "executor": ex,
        "server": {"backend": "sim", "sglang_version": "0.5.9", "model_path": str(MODEL), "tp_size": 8,
                   "startup_timeout_s": 60, "sim": {"time_scale": 50, "seed": 0}},
        "hardware": {"gpu": "rtx-pro-6000", "num_gpus": 8, "interconnect": "pcie"},
        "search_space": {"mem_fraction_static": {"low": 0.80, "high": 0.90, "step": 0.01},
                         "cuda_graph_max_bs": {"choices": [64, 128, 256]}},
        "workload": {"input_len": 128, "output_len": 256, "num_prompts": 480, "concurrency": [8],
                     "warmup_requests": 1},
        "objective": {"metric": "output_throughput"},
        "search": {"confirm_top": 0, "early_stopping": {"enabled": False}},
        "run_dir": str(root / "run"),
        "storage": storage or str(root / "faults.db"),
    }
    if oom:
        data["server"]["sglang_version"] = "0.5.23"
        data["sampler"] = {"kind": "grid"}
        data["search"]["baseline"] = "last"
        data["search_space"] = {"mem_fraction_static": {"low": 0.85, "high": 0.91, "step": 0.06},
                                "cuda_graph_max_bs": {"choices": [256]}}
        data["workload"] = {"input_len": 512, "output_len": 256, "num_prompts": 384, "concurrency": [256],
                            "warmup_requests": 8}
    path = root / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def start_run(study: Path, log: Path, child: str | None = None, env: dict[str, str] | None = None) -> subprocess.Popen:
    argv = [sys.executable, "-m", "autotune", "run", str(study), "--no-progress"]
    if child:
        argv = [sys.executable, str(Path(__file__).resolve()), "--child", child, str(study)]
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


def sim_servers_of(root: Path) -> list[psutil.Process]:
    return [p for p in servers_of(root) if "autotune.sim" in " ".join(_cmd(p))]


def _cmd(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def wait_under_load(root: Path, proc: subprocess.Popen, *, min_trial: int = 1, timeout: float = 240) -> int:
    """Wait until trial >= ``min_trial`` is ready and 2 s into its load; return its number."""
    trials = root / "run" / "trials"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the run ended (rc {proc.returncode}) before the fault could be injected")
        for d in sorted(trials.glob("0*"), reverse=True):
            n = int(d.name)
            log = d / "server.log"
            if n >= min_trial and log.exists() and "fired up" in log.read_text(errors="replace") \
                    and sim_servers_of(root):
                time.sleep(2.0)  # into the load point (it lasts ~15-20 s here)
                return n
        time.sleep(0.1)
    raise RuntimeError("no trial came under load in time")


def settle(proc: subprocess.Popen, timeout: float = 300) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def left_after_grace(root: Path) -> int:
    alive = servers_of(root)
    _, still = psutil.wait_procs(alive, timeout=WATCHDOG_GRACE_S)
    n = len([p for p in still if "autotune.sim" in " ".join(_cmd(p))])
    for p in still:  # the harness cleans up after a leak it counted
        with contextlib.suppress(psutil.Error):
            p.kill()
    return n


# ---- measuring ---------------------------------------------------------------------------
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


def measure(row: Row, study_path: Path, victim: int, before: dict[int, str], t_fault: float) -> None:
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

    row.lost = len(gone) + (0 if measured(victim) else 1) + max(0, N_TRIALS - budget_used(st))
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


# ---- the faults ----------------------------------------------------------------------------
Fault = Callable[[Path, Path, Row], None]


def _finish_and_resume(root: Path, study: Path, row: Row, proc: subprocess.Popen,
                       repair: Callable[[], None] = lambda: None) -> None:
    row.runs.append(settle(proc))
    row.left = left_after_grace(root)
    repair()
    again = start_run(study, root / "resume.log")
    row.runs.append(settle(again))
    row.left = max(row.left, left_after_grace(root))


def _run_to_end(root: Path, row: Row, proc: subprocess.Popen) -> None:
    row.runs.append(settle(proc))
    row.left = left_after_grace(root)


def fault_kill9(root: Path, study: Path, row: Row) -> tuple[int, dict[int, str], float]:
    proc = start_run(study, root / "run.log")
    victim = wait_under_load(root, proc)
    before, t = snapshot(study), time.time()
    proc.send_signal(signal.SIGKILL)
    _finish_and_resume(root, study, row, proc)
    return victim, before, t


def fault_sigint(root: Path, study: Path, row: Row) -> tuple[int, dict[int, str], float]:
    proc = start_run(study, root / "run.log")
    victim = wait_under_load(root, proc)
    before, t = snapshot(study), time.time()
    proc.send_signal(signal.SIGINT)
    _finish_and_resume(root, study, row, proc)
    return victim, before, t


def _ray_descendants(proc: subprocess.Popen) -> list[psutil.Process]:
    try:
        return psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        return []


def fault_ray_worker(root: Path, study: Path, row: Row) -> tuple[int, dict[int, str], float]:
    study = write_study(root, executor="ray")
    proc = start_run(study, root / "run.log")
    victim = wait_under_load(root, proc)
    server = sim_servers_of(root)[0]
    worker = next((p for p in server.parents() if " ".join(_cmd(p)).startswith("ray::")), None)
    if worker is None:
        raise RuntimeError("no ray:: worker above the server")
    before, t = snapshot(study), time.time()
    worker.kill()
    _run_to_end(root, row, proc)
    return victim, before, t


def fault_raylet(root: Path, study: Path, row: Row) -> tuple[int, dict[int, str], float]:
    study = write_study(root, executor="ray")
    proc = start_run(study, root / "run.log")
    victim = wait_under_load(root, proc)
    raylet = next((p for p in _ray_descendants(proc) if "raylet" in (p.name() + " ".join(_cmd(p)[:1]))), None)
    if raylet is None:
        raise RuntimeError("no raylet under the driver")
    before, t = snapshot(study), time.time()
    raylet.kill()
    row.runs.append(settle(proc))
    row.left = left_after_grace(root)
    if row.runs[-1] != 0 or snapshot(study) and _budget(study) < N_TRIALS:
        again = start_run(study, root / "resume.log")
        row.runs.append(settle(again))
        row.left = max(row.left, left_after_grace(root))
    return victim, before, t


def _budget(study: Path) -> int:
    from autotune.spec import load_study_spec
    from autotune.study.observer import budget_used
    from autotune.study.storage.opening import open_study

    return budget_used(open_study(load_study_spec(study), create=False))


def fault_sigstop(root: Path, study: Path, row: Row) -> tuple[int, dict[int, str], float]:
    proc = start_run(study, root / "run.log")
    victim = wait_under_load(root, proc)
    before, t = snapshot(study), time.time()
    for p in sim_servers_of(root):
        p.suspend()
    _run_to_end(root, row, proc)
    return victim, before, t


def fault_server_kill(root: Path, study: Path, row: Row) -> tuple[int, dict[int, str], float]:
    proc = start_run(study, root / "run.log")
    victim = wait_under_load(root, proc)
    before, t = snapshot(study), time.time()
    for p in sim_servers_of(root):
        p.kill()
    _run_to_end(root, row, proc)
    return victim, before, t


def fault_runtime_oom(root: Path, study: Path, row: Row) -> tuple[int, dict[int, str], float]:
    """No injection: the server itself dies of a prefill OOM with 256 streams in flight (SGLang's
    scheduler raises, the launcher's sigquit handler kills the tree). The trial must record
    ``runtime_oom`` in seconds and the study go on (on 2026-12-02 a lost cancel made such a load
    point wait for the first-token timeout, 600 s)."""
    study = write_study(root, oom=True)
    proc = start_run(study, root / "run.log")
    deadline = time.monotonic() + 240
    victim, t = -1, 0.0
    while victim < 0 and time.monotonic() < deadline and proc.poll() is None:
        for d in sorted((root / "run" / "trials").glob("0*")):
            log = d / "server.log"
            if log.exists() and "Prefill out of memory" in log.read_text(errors="replace"):
                victim, t = int(d.name), time.time()
                break
        time.sleep(0.05)
    if victim < 0:
        raise RuntimeError("no trial ran out of memory under load")
    before = snapshot(study)
    _run_to_end(root, row, proc)
    from autotune.spec import load_study_spec
    from autotune.study.storage.opening import open_study

    st = open_study(load_study_spec(study), create=False)
    hit = next((x for x in st.get_trials(deepcopy=False) if x.number == victim), None)
    if hit is not None and hit.datetime_complete is not None:
        took = hit.datetime_complete.timestamp() - t
        row.note = f"trial {victim} recorded {hit.user_attrs.get('failure_kind')} {max(took, 0.0):.1f} s after its OOM"
    return victim, before, t


def fault_port(root: Path, study: Path, row: Row) -> tuple[int, dict[int, str], float]:
    proc = start_run(study, root / "run.log", child="port")
    mark = root / "port.taken"
    deadline = time.monotonic() + 240
    while not mark.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    if not mark.exists():
        raise RuntimeError("the port was never taken")
    victim, t = int(mark.read_text().split()[0]), float(mark.read_text().split()[1])
    before = snapshot(study)
    _run_to_end(root, row, proc)
    return victim, before, t


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[bool]:
    """A tmpfs at ``path`` when this machine allows mounts (root with CAP_SYS_ADMIN)."""
    path.mkdir(parents=True, exist_ok=True)
    ok = os.geteuid() == 0 and shutil.which("mount") is not None and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, check=False,
    ).returncode == 0
    try:
        yield ok
    finally:
        if ok:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def fault_readonly(root: Path, study: Path, row: Row) -> tuple[int, dict[int, str], float]:
    with _tmpfs(root / "run", "256m") as mounted:
        proc = start_run(study, root / "run.log", child="erofs")
        victim = wait_under_load(root, proc)
        before, t = snapshot(study), time.time()
        # A remount refuses while files are open for writing (server.log is): then the
        # trial's writes get EROFS from the child's patch instead.
        if mounted and subprocess.run(["mount", "-o", "remount,ro", str(root / "run")],
                                      capture_output=True, check=False).returncode == 0:
            row.note = "tmpfs remounted ro"
        else:
            mounted = False
            (root / "erofs.now").write_text("1")
            row.note = "simulated EROFS (a remount ro was refused: files open for writing)"

        def repair() -> None:
            if mounted:
                subprocess.run(["mount", "-o", "remount,rw", str(root / "run")], check=True)
            else:
                (root / "erofs.now").unlink(missing_ok=True)

        _finish_and_resume_if_stopped(root, study, row, proc, repair)
        return victim, before, t


def fault_disk_full(root: Path, study: Path, row: Row) -> tuple[int, dict[int, str], float]:
    with _tmpfs(root / "run", "64m") as mounted:
        proc = start_run(study, root / "run.log", child=None if mounted else "enospc")
        victim = wait_under_load(root, proc)
        before, t = snapshot(study), time.time()
        filler = root / "run" / "filler"
        if mounted:
            free = shutil.disk_usage(root / "run").free
            with filler.open("wb") as f:
                f.write(b"\0" * max(0, free - 16 * 1024))
        else:
            (root / "enospc.now").write_text("1")
        row.note = "64 MiB tmpfs filled to 16 KiB free" if mounted else "simulated ENOSPC"

        def repair() -> None:
            filler.unlink(missing_ok=True)
            (root / "enospc.now").unlink(missing_ok=True)

        _finish_and_resume_if_stopped(root, study, row, proc, repair)
        return victim, before, t


def _finish_and_resume_if_stopped(root: Path, study: Path, row: Row, proc: subprocess.Popen,
                                  repair: Callable[[], None]) -> None:
    row.runs.append(settle(proc))
    row.left = left_after_grace(root)
    repair()
    if row.runs[-1] != 0 or _budget(study) < N_TRIALS:
        again = start_run(study, root / "resume.log")
        row.runs.append(settle(again))
        row.left = max(row.left, left_after_grace(root))


def fault_storage(root: Path, study: Path, row: Row) -> tuple[int, dict[int, str], float]:
    sys.path.insert(0, str(ROOT / "tests"))
    from pg_server import PgServer, _bindir  # the test suite's throwaway PostgreSQL

    bindir = _bindir()
    if bindir is None:
        raise _Skip("PostgreSQL not installed")
    pgroot = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    pg = PgServer(bindir, pgroot)
    try:
        pg.init()
        pg.start()
        study = write_study(root, storage=pg.createdb("faults"))
        proc = start_run(study, root / "run.log")
        victim = wait_under_load(root, proc)
        before, t = snapshot(study), time.time()
        pg.stop("fast")
        time.sleep(5.0)
        pg.start()
        row.note = "PostgreSQL stopped for 5 s"
        row.runs.append(settle(proc))
        row.left = left_after_grace(root)
        if row.runs[-1] != 0 or _budget(study) < N_TRIALS:
            again = start_run(study, root / "resume.log")
            row.runs.append(settle(again))
            row.left = max(row.left, left_after_grace(root))
        measure(row, study, victim, before, t)
        return -1, {}, 0.0  # measured here, while the database runs
    finally:
        pg.stop("immediate")
        shutil.rmtree(pgroot, ignore_errors=True)


class _Skip(Exception):
    pass


FAULTS: dict[str, tuple[str, Callable[..., tuple[int, dict[int, str], float]]]] = {
    "kill9": ("orchestrator kill -9", fault_kill9),
    "sigint": ("Ctrl-C (SIGINT)", fault_sigint),
    "ray_worker": ("Ray worker killed", fault_ray_worker),
    "raylet": ("raylet killed", fault_raylet),
    "sigstop": ("server hung mid-load (SIGSTOP)", fault_sigstop),
    "server_kill": ("server killed mid-load", fault_server_kill),
    "runtime_oom": ("server out of memory mid-load", fault_runtime_oom),
    "port": ("port taken between probe and bind", fault_port),
    "readonly": ("artifact dir read-only", fault_readonly),
    "disk_full": ("disk nearly full", fault_disk_full),
    "storage": ("storage down", fault_storage),
}


# ---- child mode: a driver with one fault patched in ------------------------------------------
def child(kind: str, study: str) -> int:
    import errno

    root = Path(study).resolve().parent
    if kind == "port":
        from autotune import launch

        real = launch.free_port
        calls = {"n": 0}
        squat_call = int(os.environ.get("AUTOTUNE_FAULT_PORT_CALL", "2"))  # the second launch by default
        squatters: list[socket.socket] = []

        def free_port(host: str = "127.0.0.1") -> int:
            port = real(host)
            calls["n"] += 1
            if calls["n"] == squat_call:  # that launch: someone binds the port after the probe
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((host, port))
                s.listen(1)
                squatters.append(s)
                trials = sorted((root / "run" / "trials").glob("0*"))
                n = int(trials[-1].name) if trials else 1
                (root / "port.taken").write_text(f"{n} {time.time()}")
            return port

        launch.free_port = free_port
    elif kind in ("erofs", "enospc"):
        from autotune.launch import artifacts

        code = errno.EROFS if kind == "erofs" else errno.ENOSPC
        flag = root / f"{kind}.now"
        real_write = artifacts.write_launch_artifacts

        def write(*a: Any, **kw: Any) -> Any:
            if flag.exists():
                raise OSError(code, os.strerror(code), str(a[0]))
            return real_write(*a, **kw)

        artifacts.write_launch_artifacts = write
    from autotune.cli import main

    return main(["run", study, "--no-progress"])


def run_fault(key: str) -> Row:
    label, fn = FAULTS[key]
    row = Row(label)
    root = Path(tempfile.mkdtemp(prefix=f"autotune-fault-{key}-"))
    try:
        study = write_study(root)
        victim, before, t = fn(root, study, row)
        if victim >= 0:
            study = root / "study.yaml"
            measure(row, study, victim, before, t)
    except _Skip as exc:
        row.note, row.lost, row.left = f"skipped: {exc}", -1, -1
    except Exception as exc:  # noqa: BLE001 - a harness failure is a row, not a crash
        row.note = f"harness: {type(exc).__name__}: {exc}"[:200]
        row.lost = row.lost or -1
        row.left = max(row.left, len(sim_servers_of(root)))
    finally:
        clean_up(root, row, servers_of(root))
    return row


def clean_up(root: Path, row: Row, procs: list[psutil.Process]) -> None:
    """Kill what a fault left (counted already), and remove its directory (AUTOTUNE_FAULTS_KEEP keeps it)."""
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    if not os.environ.get("AUTOTUNE_FAULTS_KEEP"):
        shutil.rmtree(root, ignore_errors=True)
    else:
        row.note += f" [{root}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated fault keys: " + ",".join(FAULTS))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("study", nargs="?", help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    ap.add_argument("--engine", choices=("sim", "real-cpu"), default="sim",
                    help="sim: the simulated server (default); real-cpu: real SGLang on CPU (faults_real.py)")
    ap.add_argument("--sglang-version", default="0.5.23", help="real-cpu: the CPU venv's SGLang version")
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.study)
    if args.engine == "real-cpu":
        import faults_real

        return faults_real.main([k for k in args.only.split(",") if k], args.sglang_version)
    keys = [k for k in args.only.split(",") if k] or list(FAULTS)
    rows = []
    print(f"{'fault':38} {'lost':>5} {'repeated':>9} {'left':>5} {'recovery s':>11}  runs  note", flush=True)
    for key in keys:
        row = run_fault(key)
        rows.append(row)
        rec = f"{row.recovery_s:.1f}" if row.recovery_s is not None else "-"
        print(f"{row.fault:38} {row.lost:>5} {row.repeated:>9} {row.left:>5} {rec:>11}  "
              f"{','.join(map(str, row.runs)):5} {row.note}", flush=True)
    if args.json:
        print(json.dumps([row.__dict__ for row in rows], indent=1))
    bad = [r for r in rows if r.lost != 0 or r.left != 0]
    bad = [r for r in bad if not r.note.startswith("skipped")]
    print("every fault: 0 lost, 0 left" if not bad else f"{len(bad)} fault(s) lost a trial or left a server")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
