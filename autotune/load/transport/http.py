"""A minimal HTTP/1.1 client for the streamed requests of a load point.

aiohttp costs about two thirds of the client's CPU per streamed token (measured with
cProfile at 256 streams x 100 tok/s: its protocol, chunk parser, ``StreamReader``,
read-resume and async-iterator machinery run for every read). Here one asyncio
``Protocol`` per keep-alive connection decodes the response (headers, then chunked,
``Content-Length`` or until-close framing) inside ``data_received`` and hands each
read's body bytes, with one timestamp (when the bytes arrived), straight to the request's callback: no future,
task wake-up or iterator step per token. The awaiting coroutine wakes once, at the end
of the body. Control requests (probe, model name, flush) stay on aiohttp. On Linux, plain-HTTP
connections run on :class:`autotune.load.transport.arrival.StampedTransport`: each read is stamped
with the kernel's arrival time, so a loop that gets the CPU late (a busy shared core)
still records when the server's bytes came, and ``read_lags`` says how late it read.

:class:`StreamPool` holds up to ``limit`` connections (0: unlimited), reuses idle ones,
and retries a request once on a fresh connection when a reused one turns out closed
before any response byte (the server's keep-alive timeout raced the send).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import socket
import ssl
import time
from collections.abc import Callable
from typing import NamedTuple
from urllib.parse import urlsplit

from autotune.load.transport import arrival

_HEX = re.compile(rb"[0-9a-fA-F]+")

OnData = Callable[[bytes, float], bool]  # True: stop reading (the connection is closed)
_MAX_ERROR_BODY = 1 << 16
#: A response's head (status line and headers, informational heads before it included): real ones are
#: under 1 KB. A server that sends headers without end fails its request here, not at the first-token
#: timeout with the head held in memory (it grew without bound, and its search was quadratic).
MAX_HEAD_BYTES = 1 << 16
#: A chunk-size line (hex digits and extensions) and, after the last chunk, the trailers together.
MAX_CHUNK_LINE = 1 << 12
MAX_TRAILER_BYTES = 1 << 16


class HttpError(Exception):
    """The connection failed or broke before the response ended (``connect`` tells which)."""

    def __init__(self, message: str, *, connect: bool = False, fresh_retry: bool = False) -> None:
        super().__init__(message)
        self.connect = connect
        self.fresh_retry = fresh_retry  # a reused connection closed before any response byte


class _Conn(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.served = 0  # responses completed on this connection
        self.reused = False  # the request in flight was sent on a connection that served before
        self._reset(None, None)

    def _reset(self, on_data: OnData | None, fut: asyncio.Future[tuple[int, bytes]] | None) -> None:
        self.on_data = on_data
        self.fut = fut
        self.head = b""
        self.in_body = False
        self.status = 0
        self.chunked = False
        self.remaining = -1  # Content-Length left; -1: until close (or chunked)
        self.chunk_left = 0  # bytes of the current chunk still to come
        self.skip_crlf = 0  # CRLF after a chunk's data still to skip
        self.pending = b""  # an incomplete chunk-size line
        self.trailers = False  # after the last chunk: skipping trailers up to the empty line
        self.trailer_bytes = 0
        self.head_bytes = 0  # bytes of heads read for this response (informational ones too)
        self.keep_alive = True
        self.got_bytes = False
        self.error_body = b""

    # -- asyncio.Protocol ----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        fut = self.fut
        if fut is None or fut.done():
            return
        if self.in_body and not self.chunked and self.remaining < 0:
            self._finish()  # body delimited by the end of the connection
            return
        why = f"{type(exc).__name__}: {exc}" if exc else "the server closed the connection"
        fut.set_exception(HttpError(f"ServerDisconnectedError: {why}",
                                    fresh_retry=self.reused and not self.got_bytes))

    def data_received(self, data: bytes) -> None:
        self.received(data, time.perf_counter())  # asyncio's transport (TLS, not Linux): stamped as processed

    def received(self, data: bytes, now: float) -> None:
        """One read of the response, ``now`` the time its bytes arrived (see :mod:`autotune.load.transport.arrival`)."""
        if self.fut is None or self.fut.done():
            return  # nothing asked: stray bytes (the watchdog let go of this request)
        self.got_bytes = True
        if not self.in_body:
            data = self._head(data)
            if not self.in_body or not data:
                return
        if self.chunked:
            self._chunks(data, now)
        elif self.remaining >= 0:
            take = data[: self.remaining]
            self.remaining -= len(take)
            self._deliver(take, now)
            if self.remaining == 0:
                self._finish()
        else:
            self._deliver(data, now)

    # -- parsing -------------------------------------------------------------------
    def _head(self, data: bytes) -> bytes:
        head = self.head + data
        while True:  # informational heads (100, 102, 103) before the real one: a loop, not a recursion
            end = head.find(b"\r\n\r\n")
            if end < 0 or self.head_bytes + end + 4 > MAX_HEAD_BYTES:
                if end >= 0 or self.head_bytes + len(head) > MAX_HEAD_BYTES:
                    self._fail(f"response head of more than {MAX_HEAD_BYTES} bytes")
                    return b""
                self.head = head
                return b""
            self.head_bytes += end + 4
            lines = head[:end].split(b"\r\n")
            parts = lines[0].split(b" ", 2)
            try:
                self.status = int(parts[1]) if len(parts[1]) == 3 else -1
            except (IndexError, ValueError):
                self.status = -1
            if not 100 <= self.status <= 599:
                self._fail(f"malformed HTTP status line {lines[0][:80]!r}")
                return b""
            if self.status not in (100, 102, 103):
                break
            head = head[end + 4 :]  # informational: the real head follows
        self.head = b""
        length = -1
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"transfer-encoding":
                self.chunked = b"chunked" in value.lower()
            elif name == b"content-length":
                with contextlib.suppress(ValueError):
                    length = int(value.strip())
            elif name == b"connection":
                self.keep_alive = b"close" not in value.lower()
        if parts[0] == b"HTTP/1.0":
            self.keep_alive = False
        self.in_body = True
        if not self.chunked:
            self.remaining = length
            if length == 0 or self.status in (204, 304):
                self._finish()
                return b""
        return head[end + 4 :]

    def _chunks(self, data: bytes, now: float) -> None:
        if not (self.pending or self.skip_crlf or self.chunk_left or self.trailers):
            # the common read: exactly one whole chunk ("<size hex>\r\n<data>\r\n")
            eol = data.find(b"\r\n", 0, 18)
            if eol > 0 and _HEX.fullmatch(data, 0, eol):
                size = int(data[:eol], 16)
                if size > 0 and eol + size + 4 == len(data) and data.endswith(b"\r\n"):
                    self._deliver(data[eol + 2 : eol + 2 + size], now)
                    return
        out: list[bytes] = []
        i, n = 0, len(data)
        if self.pending:
            data = self.pending + data
            n = len(data)
            self.pending = b""
        while i < n:
            if self.skip_crlf:
                k = min(self.skip_crlf, n - i)
                i += k
                self.skip_crlf -= k
                continue
            if self.chunk_left:
                piece = data[i : i + self.chunk_left]
                out.append(piece)
                i += len(piece)
                self.chunk_left -= len(piece)
                if not self.chunk_left:
                    self.skip_crlf = 2
                continue
            eol = data.find(b"\r\n", i)
            if eol < 0:
                self.pending = data[i:]
                if len(self.pending) > (MAX_TRAILER_BYTES if self.trailers else MAX_CHUNK_LINE):
                    self._fail(f"malformed chunk size: a line of more than {MAX_CHUNK_LINE} bytes" if not self.trailers
                               else f"trailers of more than {MAX_TRAILER_BYTES} bytes")
                    return
                break
            line = data[i:eol]
            i = eol + 2
            if self.trailers:
                if not line:  # the empty line after the trailers: the body ended
                    self._deliver(b"".join(out), now)
                    self._finish()
                    return
                self.trailer_bytes += len(line) + 2
                if self.trailer_bytes > MAX_TRAILER_BYTES:
                    self._fail(f"trailers of more than {MAX_TRAILER_BYTES} bytes")
                    return
                continue
            size_text = line.split(b";", 1)[0].strip()
            # hex digits only: int() also takes a sign ("-5" left a negative count that looped forever
            # in the event loop), "0x" and underscores
            size = int(size_text, 16) if 0 < len(size_text) <= 16 and _HEX.fullmatch(size_text) else -1
            if size < 0 or len(line) > MAX_CHUNK_LINE:
                self._fail(f"malformed chunk size {line[:40]!r}")
                return
            if size == 0:
                self.trailers = True
            elif i + size + 2 <= n and data[i + size : i + size + 2] == b"\r\n":  # the whole chunk is here
                out.append(data[i : i + size])
                i += size + 2
            else:
                self.chunk_left = size
        if out:
            self._deliver(out[0] if len(out) == 1 else b"".join(out), now)

    def _deliver(self, body: bytes, now: float) -> None:
        if not body:
            return
        if self.status == 200 and self.on_data is not None:
            try:
                stop = self.on_data(body, now)
            except Exception as exc:  # noqa: BLE001 - a bug of the reader: its request raises it, at once
                # Raised out of a transport callback it was the event loop's traceback, and the request
                # waited for its timeout; here the request's task ends with it (the runner's "bug" path).
                if self.fut is not None and not self.fut.done():
                    self.fut.set_exception(exc)
                self.abort()
                return
            if stop:  # the reader has seen enough (a malformed stream)
                self.keep_alive = False
                self._finish()
        else:
            self.error_body += body[: _MAX_ERROR_BODY - len(self.error_body)]
            if len(self.error_body) >= _MAX_ERROR_BODY:  # enough to say why: the rest is not read
                self.keep_alive = False
                self._finish()

    def _finish(self) -> None:
        fut = self.fut
        if fut is not None and not fut.done():
            fut.set_result((self.status, self.error_body))
        if not self.keep_alive and self.transport is not None:
            self.transport.close()
            self.closed = True

    def _fail(self, message: str) -> None:
        if self.fut is not None and not self.fut.done():
            self.fut.set_exception(HttpError(message))
        self.abort()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class Sent(NamedTuple):
    """A request already written by :meth:`StreamPool.send_now`."""

    conn: _Conn
    fut: asyncio.Future[tuple[int, bytes]]
    payload: bytes


class StreamPool:
    """Keep-alive connections to one server (scheme, host and port of ``base_url``)."""

    def __init__(self, base_url: str, *, limit: int = 0, headers: dict[str, str] | None = None,
                 connect_timeout_s: float | None = None) -> None:
        u = urlsplit(base_url)
        self.tls = u.scheme == "https"
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if self.tls else 80)
        self.prefix = u.path.rstrip("/")
        host_header = u.netloc.rpartition("@")[2]
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._head = ("POST {path} HTTP/1.1\r\nHost: " + host_header + "\r\nContent-Type: application/json\r\n"
                      "Accept: */*\r\n" + extra + "Content-Length: ")
        self.connect_timeout_s = connect_timeout_s
        self.limit = limit
        self._idle: list[_Conn] = []
        self._open = 0
        self._busy = 0  # requests holding a connection (at most ``limit`` when set)
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if self.tls else None
        self.stamped = arrival.SUPPORTED and not self.tls  # reads carry their kernel arrival times
        self.read_lags: list[float] = []  # per stamped read: how long its bytes waited for the loop (s)
        self._live: set[_Conn] = set()  # every connection opened and not yet known closed

    async def _connect(self) -> _Conn:
        # asyncio.timeout, not asyncio.wait_for. On Python 3.11 wait_for runs the connect as a task
        # of its own and returns its result when the connect completes in the loop turn of a cancel
        # of the awaiting task: the cancel is lost, and a loop turn passes before the request is
        # written, in which a dying server can close the new connection (see _write). Both together
        # hung the demo's load point for 600 s (the first-token timeout) on 2026-12-02.
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                if self.stamped:
                    conn = _Conn()
                    await arrival.open_stamped(self.host, self.port, conn, self.read_lags)
                else:
                    _, conn = await loop.create_connection(_Conn, self.host, self.port, ssl=self._ssl,
                                                           server_hostname=self.host if self.tls else None)
        except TimeoutError:
            raise HttpError(f"connect timed out after {self.connect_timeout_s:g} s", connect=True) from None
        except (OSError, ssl.SSLError) as exc:
            raise HttpError(f"{exc or type(exc).__name__}", connect=True) from None
        if len(self._live) >= 2 * max(self.limit, 64):  # connections closed per request (HTTP/1.0)
            self._live = {c for c in self._live if not c.closed}
        self._live.add(conn)
        return conn

    def _take_idle(self) -> _Conn | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
            self._open -= 1
        return None

    async def preopen(self, n: int) -> None:
        """Open ``n`` connections now (bounded by the limit) so timed requests do not pay for it."""
        n = min(n, self.limit) if self.limit else n
        n -= self._open
        if n <= 0:
            return
        results = await asyncio.gather(*(self._connect() for _ in range(n)), return_exceptions=True)
        for r in results:
            if isinstance(r, _Conn):
                self._idle.append(r)
                self._open += 1

    def _acquire_now(self) -> bool:
        if self.limit and self._busy >= self.limit:
            return False
        self._busy += 1
        return True

    async def _acquire(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._acquire_now():
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def _release(self) -> None:
        self._busy -= 1
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    def _payload(self, path: str, body: bytes) -> bytes:
        return (self._head.replace("{path}", self.prefix + path, 1) + f"{len(body)}\r\n\r\n").encode() + body

    @staticmethod
    def _write(conn: _Conn, payload: bytes, on_data: OnData) -> asyncio.Future[tuple[int, bytes]]:
        fut: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        conn._reset(on_data, fut)
        conn.reused = conn.served > 0
        assert conn.transport is not None
        if conn.closed or conn.transport.is_closing():
            # The server closed it between the connect (or the last reply) and this request: a
            # transport drops a write once closing, and its connection_lost has already run with
            # no request to fail, so nothing would ever end this one (the demo's 600 s hang on a
            # server dead of OOM, 2026-12-02).
            fut.set_exception(HttpError("ServerDisconnectedError: the connection closed before the request was sent",
                                        fresh_retry=conn.reused))
            return fut
        conn.transport.write(payload)
        return fut

    def send_now(self, path: str, body: bytes, on_data: OnData) -> Sent | None:
        """Write the request at once on an idle connection; None when none is idle (or the pool is full).

        Finish it with ``await post_stream(path, body, on_data, sent)``. A scheduled request
        goes out at its time this way, not one event-loop turn later.
        """
        if not self._idle or not self._acquire_now():
            return None
        conn = self._take_idle()
        if conn is None:
            self._release()
            return None
        payload = self._payload(path, body)
        return Sent(conn, self._write(conn, payload, on_data), payload)

    async def post_stream(self, path: str, body: bytes, on_data: OnData,
                          sent: Sent | None = None) -> tuple[int, bytes]:
        """POST ``body`` (JSON) to ``path``; call ``on_data(bytes, t)`` for each read of a 200 body.

        Returns ``(status, body)`` when the response ended (the body only when status != 200).
        Raises :class:`HttpError`; cancellation closes the connection. ``sent``: the request
        was already written by :meth:`send_now`.
        """
        if sent is None:
            await self._acquire()
        try:
            payload = sent.payload if sent is not None else self._payload(path, body)
            for attempt in range(2):
                if sent is not None and attempt == 0:
                    conn, fut = sent.conn, sent.fut
                else:
                    idle = self._take_idle()
                    if idle is None:
                        idle = await self._connect()
                        self._open += 1
                    conn, fut = idle, self._write(idle, payload, on_data)
                ok = False
                try:
                    result = await fut
                    conn.served += 1
                    ok = True
                except HttpError as exc:
                    if exc.fresh_retry and attempt == 0:
                        continue
                    raise
                finally:
                    conn._reset(None, None)
                    if ok and not conn.closed:
                        self._idle.append(conn)
                    else:
                        self._open -= 1
                        if not conn.closed:
                            conn.abort()  # cancelled or failed mid-response: never reuse it
                return result
            raise HttpError("unreachable")  # pragma: no cover - the loop returns or raises
        finally:
            self._release()

    def close(self) -> None:
        """Abort every connection, idle or carrying a request: a request still waiting for its
        reply then ends with :class:`HttpError`, so nothing outlives the pool."""
        for conn in [*self._live, *self._idle]:
            if not conn.closed:
                conn.abort()
        self._live.clear()
        self._idle.clear()
        self._open = 0
