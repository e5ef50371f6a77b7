"""A plain-TCP transport that stamps each read with the time its bytes ARRIVED, not when they were read.

A client that shares its core with other work (a CPU-bound neighbour, another client
starting up) gets the CPU a few ms after the server's bytes arrive: measured on real
SGLang on CPU (server on core 0, the client and a busy loop on core 1, box load average
15-30), the event loop read the streams 5-6.5 ms late at the median and 27-38 ms at p99.
A timestamp taken in ``data_received`` carries that delay into TTFT and ITL (TPOT hardly:
its two ends are late alike; measured there, TPOT from arrival and from processing times
agreed within 0.1 ms). Here the socket has ``SO_TIMESTAMPNS`` set, each read is
a ``recvmsg`` that returns the kernel's receive time of the read's last segment, and
the read is handed on stamped with that time (in ``time.perf_counter`` seconds): what
the server delivered, when it delivered it, however late the loop got to it. When
several events wait in the socket, one read takes them all and they share the arrival
time of the last one (never later than a processing-time stamp would be).

Linux only (the option and the control-message layout); elsewhere, and for TLS, the
pool keeps asyncio's transport and stamps at processing time. Cost: about 1.7 us more
CPU per read than uvloop's transport (``recvmsg`` and the stamp in Python; 6.6 vs 4.9 us
per 64-byte read including the send, loopback, this box).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time
from typing import Any, Protocol

# Linux's SO_TIMESTAMPNS (SO_TIMESTAMPNS_OLD: a struct timespec of two longs) on the
# architectures whose socket options follow asm-generic (x86, arm64, riscv).
SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@qq")
_READ = 1 << 18
_ANCILLARY = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
SUPPORTED = sys.platform == "linux" and struct.calcsize("@l") == 8 and _ANCILLARY > 0


class Receiver(Protocol):
    """What the transport drives (autotune.load.transport.http's connection)."""

    def connection_made(self, transport: Any) -> None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...

    def received(self, data: bytes, now: float) -> None: ...


def arrival(ancillary: list[tuple[int, int, bytes]], rt_now: float, pc_now: float) -> float | None:
    """The ``perf_counter`` time at which a read's bytes arrived, from its control messages.

    ``rt_now`` / ``pc_now``: ``time.time()`` and ``time.perf_counter()`` read together
    after the read; the kernel stamps in ``CLOCK_REALTIME``, so the stamp's age on that
    clock is carried over to ``perf_counter`` (a step of the wall clock can only make a
    stamp look fresh, never from the future). None when the read carried no stamp.
    """
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            age = rt_now - (sec + nsec * 1e-9)
            return pc_now - age if age > 0 else pc_now
    return None


class StampedTransport:
    """The subset of ``asyncio.Transport`` the HTTP connection uses, over a non-blocking socket."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: Receiver,
                 lags: list[float] | None = None) -> None:
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._out = b""
        self._closing = False
        self.lags = lags  # per read: how long its bytes waited for the loop (s), when a list is given
        protocol.connection_made(self)
        loop.add_reader(self._fd, self._readable)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._sock if name == "socket" else default

    def is_closing(self) -> bool:
        return self._closing

    def _readable(self) -> None:
        try:
            data, ancillary, _, _ = self._sock.recvmsg(_READ, _ANCILLARY)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        if not data:
            self._lost(None)
            return
        pc_now = time.perf_counter()
        now = arrival(ancillary, time.time(), pc_now)
        if now is None:
            now = pc_now
        elif self.lags is not None:
            self.lags.append(pc_now - now)
        self._protocol.received(data, now)

    def write(self, data: bytes) -> None:
        if self._closing:
            return
        if not self._out:
            try:
                sent = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._lost(exc)
                return
            data = data[sent:]
            if not data:
                return
            self._loop.add_writer(self._fd, self._writable)
        self._out += data

    def _writable(self) -> None:
        try:
            sent = self._sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        self._out = self._out[sent:]
        if not self._out:
            self._loop.remove_writer(self._fd)

    def _lost(self, exc: Exception | None) -> None:
        if self._closing:
            return
        self._shut()
        self._protocol.connection_lost(exc)

    def _shut(self) -> None:
        self._closing = True
        self._loop.remove_reader(self._fd)
        if self._out:
            self._loop.remove_writer(self._fd)
            self._out = b""
        self._sock.close()

    def close(self) -> None:
        if not self._closing:
            self._shut()
            self._loop.call_soon(self._protocol.connection_lost, None)

    abort = close


async def open_stamped(host: str, port: int, protocol: Receiver, lags: list[float] | None = None) -> StampedTransport:
    """Connect to ``host:port`` and return a transport whose reads carry their arrival times.

    Raises ``OSError`` when no address connects.
    """
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError = OSError(f"no address for {host}:{port}")
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:  # cancelled (the connect timeout): do not leak the socket
            sock.close()
            raise
        return StampedTransport(loop, sock, protocol, lags)
    raise error
