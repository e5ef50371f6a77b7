"""Free TCP ports for server launches, never one handed out recently by this process.

Why a cooldown: a port returned by ``bind(0)`` is free at that instant only. Two
launches in quick succession can be handed the same port by the kernel, and a
server that was just killed may still hold its port (or a client may still be
talking to it). Each port handed out, and each port of a stopped server, is kept
in a cooldown set for ``COOLDOWN_S`` seconds and never handed out again meanwhile.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

logger = logging.getLogger(__name__)

COOLDOWN_S = 600.0
"""How long a port stays unavailable after it was handed out or its server stopped."""

_MAX_TRIES = 200

_lock = threading.Lock()
_recent: dict[tuple[str, int], float] = {}  # (host, port) -> monotonic time it went into cooldown


def _expire(now: float) -> None:
    for key in [k for k, t in _recent.items() if now - t > COOLDOWN_S]:
        del _recent[key]


def mark_port_used(port: int, host: str = "127.0.0.1") -> None:
    """Put ``port`` into the cooldown set (called when a server on it stops)."""
    with _lock:
        _recent[(host, port)] = time.monotonic()


def recently_used(port: int, host: str = "127.0.0.1") -> bool:
    """True when ``port`` was handed out or released within the cooldown."""
    with _lock:
        _expire(time.monotonic())
        return (host, port) in _recent


def free_port(host: str = "127.0.0.1") -> int:
    """Return a port that is free now on ``host`` and was not handed out recently.

    The port is found by binding port 0 (the kernel picks a free one) and is
    then put in the cooldown set, so the next call returns a different port.
    """
    for _ in range(_MAX_TRIES):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        with _lock:
            now = time.monotonic()
            _expire(now)
            if (host, port) in _recent:
                continue
            _recent[(host, port)] = now
        logger.debug("free_port: handing out %s:%d", host, port)
        return port
    raise OSError(f"free_port: no fresh port on {host} after {_MAX_TRIES} tries")
