"""A full or read-only disk under the study's run directory: the node's fault, not the
candidate's. The study stops cleanly (servers torn down, one line, exit 1) and the trial
in flight runs again on resume, instead of a traceback or a failed trial."""

from __future__ import annotations

import errno

from autotune.errors import AutotuneError

DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}


class DiskUnwritable(AutotuneError):
    """The run directory (artifacts, logs, process registry) cannot be written."""


def as_disk_fault(exc: BaseException) -> DiskUnwritable | None:
    """The DiskUnwritable that ``exc`` (or what caused it) amounts to, else None."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in DISK_ERRNOS:
            where = f" ({cur.filename})" if cur.filename else ""
            return DiskUnwritable(f"disk: cannot write{where}: {cur.strerror}; make room (or make it writable) "
                                  "and run the study again: the trial in flight runs again")
        cur = cur.__cause__ or cur.__context__ or getattr(cur, "cause", None)
    return None
