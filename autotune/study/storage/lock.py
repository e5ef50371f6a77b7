"""One driver per study: a lock file holding the owner's pid and start time."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil

from autotune.errors import ConfigError
from autotune.files import same_file


class DriverLock:
    """One driver per study: a lock file holding the owner's pid and start time, taken over
    only when that process is gone (a recycled pid does not count: its start time differs)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> DriverLock:
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


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite storage URL, symlinks and ``.`` resolved (``sqlite:////x/./rt.db`` and
    ``sqlite:////x/rt.db`` are one file); None for a server database or one in memory."""
    from autotune.storage_check import sqlite_path

    db = sqlite_path(url)
    return None if db is None else Path(os.path.realpath(db))


def same_storage(a: str, b: str) -> bool:
    """Whether two storage URLs name one database: SQLite files compared as files (the same file
    however spelled, a hard link included), any other URL as written."""
    fa, fb = sqlite_file(a), sqlite_file(b)
    if fa is None or fb is None:
        return a == b
    return same_file(fa, fb)


def study_lock(storage_url: str, study_name: str) -> DriverLock | None:
    """The lock of one study (storage + name), whatever run directory a run writes to: a file
    ``<db>.<study>.lock`` beside a SQLite storage. None for a server database (PostgreSQL, MySQL):
    its runs are kept apart by their run directory's lock only."""
    db = sqlite_file(storage_url)
    return None if db is None else DriverLock(db.with_name(f"{db.name}.{study_name}.lock"))
