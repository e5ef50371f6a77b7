"""The load generator's own HTTP/1.1 client (autotune/load/transport/http.py) against scripted raw responses."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Awaitable, Callable

import pytest

from autotune.load.transport import arrival
from autotune.load.transport.http import HttpError, StreamPool

Script = Callable[[int, asyncio.StreamWriter], Awaitable[bool]]  # (request number) -> keep the connection


async def _serve(script: Script) -> tuple[asyncio.Server, str, list[int]]:
    """A server that reads each request (head + Content-Length body) and runs ``script``."""
    counter = [0]
    conns: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                await reader.readexactly(length)
                counter[0] += 1
                if not await script(counter[0], writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}", conns


def _run(coro: Awaitable[object]) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


async def _post(pool: StreamPool, body: bytes = b"{}") -> tuple[int, bytes, list[bytes]]:
    reads: list[bytes] = []

    def on_data(data: bytes, now: float) -> bool:
        reads.append(data)
        return False

    status, answer = await pool.post_stream("/generate", body, on_data)
    return status, answer, reads


def test_chunked_body_split_anywhere_is_decoded_exactly_and_the_connection_reused() -> None:
    events = [b"data: {\"n\": %d}\n\n" % i for i in range(5)] + [b"data: [DONE]\n\n"]
    raw = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\nX-Trailer: 1\r\n\r\n"

    async def script(n: int, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        step = 1 if n == 1 else 7  # byte by byte, then in odd pieces
        for i in range(0, len(raw), step):
            w.write(raw[i : i + step])
            await w.drain()
        return True

    async def main() -> None:
        server, url, conns = await _serve(script)
        async with server:
            pool = StreamPool(url, limit=4)
            for _ in range(2):
                status, _, reads = await _post(pool)
                assert status == 200 and b"".join(reads) == b"".join(events)
            assert len(conns) == 1  # the second request went over the kept-alive connection
            pool.close()

    _run(main())


def test_content_length_and_error_status_bodies() -> None:
    async def script(n: int, w: asyncio.StreamWriter) -> bool:
        if n == 1:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        else:
            w.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy")
        return True

    async def main() -> None:
        server, url, _ = await _serve(script)
        async with server:
            pool = StreamPool(url)
            assert await _post(pool) == (200, b"", [b"hello"])
            status, body, reads = await _post(pool)
            assert (status, body, reads) == (503, b"busy", [])  # an error body is returned, not streamed
            pool.close()

    _run(main())


def test_server_closing_mid_body_is_an_error_not_a_hang() -> None:
    async def script(n: int, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata: \r\n")
        await w.drain()
        return False

    async def main() -> None:
        server, url, _ = await _serve(script)
        async with server:
            pool = StreamPool(url)
            with pytest.raises(HttpError) as info:
                await asyncio.wait_for(_post(pool), 10)
            assert not info.value.connect and "ServerDisconnected" in str(info.value)
            pool.close()

    _run(main())


def test_a_kept_alive_connection_the_server_closed_is_retried_on_a_fresh_one() -> None:
    async def script(n: int, w: asyncio.StreamWriter) -> bool:
        if n == 2:  # the keep-alive timeout raced the send: closed without an answer
            return False
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n%d" % n + b"!")
        return True

    async def main() -> None:
        server, url, conns = await _serve(script)
        async with server:
            pool = StreamPool(url)
            assert (await _post(pool))[2] == [b"1!"]
            assert (await asyncio.wait_for(_post(pool), 10))[2] == [b"3!"]
            assert len(conns) == 2
            pool.close()

    _run(main())


def test_refused_connection_and_send_now() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: refused

    async def script(n: int, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n%d" % n)
        return True

    async def main() -> None:
        with pytest.raises(HttpError) as info:
            await _post(StreamPool(dead))
        assert info.value.connect
        server, url, conns = await _serve(script)
        async with server:
            pool = StreamPool(url, limit=2)
            assert pool.send_now("/generate", b"{}", lambda d, t: False) is None  # nothing open yet
            await pool.preopen(5)
            assert len(pool._idle) == 2  # bounded by the limit
            reads: list[bytes] = []
            sent = pool.send_now("/generate", b"{}", lambda d, t: reads.append(d) is None and False)
            assert sent is not None
            assert await pool.post_stream("/generate", b"{}", lambda d, t: False, sent) == (200, b"")
            assert reads == [b"1"] and len(conns) == 2
            pool.close()

    _run(main())


@pytest.mark.skipif(not arrival.SUPPORTED, reason="kernel receive timestamps: Linux, 64-bit")
def test_a_read_is_stamped_when_its_bytes_arrived_not_when_the_loop_got_to_it() -> None:
    """The loop is held inside the first event's callback while the second event arrives: the second
    read's time is its arrival (inside the server's send), not the later moment the loop read it."""
    got_first, second_sent = threading.Event(), threading.Event()
    sent_at: list[float] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunk(b"data: 1\n\n"))
            got_first.wait(10)
            conn.sendall(_chunk(b"data: 2\n\n") + b"0\r\n\r\n")
            sent_at.append(time.perf_counter())
            second_sent.set()
            conn.recv(1)  # until the client closes

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    reads: list[tuple[bytes, float]] = []
    unblocked: list[float] = []

    def on_data(data: bytes, now: float) -> bool:
        reads.append((data, now))
        if len(reads) == 1:
            got_first.set()
            second_sent.wait(10)  # the loop is stuck here while the second event arrives
            unblocked.append(time.perf_counter())
        return False

    async def main() -> StreamPool:
        pool = StreamPool(f"http://127.0.0.1:{listener.getsockname()[1]}")
        assert pool.stamped
        assert await asyncio.wait_for(pool.post_stream("/generate", b"{}", on_data), 20) == (200, b"")
        pool.close()
        return pool

    try:
        pool = _run(main())
    finally:
        listener.close()
        server.join(10)
    assert [d for d, _ in reads] == [b"data: 1\n\n", b"data: 2\n\n"]
    after, second = sent_at[0], reads[1][1]
    assert second <= after < unblocked[0]  # stamped inside the send, though read only after the loop was freed
    assert isinstance(pool, StreamPool) and max(pool.read_lags) >= unblocked[0] - after  # ... and the wait is reported


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def test_arrival_reads_the_kernel_stamp_and_never_returns_a_future_time() -> None:
    stamp = struct.pack("@qq", 1_000, 250_000_000)  # 1000.25 s on the wall clock
    msg = [(socket.SOL_SOCKET, arrival.SO_TIMESTAMPNS, stamp)]
    assert arrival.arrival(msg, rt_now=1_000.75, pc_now=50.0) == pytest.approx(49.5)  # arrived 0.5 s ago
    assert arrival.arrival(msg, rt_now=999.0, pc_now=50.0) == 50.0  # the wall clock stepped back: now, not later
    assert arrival.arrival([], rt_now=1_000.0, pc_now=50.0) is None
    assert arrival.arrival([(socket.SOL_SOCKET, 99, stamp)], rt_now=1_000.0, pc_now=50.0) is None


def test_a_request_larger_than_the_socket_buffer_is_sent_whole() -> None:
    body = b"x" * (8 << 20)  # far beyond one send(): the rest waits for the socket to drain

    async def script(n: int, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        return True

    async def main() -> None:
        server, url, _ = await _serve(script)
        async with server:
            pool = StreamPool(url)  # the server answers only after reading all 8 MiB (its Content-Length)
            assert await asyncio.wait_for(_post(pool, body), 30) == (200, b"", [b"ok"])
            pool.close()

    _run(main())


def test_tls_urls_keep_asyncio_transport() -> None:
    assert not StreamPool("https://127.0.0.1:1").stamped
    assert StreamPool("http://127.0.0.1:1").stamped == arrival.SUPPORTED


async def _silent_server() -> tuple[asyncio.Server, str, asyncio.Event]:
    """A server that reads each request and never answers it (until ``release`` is set)."""
    release = asyncio.Event()

    async def script(n: int, w: asyncio.StreamWriter) -> bool:
        await release.wait()
        return False

    server, url, _ = await _serve(script)
    return server, url, release


def test_a_cancel_that_lands_as_the_connect_completes_ends_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """Half of the demo's hang (2026-12-02): the task is cancelled in the loop turn in which its
    connect completes. asyncio.wait_for (Python 3.11) then returned the connection, the cancel was
    lost and the request waited for a reply (the other half: the dying server had closed that
    connection, below); it must end with the cancel."""
    real_open = arrival.open_stamped
    real_create = asyncio.BaseEventLoop.create_connection

    async def cancelled_on_completion(*args: object, **kwargs: object) -> object:
        out = await real_open(*args, **kwargs)  # type: ignore[arg-type]
        task = outer[0]
        task.cancel()  # lands now, before the awaiting task runs again
        return out

    async def create_cancelled(self: asyncio.BaseEventLoop, *args: object, **kwargs: object) -> object:
        out = await real_create(self, *args, **kwargs)  # type: ignore[arg-type]
        outer[0].cancel()
        return out

    monkeypatch.setattr(arrival, "open_stamped", cancelled_on_completion)
    monkeypatch.setattr(asyncio.BaseEventLoop, "create_connection", create_cancelled)
    outer: list[asyncio.Task[object]] = []

    async def main() -> None:
        server, url, release = await _silent_server()
        async with server:
            pool = StreamPool(url, limit=2, connect_timeout_s=10)  # a load point's: a timeout around the connect
            task = asyncio.get_running_loop().create_task(_post(pool))
            outer.append(task)
            done, _ = await asyncio.wait({task}, timeout=5)
            release.set()
            assert done, "the cancelled request still waits for a reply"
            assert task.cancelled()
            pool.close()

    _run(main())


def test_close_ends_a_request_that_still_waits_for_its_reply() -> None:
    async def main() -> None:
        server, url, release = await _silent_server()
        async with server:
            pool = StreamPool(url, limit=2)
            task = asyncio.get_running_loop().create_task(_post(pool))
            await asyncio.sleep(0.3)  # sent, waiting
            assert not task.done()
            pool.close()
            done, _ = await asyncio.wait({task}, timeout=5)
            release.set()
            assert done and isinstance(task.exception(), HttpError)

    _run(main())


def test_a_load_point_ends_a_request_that_outlives_its_cancel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defence in depth: whatever loses a cancel, the teardown aborts the connections after
    ``_END_S`` and the request ends with its connection, so the load point's end never hangs."""
    from autotune.load import runner as load_runner
    from autotune.load.spec import LoadSpec

    monkeypatch.setattr(load_runner, "_END_S", 0.2)

    async def main() -> None:
        server, url, release = await _silent_server()
        async with server:
            pool = StreamPool(url, limit=2)
            runner = load_runner.LoadRunner(url, LoadSpec(base_url=url, num_prompts=1), None, pool)

            async def stubborn() -> object:
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    pass  # a lost cancel: the request goes on and waits for a reply that never comes
                return await _post(pool)

            task = asyncio.get_running_loop().create_task(stubborn())
            await asyncio.sleep(0.05)
            t0 = time.perf_counter()
            await asyncio.wait_for(runner._end_tasks([task]), 5)
            release.set()
            assert task.done() and isinstance(task.exception(), HttpError)
            assert time.perf_counter() - t0 < 2

    _run(main())


def test_a_request_on_a_connection_the_server_already_closed_fails_at_once() -> None:
    """The server closes a fresh connection before the request is written (it is dying): the
    transport's connection_lost has run with no request to fail and a closing transport drops
    writes, so the request must fail when written, not wait for a reply that cannot come."""
    async def main() -> None:
        accepted: list[asyncio.StreamWriter] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.append(writer)
            writer.close()  # at once, before any request

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with server:
            pool = StreamPool(url, limit=2)
            conn = await pool._connect()
            for _ in range(50):  # until the loop has read the server's EOF
                if conn.closed:
                    break
                await asyncio.sleep(0.01)
            assert conn.closed
            fut = StreamPool._write(conn, b"POST / HTTP/1.1\r\n\r\n", lambda data, now: False)
            with pytest.raises(HttpError, match="closed before the request"):
                await asyncio.wait_for(fut, 2)
            pool.close()

    _run(main())
