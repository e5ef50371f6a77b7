"""A stand-in for SGLang's scheduler child process.

SGLang's launcher spawns one scheduler process per TP rank (plus a detokenizer); an
orchestrator must tear the whole tree down. This child exists for the server's lifetime
so that process-group teardown is tested against a real second process. It dies with
its parent twice over: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux) makes the kernel kill
it when the parent dies, and a parent-pid poll covers platforms without prctl.

Start it with :func:`spawn_child` (titled ``sglang::scheduler_TP<R>`` like SGLang's). When
it dies while the server serves, the server lives on, ``/health`` still answers and every
stream goes silent, as SGLang does without its subprocess watchdog (``autotune.sim.__main__``).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import logging
import os
import signal
import subprocess
import sys
import time

logger = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
POLL_INTERVAL_S = 0.2


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the Linux kernel to send ``sig`` to this process when its parent dies."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except OSError:
        return False


def _parent_alive(parent_pid: int) -> bool:
    if os.getppid() != parent_pid:  # re-parented: the parent is gone
        return False
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_child(parent_pid: int) -> int:
    """Live until the parent is gone (or SIGTERM); return the exit code."""
    set_parent_death_signal()
    if not _parent_alive(parent_pid):  # the parent died before prctl took effect
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while _parent_alive(parent_pid):
        time.sleep(POLL_INTERVAL_S)
    return 0


def spawn_child(rank: int = 0) -> subprocess.Popen[bytes]:
    """Start one stand-in scheduler child of this process (same process group).

    Titled like SGLang's (``sglang::scheduler_TP0`` as argv[0]: what ``ps`` and psutil's
    ``cmdline()`` show), so whatever finds a real server's scheduler by its title finds this
    one too (and ``autotune.sim`` in its command line, as before).
    """
    argv = [f"sglang::scheduler_TP{rank}", "-m", "autotune.sim.child", "--parent-pid", str(os.getpid()),
            "--rank", str(rank)]
    # With that argv[0] the interpreter cannot find its venv: it runs on the standard library, and
    # the package (which imports nothing else on this path) comes from PYTHONPATH.
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.pathsep.join(p for p in (pkg_root, os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.Popen(argv, executable=sys.executable, env={**os.environ, "PYTHONPATH": path},
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autotune.sim.child", description=__doc__)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--rank", type=int, default=0)
    args = parser.parse_args(argv)
    return run_child(args.parent_pid)


if __name__ == "__main__":
    sys.exit(main())
