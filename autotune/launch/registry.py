"""A file of every server process group autotune launched, so a later run can end leftovers.

Why: a SIGKILLed orchestrator, a crashed raylet or a power-cycled driver can
leave servers holding GPUs. Every launch records its group in
``<run_dir>/processes.json`` (pid, pgid, create_time, study, trial, argv,
orchestrator and owner pids, host, launch id). ``autotune run`` calls
``reap_leftovers()`` before launching anything, and a Ray trial body calls it
as a per-node sweep. A process is only ever killed when its recorded
``create_time`` matches (or, for a group member whose leader is gone, when it
was born after the leader), so a recycled pid is never touched. Entries whose
owner (the process that launched them) is still alive are not leftovers and
are left alone, so concurrent trials on one node do not reap each other.

The file is rewritten atomically (temp file + rename) under an ``flock``, so
several launching processes on one node can share it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil

from autotune.launch.groups import (
    CREATE_TIME_TOLERANCE_S,
    LAUNCH_ID_ENV,
    group_members,
    is_alive,
    pids_with_env,
    terminate,
)
from autotune.limits import shown
from autotune.redact import redact_argv

logger = logging.getLogger(__name__)

REGISTRY_FILE = "processes.json"



ORCHESTRATOR_ENV = "AUTOTUNE_ORCHESTRATOR_PID"


def _orchestrator_pid(tagged: Any, own: int) -> int:
    """The pid recorded as the launch's orchestrator: the launch's tag, else
    ``AUTOTUNE_ORCHESTRATOR_PID`` (a wrapper that drives autotune names itself), else this
    process. The entry is a note for whoever reads the registry, nothing acts on it: a value that
    is not a pid (``abc``, ``-1``) is ignored with a warning, never an error that leaves the
    trial it was recording RUNNING."""
    for where, value in (("tag orchestrator_pid", tagged), (ORCHESTRATOR_ENV, os.environ.get(ORCHESTRATOR_ENV))):
        if value is None or value == "":
            continue
        try:
            pid = int(str(value).strip())
        except ValueError:
            pid = 0
        if pid > 0:
            return pid
        logger.warning("registry: %s=%s is not a pid: recording this process (%d) instead", where,
                       shown(str(value)), own)
    return own

class ProcessRegistry:
    """The launched server groups of one study, kept in a JSON file in the run directory."""

    def __init__(self, run_dir: str | os.PathLike[str], study: str = "") -> None:
        self.run_dir = Path(run_dir)
        self.study = study
        self.path = self.run_dir / REGISTRY_FILE
        self._lock_path = self.run_dir / (REGISTRY_FILE + ".lock")

    # -- file access -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[list[dict[str, Any]]]:
        """Yield the entries under an exclusive lock; write them back atomically on exit."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                entries = self._read()
                before = json.dumps(entries, sort_keys=True)
                yield entries
                if json.dumps(entries, sort_keys=True) != before:
                    self._write(entries)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> list[dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            logger.warning("process registry %s unreadable (%s); starting a new one", self.path, exc)
            return []
        entries = data.get("entries", []) if isinstance(data, dict) else []
        return [e for e in entries if isinstance(e, dict) and isinstance(e.get("pid"), int)]

    def _write(self, entries: list[dict[str, Any]]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.run_dir, prefix=f".{REGISTRY_FILE}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"version": 1, "entries": entries}, fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # -- public ------------------------------------------------------------------------------

    def entries(self) -> list[dict[str, Any]]:
        """All recorded entries (every study), as stored."""
        with self._locked() as entries:
            return [dict(e) for e in entries]

    def alive_processes(self) -> list[psutil.Process]:
        """Live processes of every recorded launch (leaders, group members, launch-id carriers)."""
        out: dict[int, psutil.Process] = {}
        for entry in self.entries():
            out.update((p.pid, p) for p in _leftover_processes(entry))
        return list(out.values())

    def record(
        self,
        pid: int,
        *,
        argv: Sequence[str],
        pgid: int | None = None,
        trial: int | str | None = None,
        launch_id: str = "",
        tags: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Record a launched process group led by ``pid``; returns the entry written."""
        proc = psutil.Process(pid)
        me = psutil.Process()
        tags = dict(tags or {})
        entry: dict[str, Any] = {
            "pid": pid,
            "pgid": pgid if pgid is not None else os.getpgid(pid),
            "create_time": proc.create_time(),
            "study": self.study,
            "trial": trial if trial is not None else tags.get("trial"),
            "argv": redact_argv(list(argv)),
            "orchestrator_pid": _orchestrator_pid(tags.get("orchestrator_pid"), me.pid),
            "owner_pid": me.pid,
            "owner_create_time": me.create_time(),
            "host": socket.gethostname(),
            "launch_id": launch_id,
            "recorded_at": time.time(),
            "tags": {k: v for k, v in tags.items() if isinstance(v, (str, int, float, bool)) or v is None},
        }
        with self._locked() as entries:
            entries[:] = [e for e in entries if not (e["pid"] == pid and e.get("host") == entry["host"])]
            entries.append(entry)
        logger.debug("registry: recorded pid %d (pgid %d) for study %r", pid, entry["pgid"], self.study)
        return entry

    def forget(self, pid: int) -> None:
        """Drop the entry of ``pid`` on this host (after a clean stop)."""
        host = socket.gethostname()
        with self._locked() as entries:
            entries[:] = [e for e in entries if not (e["pid"] == pid and e.get("host") == host)]

    def reap_leftovers(self, *, grace_s: float = 5.0, include_live_owners: bool = False) -> list[int]:
        """End the live leftovers of this study on this host; return the pids ended.

        A leftover is a recorded group whose owner (the launching process) is
        dead, or any recorded group when ``include_live_owners``. Entries whose
        processes are all gone are dropped from the file.
        """
        host = socket.gethostname()
        targets: list[tuple[dict[str, Any], list[psutil.Process]]] = []
        with self._locked() as entries:
            keep: list[dict[str, Any]] = []
            for e in entries:
                if e.get("host") != host or e.get("study") != self.study:
                    keep.append(e)
                    continue
                procs = _leftover_processes(e)
                if not procs:
                    continue  # all gone: drop the stale entry
                keep.append(e)
                owner_alive = is_alive(int(e.get("owner_pid", -1)), e.get("owner_create_time"))
                if owner_alive and not include_live_owners:
                    continue
                targets.append((e, procs))
            entries[:] = keep
        ended: list[int] = []
        for e, procs in targets:
            pgid = int(e["pgid"]) if is_alive(int(e["pid"]), e["create_time"]) else None
            logger.warning("reaping leftover server of study %r trial %s: pids %s", self.study, e.get("trial"), [p.pid for p in procs])
            left = terminate(pgid, procs, grace_s=grace_s, leader_first=True)
            ended.extend(p.pid for p in procs if p.pid not in left)
        if targets:
            with self._locked() as entries:
                entries[:] = [e for e in entries if e.get("host") != host or _leftover_processes(e)]
        return sorted(set(ended))


def _leftover_processes(entry: dict[str, Any]) -> list[psutil.Process]:
    """Live processes that belong to a recorded launch: the leader (create_time must match),
    its group members and anything carrying its launch id, all born no earlier than it."""
    pid, pgid, born = int(entry["pid"]), int(entry["pgid"]), float(entry["create_time"])
    found: dict[int, psutil.Process] = {}
    leader_ours = is_alive(pid, born)
    if leader_ours:
        found[pid] = psutil.Process(pid)
    leader_recycled = not leader_ours and is_alive(pid)  # same pid, another process
    if pgid == pid and leader_recycled:
        candidates: list[int] = []  # the group id now belongs to someone else
    else:
        candidates = group_members(pgid)
    launch_id = entry.get("launch_id") or ""
    if launch_id:
        candidates.extend(pids_with_env(LAUNCH_ID_ENV, launch_id))
    for cpid in candidates:
        if cpid in found or cpid == os.getpid():
            continue
        try:
            proc = psutil.Process(cpid)
            if proc.create_time() + CREATE_TIME_TOLERANCE_S >= born and proc.status() != psutil.STATUS_ZOMBIE:
                found[cpid] = proc
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return list(found.values())
