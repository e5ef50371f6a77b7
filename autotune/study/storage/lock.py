"""One driver per study: a lock file holding the owner's pid and start time."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil

from autotune.errors import ConfigError


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
