"""A per-trial guard on the Ray node: when the trial's worker is gone, end every process it marked.

Why: a force-cancel makes the Ray worker kill its *direct* children on the way out
(``kill_child_processes_on_worker_exit``), which includes the launcher's watchdog, and
the server's grandchildren (SGLang's scheduler and TP ranks) live in a session of
their own that Ray's process-group cleanup does not reach. Measured: after
``ray.cancel(force=True)`` the grandchildren of a ServerProcess leaked.

So ``trial_task`` puts a unique marker in the worker's environment before the body
runs (every server and grandchild inherits it) and starts this guard detached: a
double fork, so it is neither the worker's child nor in its group. The guard polls
the worker; once the worker has exited (normally after its one task, or killed), it
sends TERM to every process carrying the marker, waits ``--grace-s``, then KILL.

Run as ``python -m autotune.study.execution.ray.guard --worker-pid P --worker-create-time T --marker M``.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time

import psutil

log = logging.getLogger("autotune.study.execution.ray.guard")

MARKER_ENV = "AUTOTUNE_RAY_TRIAL"


def marked(marker: str, *, exclude: set[int] | None = None) -> list[psutil.Process]:
    """Live processes whose environment has ``AUTOTUNE_RAY_TRIAL=<marker>``."""
    out = []
    skip = exclude or set()
    for proc in psutil.process_iter(["pid"]):
        if proc.pid in skip:
            continue
        try:
            if proc.environ().get(MARKER_ENV) == marker and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return out


def sweep(marker: str, *, grace_s: float = 3.0) -> list[int]:
    """TERM, grace, KILL every marked process; return the pids that were found."""
    me = {os.getpid()}
    procs = marked(marker, exclude=me)
    if not procs:
        return []
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=2.0)
    # Processes started while we were signalling (a child forked in the grace period).
    for p in marked(marker, exclude=me):
        try:
            p.kill()
        except psutil.Error:
            pass
    return [p.pid for p in procs]


def stop_guards(marker: str) -> list[int]:
    """End the guards watching for ``marker`` (their worker or driver finished cleanly); their pids."""
    procs = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "autotune.study.execution.ray.guard" in cmd and "--marker" in cmd and cmd[cmd.index("--marker") + 1:][:1] == [marker]:
            try:
                proc.terminate()
                procs.append(proc)
            except psutil.Error:
                pass
    psutil.wait_procs(procs, timeout=5)
    return [p.pid for p in procs]


def _alive(pid: int, create_time: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - create_time) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def guard(worker_pid: int, worker_create_time: float, marker: str, *, poll_s: float = 0.5, grace_s: float = 3.0) -> int:
    """Wait for the worker to be gone, then sweep its marked processes."""
    while _alive(worker_pid, worker_create_time):
        time.sleep(poll_s)
    left = sweep(marker, grace_s=grace_s)
    if left:
        log.warning("ray guard: worker %d is gone; ended its leftover processes %s", worker_pid, left)
    return 0


def spawn(marker: str, *, poll_s: float = 0.5, grace_s: float = 3.0) -> None:
    """Start a detached guard for this process (the Ray worker); returns once it is detached."""
    me = psutil.Process()
    env = {k: v for k, v in os.environ.items() if k != MARKER_ENV}
    argv = [sys.executable, "-m", "autotune.study.execution.ray.guard", "--worker-pid", str(me.pid),
            "--worker-create-time", repr(me.create_time()), "--marker", marker,
            "--poll-s", str(poll_s), "--grace-s", str(grace_s), "--daemonize"]
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,  # noqa: S603
                            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # the intermediate did not fork: it guards as our child then
        log.warning("ray guard did not detach; it stays a child of the worker")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m autotune.study.execution.ray.guard``."""
    parser = argparse.ArgumentParser(prog="python -m autotune.study.execution.ray.guard", description=__doc__.splitlines()[0])
    parser.add_argument("--worker-pid", type=int, required=True)
    parser.add_argument("--worker-create-time", type=float, required=True)
    parser.add_argument("--marker", required=True)
    parser.add_argument("--poll-s", type=float, default=0.5)
    parser.add_argument("--grace-s", type=float, default=3.0)
    parser.add_argument("--daemonize", action="store_true", help="fork; the parent exits at once")
    args = parser.parse_args(argv)
    if args.daemonize and os.fork() > 0:
        os._exit(0)  # the intermediate: the guard is now reparented away from the worker
    return guard(args.worker_pid, args.worker_create_time, args.marker, poll_s=args.poll_s, grace_s=args.grace_s)


if __name__ == "__main__":
    sys.exit(main())
