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
    python benchmarks/faults.py --engine real-cpu [--sglang-version 0.5.9]   # real SGLang: runs faults_real.py

What both tables share is benchmarks/harness/faults.py (and fault_child.py, the driver with a fault
patched in).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import yaml
from harness.faults import (
    WATCHDOG_GRACE_S,
    Row,
    budget,
    clean_up,
    measure,
    servers_of,
    settle,
    snapshot,
    start_run,
)

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "studies" / "models" / "kimi-k2-class"
N_TRIALS = 4


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


def left_after_grace(root: Path) -> int:
    alive = servers_of(root)
    _, still = psutil.wait_procs(alive, timeout=WATCHDOG_GRACE_S)
    n = len([p for p in still if "autotune.sim" in " ".join(_cmd(p))])
    for p in still:  # the harness cleans up after a leak it counted
        with contextlib.suppress(psutil.Error):
            p.kill()
    return n


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
    if row.runs[-1] != 0 or snapshot(study) and budget(study) < N_TRIALS:
        again = start_run(study, root / "resume.log")
        row.runs.append(settle(again))
        row.left = max(row.left, left_after_grace(root))
    return victim, before, t


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
    if row.runs[-1] != 0 or budget(study) < N_TRIALS:
        again = start_run(study, root / "resume.log")
        row.runs.append(settle(again))
        row.left = max(row.left, left_after_grace(root))


def fault_storage(root: Path, study: Path, row: Row) -> tuple[int, dict[int, str], float]:
    from autotune.testing.pg_server import PgServer, find_bindir  # the test suite's throwaway PostgreSQL

    bindir = find_bindir()
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
        if row.runs[-1] != 0 or budget(study) < N_TRIALS:
            again = start_run(study, root / "resume.log")
            row.runs.append(settle(again))
            row.left = max(row.left, left_after_grace(root))
        measure(row, study, victim, before, t, N_TRIALS)
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


def run_fault(key: str) -> Row:
    label, fn = FAULTS[key]
    row = Row(label)
    root = Path(tempfile.mkdtemp(prefix=f"autotune-fault-{key}-"))
    try:
        study = write_study(root)
        victim, before, t = fn(root, study, row)
        if victim >= 0:
            study = root / "study.yaml"
            measure(row, study, victim, before, t, N_TRIALS)
    except _Skip as exc:
        row.note, row.lost, row.left = f"skipped: {exc}", -1, -1
    except Exception as exc:  # noqa: BLE001 - a harness failure is a row, not a crash
        row.note = f"harness: {type(exc).__name__}: {exc}"[:200]
        row.lost = row.lost or -1
        row.left = max(row.left, len(sim_servers_of(root)))
    finally:
        clean_up(root, row, servers_of(root))
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated fault keys: " + ",".join(FAULTS))
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    ap.add_argument("--engine", choices=("sim", "real-cpu"), default="sim",
                    help="sim: the simulated server (default); real-cpu: real SGLang on CPU (faults_real.py)")
    ap.add_argument("--sglang-version", default="0.5.23", help="real-cpu: the CPU venv's SGLang version")
    args = ap.parse_args()
    if args.engine == "real-cpu":  # its own script: hand this process over to it
        os.execv(sys.executable, [sys.executable, str(Path(__file__).with_name("faults_real.py")),
                                  "--only", args.only, "--sglang-version", args.sglang_version])
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
