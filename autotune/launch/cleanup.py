"""Orphan safety inside the orchestrator: every live server, torn down on Ctrl-C, SIGTERM or exit.

``ServerProcess.start`` adds itself to a module-level set and ``stop`` removes
it. The study driver calls ``install_signal_handlers()`` once (main thread):
SIGINT and SIGTERM then stop every live server (TERM to all groups at once,
a shared grace, KILL), well within 10 s, and go on as before (SIGINT raises
KeyboardInterrupt, SIGTERM raises SystemExit(143)), so the driver's own
``finally`` blocks still run. A second signal during teardown SIGKILLs at once.
An ``atexit`` hook does the same on a normal interpreter exit. A SIGKILL of the
orchestrator cannot be caught: the per-server watchdog covers that.

The exception a handler raises can be lost: raised inside a transport callback
that uvloop (or aiohttp) calls from C, it is reported as that connection's error
and the load point merely fails. So the handler also records the signal, and
:func:`raise_if_interrupted` (called by the trial body after each load point and
by the driver between trials) raises it again where nothing swallows it.
"""

from __future__ import annotations

import atexit
import logging
import signal
import threading
import time
from types import FrameType
from typing import Any, Protocol

logger = logging.getLogger(__name__)

DEFAULT_GRACE_S = 5.0


class _Stoppable(Protocol):
    def stop(self, grace_s: float = ...) -> None: ...
    def send_signal(self, sig: int) -> None: ...


_live: set[_Stoppable] = set()
_live_lock = threading.Lock()
_tearing_down = False
_installed = False
_atexit_registered = False
_pending_signal: int | None = None


def add_live(server: _Stoppable) -> None:
    """Remember a started server (called by ServerProcess.start)."""
    with _live_lock:
        _live.add(server)


def discard_live(server: _Stoppable) -> None:
    """Forget a stopped server (called by ServerProcess.stop)."""
    with _live_lock:
        _live.discard(server)


def live_servers() -> list[_Stoppable]:
    """The servers started and not yet stopped in this process."""
    with _live_lock:
        return list(_live)


def stop_all(grace_s: float = DEFAULT_GRACE_S) -> int:
    """Stop every live server: SIGTERM all groups at once, then stop each within a shared grace.

    Returns how many servers were stopped.
    """
    servers = live_servers()
    if not servers:
        return 0
    logger.warning("stopping %d live server(s)", len(servers))
    for s in servers:
        s.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for s in servers:
        try:
            s.stop(grace_s=max(0.0, deadline - time.monotonic()))
        except Exception:  # keep going: the others must still be stopped
            logger.exception("stopping %r failed", s)
    return len(servers)


def kill_all() -> None:
    """SIGKILL every live server's group at once (second Ctrl-C)."""
    for s in live_servers():
        s.send_signal(signal.SIGKILL)


def note_interrupt(sig: int) -> None:
    """Remember that ``sig`` asked this process to stop (see :func:`raise_if_interrupted`)."""
    global _pending_signal
    _pending_signal = sig


def pending_interrupt() -> int | None:
    """The signal that asked this process to stop, or None."""
    return _pending_signal


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt if a SIGINT/SIGTERM arrived, even if its first raise was swallowed."""
    if _pending_signal is not None:
        raise KeyboardInterrupt(f"signal {_pending_signal}")


def clear_interrupt() -> None:
    """Forget a recorded signal (tests, or a caller that handled it)."""
    global _pending_signal
    _pending_signal = None


def _handler_for(signum: int, previous: Any, grace_s: float) -> Any:
    def handle(sig: int, frame: FrameType | None) -> None:
        global _tearing_down
        note_interrupt(sig)
        if _tearing_down:
            logger.warning("second %s: killing servers now", signal.Signals(sig).name)
            kill_all()
            return
        _tearing_down = True
        try:
            stop_all(grace_s)
        finally:
            _tearing_down = False
        if callable(previous) and previous not in (signal.SIG_DFL, signal.SIG_IGN):
            previous(sig, frame)
        elif sig == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            raise SystemExit(128 + sig)

    return handle


def install_signal_handlers(signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM), *, grace_s: float = DEFAULT_GRACE_S) -> None:
    """Make SIGINT/SIGTERM tear every live server down first, then behave as before.

    Call once from the main thread (Python only lets the main thread set
    handlers); later calls are no-ops. Also registers the ``atexit`` hook.
    ``grace_s`` is the shared SIGTERM grace before SIGKILL (keep it under 10 s).
    """
    global _installed
    register_atexit()
    if _installed:
        return
    if threading.current_thread() is not threading.main_thread():
        logger.warning("install_signal_handlers called off the main thread; only the atexit hook is active")
        return
    for sig in signals:
        previous = signal.getsignal(sig)
        if previous == signal.SIG_IGN:  # e.g. SIGINT under nohup: the process must keep running
            continue
        signal.signal(sig, _handler_for(sig, previous, grace_s))
    _installed = True


def register_atexit() -> None:
    """Stop every live server when the interpreter exits normally."""
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(stop_all)
        _atexit_registered = True
