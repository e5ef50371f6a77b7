"""Where ``export`` and ``report`` write (``-o``): checked before any work, written atomically.

Why: ``-o`` names any path. It must never be the study file or the study's own SQLite
storage (``-o study.db`` would turn the database into HTML, and with it every trial), a
directory, in a directory that does not exist (it is not made: a typo'd path is named, as
``bench --output-file`` does), or a place that cannot be written; each is one
:class:`ConfigError` line (exit 2) before the study is read. The file is written to a fresh temporary beside it
(``mkstemp``: created exclusively, never through a symlink, never an existing file of the
user's) and moved onto the output with ``os.replace``; the temporary is removed on any
failure.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from autotune.errors import ConfigError, ExportError
from autotune.files import check_writable, same_file
from autotune.limits import shown
from autotune.spec import StudySpec
from autotune.storage_check import sqlite_path

FIELD = "-o/--output"
_SQLITE_SIDE = ("", "-wal", "-shm", "-journal")


def _p(path: str | Path) -> str:
    return shown(str(path), 200)


def protected_files(spec: StudySpec) -> list[Path]:
    """The files an output must never replace: the study file and its SQLite storage (with its
    ``-wal``, ``-shm`` and ``-journal``)."""
    files: list[Path] = []
    if spec.source_path:
        files.append(Path(spec.source_path))
    db = sqlite_path(spec.storage_url)
    if db is not None:
        files.extend(Path(f"{db}{side}") for side in _SQLITE_SIDE)
    return files


def check_output_path(spec: StudySpec | None, path: str | Path, field: str = FIELD) -> Path:
    """``path`` when the output can be written there without harm (ConfigError otherwise): not the
    study file or its storage, not a directory or anything but a regular file, in a directory that
    exists and is writable. Checked before the study is read."""
    out = Path(path)
    if spec is not None:
        for f in protected_files(spec):
            if same_file(out, f):
                raise ConfigError(f"{field}: {_p(path)} is the study's own file {_p(f)}; "
                                  "writing there would destroy it, name another file")
    # The rule every output path of autotune follows (bench's --output-file too): the directory must
    # exist. A missing one is refused, not made: `-o reuslts/x.csv` is a typo to name, not a tree to create.
    check_writable(out, field)
    if out.exists() and not out.is_file():  # a device or a socket: a table is no stream
        raise ConfigError(f"{field}: not a regular file (got {_p(path)})")
    return out


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


def write_atomic(path: str | Path, write: Callable[[BinaryIO], object]) -> Path:
    """Call ``write(f)`` with a fresh temporary beside ``path`` open for binary writing (written
    through the descriptor ``mkstemp`` opened, never by name), then move it onto ``path``.
    ExportError when it cannot be written; the temporary never stays behind."""
    out = Path(path)
    tmp: Path | None = None
    try:
        fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
        tmp = Path(name)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())  # the mode a plain open() gives, not mkstemp's 0600
            write(f)
        os.replace(tmp, out)
        tmp = None
    except OSError as exc:
        raise ExportError(f"cannot write {_p(out)}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    return out
