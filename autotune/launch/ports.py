"""Free TCP ports for server launches, never one handed out recently by this process.

Where they come from: below the kernel's ephemeral range (Linux: 32768-60999 by default,
``/proc/sys/net/ipv4/ip_local_port_range``), which every outgoing connection on the host draws its
local port from. A server binds its port only at the end of its startup (SGLang: once the model is
loaded, seconds on CPU, minutes on a GPU node), and a port in the ephemeral range can be taken
meanwhile by any process's outgoing connection (a Ray or NCCL peer, the server's own
``torch.distributed`` setup): the launch is then lost as ``port_in_use`` (seen in CI: SGLang on CPU
bound its port 22 s after launch and found it taken). A port outside that range is never handed to an
outgoing connection; each is drawn at random (a different sequence in every process, so that Ray
workers on one node do not walk the same ports) and checked free by binding it. Where the ephemeral
range leaves too little room below it, the kernel picks (``bind(0)``), as before.

Why a cooldown: a port that is free is free at that instant only. Two launches in quick succession
could be handed the same port, and a server that was just killed may still hold its port (or a
client may still be talking to it). Each port handed out, and each port of a stopped server, is kept
in a cooldown set for ``COOLDOWN_S`` seconds and never handed out again meanwhile.
"""

from __future__ import annotations

import errno
import logging
import random
import socket
import threading
import time
from pathlib import Path

logger = logging.getLogger(__name__)

COOLDOWN_S = 600.0
"""How long a port stays unavailable after it was handed out or its server stopped."""

PORT_RANGE = (20000, 32767)
"""Where ports are drawn from: under Linux's default ephemeral range and macOS's (49152-65535), above the
ports a node's own services usually listen on (PostgreSQL 5432, Ray 6379 and 8265, Grafana 3000, the
optuna dashboard 8080). A port a service holds is never handed out: every draw is bound first."""
MIN_RANGE = 1000
"""Fewer free-range ports than this (an ephemeral range that starts low) and the kernel picks instead."""
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")

_MAX_TRIES = 200

_lock = threading.Lock()
_recent: dict[tuple[str, int], float] = {}  # (host, port) -> monotonic time it went into cooldown
_draw = random.SystemRandom()  # never the seeded global generator: every process its own sequence


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


def draw_range() -> tuple[int, int] | None:
    """The part of :data:`PORT_RANGE` outside the kernel's ephemeral range (all of it where the kernel does not
    say), or None when that leaves fewer than :data:`MIN_RANGE` ports."""
    low, high = PORT_RANGE
    try:
        eph_low, eph_high = (int(x) for x in EPHEMERAL_RANGE_FILE.read_text().split()[:2])
    except (OSError, ValueError):
        return low, high
    if eph_high < low or eph_low > high:
        return low, high
    below, above = (low, min(high, eph_low - 1)), (max(low, eph_high + 1), high)
    best = max(below, above, key=lambda r: r[1] - r[0])
    return best if best[1] - best[0] + 1 >= MIN_RANGE else None


def _bindable(host: str, port: int) -> int | None:
    """``port`` if it can be bound on ``host`` now (port 0: the kernel's pick), None if it is taken; any other
    error (a host that is not this machine's) is raised."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            if port and exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return None
            raise
        return int(sock.getsockname()[1])


def free_port(host: str = "127.0.0.1") -> int:
    """Return a port that is free now on ``host`` and was not handed out recently.

    It is drawn below the ephemeral range and bound once to check it is free (or, where that range
    leaves no room, picked by the kernel with ``bind(0)``), then put in the cooldown set, so the next
    call returns a different port.
    """
    span = draw_range()
    for _ in range(_MAX_TRIES):
        port = _bindable(host, _draw.randint(*span) if span else 0)
        if port is None:
            continue
        with _lock:
            now = time.monotonic()
            _expire(now)
            if (host, port) in _recent:
                continue
            _recent[(host, port)] = now
        logger.debug("free_port: handing out %s:%d", host, port)
        return port
    raise OSError(f"free_port: no fresh port on {host} after {_MAX_TRIES} tries")
