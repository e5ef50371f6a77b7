"""How the launcher's children are spawned: PR_SET_PDEATHSIG for the server, and its watchdog.

PR_SET_PDEATHSIG(SIGKILL) makes the kernel kill the server the moment its
launcher dies, but it fires when the spawning *thread* exits, not the process:
set from a worker thread it would kill the server when that thread ends. So
it is only set when spawning from the main thread; every launch also gets a
watchdog process (``python -m autotune.launch.watchdog``), which covers the
rest, including the server's grandchildren that pdeathsig never reaches.
The preexec function only calls a ctypes function resolved at import time
(no imports, no locks), which keeps it safe after fork in a threaded process.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO, Any

import psutil

_PR_SET_PDEATHSIG = 1
try:
    _prctl: Any = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None


def pdeathsig_preexec(parent_pid: int) -> Callable[[], None] | None:
    """A preexec_fn setting PR_SET_PDEATHSIG(SIGKILL), or None where that is unsafe or unsupported."""
    if _prctl is None or threading.current_thread() is not threading.main_thread():
        return None

    def preexec() -> None:  # runs in the child between fork and exec: no locks, no imports
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def spawn_watchdog(pgid: int, create_time: float, *, launch_id: str = "", log: IO[bytes] | None = None, poll_s: float = 0.5, grace_s: float = 2.0) -> subprocess.Popen[bytes]:
    """Start ``python -m autotune.launch.watchdog`` for group ``pgid``, guarding against this process's death.

    Not imported from the watchdog module so that ``-m`` runs it fresh."""
    me = psutil.Process()
    argv = [
        sys.executable, "-m", "autotune.launch.watchdog",
        "--parent-pid", str(me.pid),
        "--parent-create-time", repr(me.create_time()),
        "--pgid", str(pgid),
        "--create-time", repr(create_time),
        "--poll-s", str(poll_s),
        "--grace-s", str(grace_s),
    ]
    if launch_id:
        argv += ["--launch-id", launch_id]
    return subprocess.Popen(  # noqa: S603 - fixed argv, no shell
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log if log is not None else subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
