"""A tiny guardian process per server: it kills the server's group when its launcher dies.

Why: the server runs in its own session (so Ray's and the terminal's group
signals do not reach it half-way), so nothing else ends it when the process
that launched it is SIGKILLed. The watchdog runs in a session of its own,
polls the launcher's liveness every ``--poll-s`` seconds, and when the launcher
is gone it sends TERM, waits ``--grace-s``, then KILL to the server's group and
to every descendant it has seen. It exits by itself once the server group is
gone, and on SIGTERM (a clean ``ServerProcess.stop`` ends it that way).

Run as ``python -m autotune.launch.watchdog --parent-pid P --pgid G --create-time T``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time

import psutil

from autotune.launch.groups import (
    CREATE_TIME_TOLERANCE_S,
    LAUNCH_ID_ENV,
    born_since,
    descendants,
    group_members,
    is_alive,
    pids_with_env,
    terminate,
)

logger = logging.getLogger("autotune.launch.watchdog")

_DESCENDANT_REFRESH_S = 2.0


def _leader_state(pgid: int, create_time: float) -> str:
    """'ours' when the group leader is our server, 'gone' when the group is empty, 'other' if recycled."""
    try:
        proc = psutil.Process(pgid)
        status = proc.status()
        if abs(proc.create_time() - create_time) > CREATE_TIME_TOLERANCE_S:
            return "other"
        if status != psutil.STATUS_ZOMBIE:
            return "ours"
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
    return "ours" if group_members(pgid) else "gone"


def watch(parent_pid: int, parent_create_time: float | None, pgid: int, create_time: float, *, launch_id: str = "", poll_s: float = 0.5, grace_s: float = 2.0) -> int:
    """Poll until the server group is gone (return 0) or the parent dies (kill the group, return 1)."""
    seen: dict[int, psutil.Process] = {}
    last_refresh = 0.0
    child_of_parent = os.getppid() == parent_pid  # then a reparenting also proves the parent died
    while True:
        state = _leader_state(pgid, create_time)
        if state != "ours":
            logger.debug("watchdog: server group %d is %s; exiting", pgid, state)
            return 0
        now = time.monotonic()
        if now - last_refresh >= _DESCENDANT_REFRESH_S:
            for p in descendants(pgid):
                seen.setdefault(p.pid, p)
            last_refresh = now
        reparented = child_of_parent and os.getppid() != parent_pid
        if reparented or not is_alive(parent_pid, parent_create_time):
            logger.warning("autotune watchdog: launcher pid %d is gone; ending server group %d", parent_pid, pgid)
            for p in descendants(pgid):
                seen.setdefault(p.pid, p)
            if launch_id:  # descendants that left the group and were reparented away
                for p in born_since(pids_with_env(LAUNCH_ID_ENV, launch_id), create_time):
                    seen.setdefault(p.pid, p)
            seen.pop(os.getpid(), None)
            left = terminate(pgid, seen.values(), grace_s=grace_s, kill_wait_s=5.0, leader_first=True)
            if left:
                logger.error("autotune watchdog: pids %s survived SIGKILL", left)
            return 1
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m autotune.launch.watchdog``."""
    parser = argparse.ArgumentParser(prog="python -m autotune.launch.watchdog", description=__doc__.splitlines()[0])
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--parent-create-time", type=float, default=None)
    parser.add_argument("--pgid", type=int, required=True)
    parser.add_argument("--create-time", type=float, required=True)
    parser.add_argument("--poll-s", type=float, default=0.5)
    parser.add_argument("--grace-s", type=float, default=2.0)
    parser.add_argument("--launch-id", default="")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="[%(asctime)s] %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    return watch(args.parent_pid, args.parent_create_time, args.pgid, args.create_time, launch_id=args.launch_id, poll_s=args.poll_s, grace_s=args.grace_s)


if __name__ == "__main__":
    sys.exit(main())
