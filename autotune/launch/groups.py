"""Process-group facts and the TERM -> grace -> KILL teardown, shared by every killer.

ServerProcess.stop, the watchdog, the registry sweep and the signal handlers all
end processes the same way, here. A zombie counts as gone: in containers whose
PID 1 does not reap orphans, killed grandchildren stay zombies forever, and they
hold no memory.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterable

import psutil

logger = logging.getLogger(__name__)

LAUNCH_ID_ENV = "AUTOTUNE_LAUNCH_ID"
"""Every server's environment carries its launch id, so descendants that left the group can be found."""

CREATE_TIME_TOLERANCE_S = 0.05
"""Two create_time readings of one process agree within this (psutil derives it from boot time)."""


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def _stat_fields(pid: int) -> tuple[str, int] | None:
    """(state letter, pgid) from /proc/<pid>/stat, or None when the pid is gone."""
    rest = proc_stat(pid)
    if rest is None or len(rest) < 3:
        return None
    return rest[0], int(rest[2])


def is_alive(pid: int, create_time: float | None = None) -> bool:
    """True when ``pid`` runs, is not a zombie and (if given) was created at ``create_time``."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        if create_time is not None and abs(proc.create_time() - create_time) > CREATE_TIME_TOLERANCE_S:
            return False
        return True
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return False


def group_members(pgid: int) -> list[int]:
    """Pids of live (non-zombie) processes whose process group is ``pgid``."""
    members: list[int] = []
    for pid in psutil.pids():
        fields = _stat_fields(pid)
        if fields is not None and fields[1] == pgid and fields[0] not in ("Z", "X"):
            members.append(pid)
    return members


def descendants(pid: int) -> list[psutil.Process]:
    """Live descendants of ``pid`` (psutil objects, so a later kill checks identity)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def _alive_procs(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return alive


def signal_group(pgid: int | None, sig: int, extras: Iterable[psutil.Process] = ()) -> None:
    """Send ``sig`` to group ``pgid`` (when given) and to each still-running process in ``extras``."""
    if pgid is not None and pgid > 1 and pgid != os.getpgrp():  # never our own group
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for p in _alive_procs(extras):
        try:
            p.send_signal(sig)  # psutil checks the pid was not reused
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue


def remaining(pgid: int | None, extras: Iterable[psutil.Process] = ()) -> list[int]:
    """Pids still alive among group ``pgid`` and ``extras``."""
    pids = set(group_members(pgid)) if pgid is not None else set()
    pids.update(p.pid for p in _alive_procs(extras))
    return sorted(pids)


def wait_gone(pgid: int | None, extras: Iterable[psutil.Process], timeout_s: float, poll_s: float = 0.05) -> list[int]:
    """Wait until group and extras are gone; return the pids still alive at the deadline."""
    extras = list(extras)
    deadline = time.monotonic() + max(0.0, timeout_s)
    while True:
        left = remaining(pgid, extras)
        now = time.monotonic()
        if not left or now >= deadline:
            return left
        time.sleep(min(poll_s, deadline - now))
        poll_s = min(poll_s * 1.5, 0.25)  # each poll scans /proc: quick at first, then gentler


def terminate(pgid: int | None, extras: Iterable[psutil.Process] = (), *, grace_s: float = 10.0,
              kill_wait_s: float = 5.0, leader_first: bool = False) -> list[int]:
    """SIGTERM the group and extras, wait ``grace_s``, SIGKILL what is left, wait again.

    ``leader_first``: SIGTERM the group leader alone and give it the grace period to
    end its own children. Real SGLang's launcher drains and ends its scheduler and
    detokenizer itself on SIGTERM (exit 0, about 4-7 s on 2 cores); a SIGTERM to the
    whole group instead kills the scheduler first, which the launcher takes for a
    crash (5 s of crash diagnostics, then it SIGKILLs itself). Whatever is left when
    the leader is gone gets the group SIGTERM and the rest as usual.

    Returns the pids that survived even SIGKILL (normally none: only a process
    stuck in the kernel, e.g. in an uninterruptible GPU driver call, stays).
    """
    extras = list(extras)
    deadline = time.monotonic() + max(0.0, grace_s)
    signal_group(pgid, signal.SIGCONT, extras)  # a stopped (hung) process handles SIGTERM only once resumed
    if leader_first and pgid is not None and pgid > 1 and pgid != os.getpgrp() and is_alive(pgid):
        try:
            os.kill(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        poll_s = 0.05
        while is_alive(pgid) and time.monotonic() < deadline:
            time.sleep(poll_s)
            poll_s = min(poll_s * 1.5, 0.25)
        if not remaining(pgid, extras):
            return []
    signal_group(pgid, signal.SIGTERM, extras)
    left = wait_gone(pgid, extras, max(deadline - time.monotonic(), min(grace_s, 1.0)))
    if not left:
        return []
    logger.info("processes %s outlived SIGTERM by %.1f s; sending SIGKILL", left, grace_s)
    signal_group(pgid, signal.SIGKILL, extras)
    left = wait_gone(pgid, extras, kill_wait_s)
    if left:
        logger.warning("processes %s survived SIGKILL for %.1f s", left, kill_wait_s)
    return left


def pids_with_env(name: str, value: str) -> list[int]:
    """Pids of this user's live processes whose environment has ``name=value`` (Linux /proc)."""
    needle = f"{name}={value}".encode()
    uid = os.getuid()
    pids = []
    for pid in psutil.pids():
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            fields = _stat_fields(pid)
            if fields is not None and fields[0] not in ("Z", "X"):
                pids.append(pid)
    return pids


def pids_listening(port: int) -> list[int]:
    """Pids of this user's processes that listen on TCP ``port`` (any address).

    A descendant that left the server's session and cleared its environment (a double fork, then
    ``execve`` with an empty one) is found by nothing else, and one that holds the server's port
    keeps the next launch on it from starting.
    """
    uid = os.getuid()
    pids = set()
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return []
    for c in conns:
        if c.pid and c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port:
            try:
                if os.stat(f"/proc/{c.pid}").st_uid == uid:
                    pids.add(c.pid)
            except OSError:
                continue
    return sorted(pids)


def born_since(pids: Iterable[int], create_time: float) -> list[psutil.Process]:
    """psutil objects for those ``pids`` created no earlier than ``create_time`` (never older ones)."""
    out = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.create_time() + CREATE_TIME_TOLERANCE_S >= create_time:
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out
