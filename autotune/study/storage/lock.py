"""One driver per study: a lock file holding the owner's pid and start time beside a SQLite storage,
a PostgreSQL advisory lock for a study on a PostgreSQL server.

Why per study and not only per run directory: a second run of one study (a copy of the study file in
another directory, or another node sharing the database) resumes it, and resuming marks every RUNNING
trial interrupted and queues it again, so the first run's live trials would be failed under it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any

import psutil

from autotune.errors import ConfigError
from autotune.files import same_file
from autotune.redact import redact_url

log = logging.getLogger(__name__)


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


class AdvisoryLock:
    """One driver per study on a PostgreSQL server: a session-level advisory lock
    (``pg_try_advisory_lock``, https://www.postgresql.org/docs/current/explicit-locking.html#ADVISORY-LOCKS)
    held on a connection of its own for the run's life.

    The server frees it when that session ends, so a driver killed with SIGKILL or a lost node leaves no
    stale lock: a resume takes it at once. The connection runs in autocommit (an open transaction held for
    hours would hold back vacuum). Its ``application_name`` names the holder (host and pid), which the
    refusal quotes. A database restarted mid-run ends the session and so the lock; a watcher thread
    reconnects every ``check_s`` and takes it again (a second driver that started in that window is the one
    case this cannot refuse: the watcher then logs it). A database that cannot be reached at start is left
    to opening the storage, which reports it; the watcher takes the lock once it answers.
    """

    def __init__(self, url: str, study_name: str, *, check_s: float = 15.0) -> None:
        self.url = url
        self.study_name = study_name
        self.check_s = check_s
        digest = hashlib.sha256(f"autotune study\0{study_name}".encode()).digest()
        self.key = int.from_bytes(digest[:8], "big", signed=True)  # advisory locks take one bigint (per database)
        self.holder = f"autotune driver {socket.gethostname()[:40]} pid {os.getpid()}"
        self._engine: Any = None
        self._conn: Any = None
        self._stop = threading.Event()
        self._mutex = threading.Lock()
        self._thread: threading.Thread | None = None
        self._warned = False

    def _connect(self) -> Any:
        import sqlalchemy as sa  # noqa: PLC0415 - optuna's dependency; only a server storage needs it here
        from sqlalchemy.pool import NullPool  # noqa: PLC0415

        from autotune.study.storage.retry import engine_kwargs  # noqa: PLC0415 - no import cycle at load

        if self._engine is None:
            kw = engine_kwargs(self.url)
            kw.pop("pool_pre_ping", None)
            kw.setdefault("connect_args", {})["application_name"] = self.holder
            self._engine = sa.create_engine(self.url, poolclass=NullPool, **kw)
        return self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")

    def _try_lock(self) -> bool | None:
        """True: held (taken now or still held); False: another session holds it; None: no database."""
        import sqlalchemy as sa  # noqa: PLC0415

        with self._mutex:
            if self._conn is not None:
                try:
                    self._conn.execute(sa.text("SELECT 1"))
                    return True
                except Exception:  # noqa: BLE001 - the session is gone (restart): its lock went with it
                    self._drop()
            try:
                conn = self._connect()
            except Exception as exc:  # noqa: BLE001 - unreachable: opening the storage says why
                log.debug("study lock: cannot connect: %s", redact_url(str(exc)).splitlines()[:1])
                return None
            try:
                got = bool(conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": self.key}).scalar())
            except Exception as exc:  # noqa: BLE001
                conn.close()
                log.debug("study lock: %s", redact_url(str(exc)).splitlines()[:1])
                return None
            if not got:
                conn.close()
                return False
            self._conn = conn
            return True

    def _other_holder(self) -> str:
        """Who holds the lock, as its session names itself (``application_name``), or empty."""
        import sqlalchemy as sa  # noqa: PLC0415

        try:
            with self._connect() as conn:
                row = conn.execute(sa.text(
                    "SELECT a.application_name, a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE l.locktype = 'advisory' AND l.granted AND l.database = "
                    "(SELECT oid FROM pg_database WHERE datname = current_database()) "
                    "AND ((l.classid::bigint << 32) | l.objid::bigint) = :k LIMIT 1"), {"k": self.key}).first()
        except Exception:  # noqa: BLE001 - only for the message
            return ""
        if row is None:
            return ""
        name = str(row[0] or "").strip()[:80]
        return f" ({name})" if name else f" (database session {row[1]})"

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001, S110 - a dead session has nothing to close
                pass

    def __enter__(self) -> AdvisoryLock:
        if self._try_lock() is False:
            self._dispose()
            raise ConfigError(f"study {self.study_name!r} is already being run by another driver"
                              f"{self._other_holder()} on {redact_url(self.url)}")
        self._thread = threading.Thread(target=self._watch, name="study-lock", daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(self.check_s):
            if self._try_lock() is False and not self._warned:
                self._warned = True
                log.error("study %r: its lock was lost (the database restarted?) and another driver%s took it: "
                          "two drivers now run this study", self.study_name, self._other_holder())

    def _dispose(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def __exit__(self, *exc: Any) -> None:
        import sqlalchemy as sa  # noqa: PLC0415

        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._mutex:
            if self._conn is not None:
                try:
                    self._conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": self.key})
                except Exception:  # noqa: BLE001, S110 - the session's end frees it anyway
                    pass
            self._drop()
            self._dispose()


def study_lock(storage_url: str, study_name: str) -> DriverLock | AdvisoryLock | None:
    """The lock of one study (storage + name), whatever run directory a run writes to: a file
    ``<db>.<study>.lock`` beside a SQLite storage, an advisory lock on a PostgreSQL server. None for
    another server database (MySQL): its runs are kept apart by their run directory's lock only."""
    if storage_url.startswith("postgresql"):
        return AdvisoryLock(storage_url, study_name)
    db = sqlite_file(storage_url)
    return None if db is None else DriverLock(db.with_name(f"{db.name}.{study_name}.lock"))
