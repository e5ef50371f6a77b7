"""What the study's ``storage`` points at, checked before optuna is handed it.

optuna's ``RDBStorage`` creates its tables in whatever database it opens, and SQLite creates
a file that is not there: a results command (``status``, ``best``, ``export``, ``report``,
``dashboard``) pointed at another application's SQLite file, or at a mistyped path, would
write into it. So a command that only reads opens SQLite read-only (``mode=ro``) after
checking that the file exists and holds optuna's tables; a command that writes (``run``,
``calibrate``) refuses a file of another application, a read-only file and a database in
memory at once, with one line, before anything is started. Every message shows the URL
with its password hidden (:func:`autotune.redact.redact_url`).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

from autotune.errors import ConfigError
from autotune.redact import redact_url

#: Tables every optuna RDB schema has (optuna 2 to 5): a database without them is not a study's.
OPTUNA_TABLES = frozenset({"studies", "trials", "version_info"})


def _sqlite_database(url: str) -> str | None:
    """The ``database`` part of a SQLite URL ("" for none); None for another database or no URL."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite":
        return None
    return parsed.database or ""


def memory_database(url: str) -> bool:
    """Whether ``url`` is a SQLite database that lives in memory (``sqlite://``, ``sqlite:///:memory:``,
    ``file::memory:``, ``mode=memory``)."""
    db = _sqlite_database(url)
    return db is not None and (db == "" or ":memory:" in db or "mode=memory" in url)


def refuse_memory(url: str, written: str | None = None) -> None:
    """ConfigError for a database in memory; ``written``: the study's ``storage`` as the user wrote
    it (shown instead of the URL resolved against the study's directory)."""
    if memory_database(url):
        raise ConfigError(f"storage: a database in memory is lost when the command ends: a study there "
                          f"cannot be resumed or read; give a file (got {redact_url(written or url)!r})")


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///PATH`` URL (None for a server database)."""
    db = _sqlite_database(url)
    if not db or memory_database(url):
        return None
    return Path(db.removeprefix("file:"))


def read_only_uri(path: Path) -> str:
    """The SQLite URI that opens ``path`` read-only (``mode=ro``: SQLite refuses every write through it).

    A study's database is in WAL mode (:func:`autotune.study.storage.retry.sqlite_fast_commits`), and a
    read-only connection to it creates ``-wal`` and ``-shm`` beside the file and, unable to checkpoint,
    leaves them there. When neither is there (nor a rollback ``-journal``), no connection is writing
    the database now, so it is also opened ``immutable``: no lock, no file created. When they are there
    (a ``run`` is live, or one was killed before its last checkpoint), the plain read-only open reads
    the log as well and creates nothing that was not there."""
    uri = f"file:{quote(str(path))}?mode=ro"
    if not any(Path(f"{path}{suffix}").exists() for suffix in ("-wal", "-shm", "-journal")):
        uri += "&immutable=1"
    return uri


def read_only_url(path: Path) -> str:
    """A SQLAlchemy URL that opens ``path`` read-only (:func:`read_only_uri`)."""
    return f"sqlite:///{read_only_uri(path)}&uri=true"


def sqlite_tables(path: Path, shown: str) -> set[str]:
    """The tables of the SQLite file ``path``, read without writing a byte (``mode=ro``);
    ConfigError when it is not a SQLite database or cannot be read."""
    try:
        con = sqlite3.connect(read_only_uri(path), uri=True, timeout=10)
        try:
            return {str(r[0]) for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise ConfigError(f"storage: {shown} is not a readable SQLite database ({exc})") from None


def _foreign(shown: str, tables: set[str]) -> ConfigError:
    some = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
    return ConfigError(f"storage: {shown} is not an optuna study database (its tables: {some}); "
                       "autotune leaves it as it is: point storage at another file")


class NoStudy(ConfigError):
    """The storage holds no study of that name (or nothing yet): a reader that can do without
    one (``plan``, which only looks for a stored calibration) tells it from a broken storage."""


def no_study(name: str, url: str) -> NoStudy:
    return NoStudy(f"name: no study {name!r} in {redact_url(url)} (run `autotune run` first)")


def check_readable(name: str, url: str, written: str | None = None) -> str:
    """The URL a command that only reads opens: for SQLite, the existing file, read-only, once
    it is known to be optuna's. ConfigError (one line) for a memory database, a missing file,
    a file of another application or one that is not a database."""
    refuse_memory(url, written)
    path = sqlite_path(url)
    if path is None:
        return url
    if not path.exists():
        raise no_study(name, url)
    if not path.is_file():
        raise ConfigError(f"storage: {path} is not a file")
    tables = sqlite_tables(path, str(path))
    if not tables:
        raise no_study(name, url)  # an empty file: no study was ever written there
    if not OPTUNA_TABLES <= tables:
        raise _foreign(str(path), tables)
    return read_only_url(path)


def check_writable(url: str, written: str | None = None) -> None:
    """For a command that writes the study: ConfigError (one line) for a memory database, an
    existing SQLite file of another application, a read-only file, or a directory in which
    SQLite cannot write its journal. A missing file is fine: ``run`` creates it."""
    refuse_memory(url, written)
    path = sqlite_path(url)
    if path is None or not path.exists():
        return
    if not path.is_file():
        raise ConfigError(f"storage: {path} is not a file")
    tables = sqlite_tables(path, str(path))
    if tables and not OPTUNA_TABLES <= tables:
        raise _foreign(str(path), tables)
    if not os.access(path, os.W_OK):
        raise ConfigError(f"storage: {path} is read-only: the study records every trial there "
                          "(make it writable, or point storage at another file)")
    if not os.access(path.parent, os.W_OK):
        raise ConfigError(f"storage: {path.parent} is not writable: SQLite writes its journal beside {path.name}")
