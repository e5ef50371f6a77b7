"""Hostile input, what comes back from a server: the load generator against a server that is broken,
malicious, a proxy or another program on the port.

Each answer below once ate memory without bound, spun the event loop, raised a traceback out of a
transport callback, or held a request open past every timeout: a head without end, a chunk size of
"-5", 20,000 "100 Continue" heads, an SSE line without end, comments trickled after the first token,
bytes after ``[DONE]``, a token count of 1e308 or a string, more tokens than asked for, a redirect to
another host, a time scale of 1e308. Now each is one request's error (or a warning) and the read stops;
nothing here waits for a timeout longer than a second or two.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from support.hostile import SECONDS

from autotune.load import LoadPointFailed, LoadSpec, LoadTimeouts, run_load
from autotune.load.run import time_scale_of
from autotune.load.transport.http import MAX_HEAD_BYTES, HttpError, StreamPool
from autotune.load.transport.stream import EVENT_BYTES, StreamParser, event_limit, token_limit

pytestmark = pytest.mark.timeout(SECONDS)

Answer = Callable[[socket.socket, str, str], None]  # (connection, method, path): writes a reply


def _sse(obj: object) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


_OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
_TOKEN = _sse({"choices": [{"text": "a"}], "usage": {"prompt_tokens": 4, "completion_tokens": 1}})


class _Server:
    """A raw HTTP server on 127.0.0.1 whose replies ``answer`` writes; counts the bytes it managed to send."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.sent = 0
        self.conns: list[socket.socket] = []
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        try:
            while not self.stop.is_set():
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                method, path = head.split(b"\r\n")[0].decode().split(" ")[:2]
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")[1:]
                               if line.lower().startswith(b"content-length")), 0)
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                self.answer(conn, method, path)
        except OSError:
            pass
        finally:
            conn.close()

    def send(self, conn: socket.socket, data: bytes) -> None:
        conn.sendall(data)
        self.sent += len(data)

    def endless(self, conn: socket.socket, piece: bytes) -> None:
        """``piece`` again and again until the client closes (or the test ends)."""
        while not self.stop.is_set():
            self.send(conn, piece)

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        for conn in self.conns:
            conn.close()


@contextmanager
def serving(stream: Callable[[_Server, socket.socket], None],
            control: Callable[[_Server, socket.socket, str], bool] | None = None) -> Iterator[_Server]:
    """A server whose POSTs ``stream`` answers and whose GETs ``control`` answers (else a small JSON)."""

    def answer(conn: socket.socket, method: str, path: str) -> None:
        if method == "GET" or path == "/flush_cache":
            if control is None or not control(srv, conn, path):
                body = b'{"data": [{"id": "m"}]}' if path == "/v1/models" else b"{}"
                srv.send(conn, b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            return
        stream(srv, conn)
        raise OSError("one streamed reply per connection")

    srv = _Server(answer)
    try:
        yield srv
    finally:
        srv.close()


def _spec(**timeouts: float) -> LoadSpec:
    return LoadSpec(backend="openai", model="m", num_prompts=1, input_len=4, output_len=2, warmup_requests=0,
                    timeouts=LoadTimeouts(first_token_s=timeouts.get("first", 5), between_tokens_s=timeouts.get("between", 5)))


def _failed_with(srv: _Server, needle: str, **timeouts: float) -> str:
    with pytest.raises(LoadPointFailed) as info:
        run_load(srv.url, _spec(**timeouts))
    msg = str(info.value)
    assert "\n" not in msg and needle in msg, msg
    return msg


# ---- the HTTP client: a reply that never ends where it should ----------------------------------------

def _post_fails(stream: Callable[[_Server, socket.socket], None], needle: str) -> _Server:
    """A streamed POST answered by ``stream`` raises HttpError holding ``needle``, and the client
    stopped reading (the server could not send much more than the limit)."""

    async def main(srv: _Server) -> None:
        pool = StreamPool(srv.url)
        try:
            with pytest.raises(HttpError, match=needle):
                await asyncio.wait_for(pool.post_stream("/v1/completions", b"{}", lambda d, t: False), 5)
        finally:
            pool.close()

    with serving(stream) as srv:
        asyncio.run(main(srv))
    return srv


@pytest.mark.parametrize(("name", "reply"), [
    ("headers without end", lambda s, c: (s.send(c, b"HTTP/1.1 200 OK\r\n"), s.endless(c, b"X-A: " + b"a" * 1000 + b"\r\n"))),
    ("a header line without end", lambda s, c: (s.send(c, b"HTTP/1.1 200 OK\r\nX-A: "), s.endless(c, b"a" * 65536))),
    ("100 Continue 20,000 times", lambda s, c: s.send(c, b"HTTP/1.1 100 Continue\r\n\r\n" * 20_000)),
])
def test_a_head_past_its_limit_fails_the_request(name: str, reply: Callable[[_Server, socket.socket], None]) -> None:
    srv = _post_fails(reply, f"response head of more than {MAX_HEAD_BYTES} bytes")
    assert srv.sent < 64 * MAX_HEAD_BYTES, name  # the connection was closed, not read on (socket buffers aside)


_CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize(("name", "reply", "needle"), [
    # int("-5", 16) is -5: the chunk loop then took empty pieces forever, in the event loop itself
    ("a negative chunk size", lambda s, c: (s.send(c, _CHUNKED + b"-5\r\nabc\r\n"), s.stop.wait(5)), "malformed chunk size"),
    ("a chunk size of '0x5'", lambda s, c: (s.send(c, _CHUNKED + b"0x5\r\nabcde\r\n"), s.stop.wait(5)), "malformed chunk size"),
    ("a chunk-size line without end", lambda s, c: (s.send(c, _CHUNKED), s.endless(c, b"0" * 65536)), "a line of more than"),
    ("chunk extensions without end", lambda s, c: (s.send(c, _CHUNKED + b"5;"), s.endless(c, b"a" * 65536)), "a line of more than"),
    ("trailers without end", lambda s, c: (s.send(c, _CHUNKED + b"0\r\n"), s.endless(c, b"X: y\r\n")), "trailers of more than"),
    ("a status of 5,000 digits", lambda s, c: s.send(c, b"HTTP/1.1 " + b"9" * 5000 + b" OK\r\n\r\n"), "malformed HTTP status"),
])
def test_a_malformed_chunked_body_fails_the_request(name: str, reply: Callable[[_Server, socket.socket], None],
                                                    needle: str) -> None:
    _post_fails(reply, needle)


def test_an_error_body_without_end_is_cut_and_the_request_ends() -> None:
    async def main(srv: _Server) -> tuple[int, bytes]:
        pool = StreamPool(srv.url)
        try:
            return await asyncio.wait_for(pool.post_stream("/v1/completions", b"{}", lambda d, t: False), 5)
        finally:
            pool.close()

    def reply(s: _Server, c: socket.socket) -> None:
        s.send(c, b"HTTP/1.1 500 Oops\r\n\r\n")
        s.endless(c, b"e" * 65536)

    with serving(reply) as srv:
        status, body = asyncio.run(main(srv))
    assert status == 500 and len(body) == 1 << 16


def test_a_reader_that_raises_ends_its_request_with_the_error() -> None:
    """An exception out of the read callback (a parser bug) ends the request at once: raised from a
    transport callback it was the event loop's traceback, and the request waited for its timeout."""

    def boom(data: bytes, now: float) -> bool:
        raise KeyError("bug")

    async def main(srv: _Server) -> None:
        pool = StreamPool(srv.url)
        try:
            with pytest.raises(KeyError, match="bug"):
                await asyncio.wait_for(pool.post_stream("/v1/completions", b"{}", boom), 5)
        finally:
            pool.close()

    with serving(lambda s, c: (s.send(c, _OK_HEAD + _TOKEN), s.stop.wait(5))) as srv:
        asyncio.run(main(srv))


# ---- the stream: events, counts and types ----------------------------------------------------------

def test_an_event_without_end_is_refused_at_its_limit_and_not_kept() -> None:
    p = StreamParser("openai", max_tokens=4)
    limit = event_limit(4)
    assert limit == EVENT_BYTES + 64 * 4
    fed = 0
    while not p.error:
        p.feed(b"a" * 65536)
        fed += 65536
    assert fed <= limit + 65536 and p.error.startswith(f"malformed stream: an event of more than {limit} bytes")
    assert p.feed(b"data: {}\n\n") == 0  # a failed stream reads nothing more


def test_an_event_split_over_many_reads_is_still_read_whole() -> None:
    event = _sse({"choices": [{"text": "x" * 5000}], "usage": {"completion_tokens": 1}})
    p = StreamParser("openai", max_tokens=4)
    got = sum(p.feed(event[i : i + 3]) for i in range(0, len(event), 3))
    assert got == 1 and p.error is None
    p = StreamParser("openai", max_tokens=4)  # the blank line split over two reads, CRLF framing
    crlf = event.replace(b"\n", b"\r\n")
    assert p.feed(crlf[:-3]) == 0 and p.feed(crlf[-3:]) == 1 and p.error is None


@pytest.mark.parametrize(("backend", "event", "needle"), [
    ("openai", {"choices": "x"}, "choices is of type str"),
    ("openai", {"choices": [5]}, "choices[0] is of type int"),
    ("openai", {"choices": [{"text": 5}]}, "choices[0].text is of type int"),
    ("openai-chat", {"choices": [{"delta": "hi"}]}, "choices[0].delta is of type str"),
    ("openai", {"choices": [{"text": "a"}], "usage": [1]}, "usage is of type list"),
    ("openai", {"choices": [{"text": "a"}], "usage": {"completion_tokens": "abc"}},
     "usage.completion_tokens is of type str, not a token count"),
    ("openai", {"choices": [{"text": "a"}], "usage": {"completion_tokens": 1e308}},
     "usage.completion_tokens is 1e+308, not a token count"),
    ("openai", {"choices": [], "usage": {"prompt_tokens": -1}}, "usage.prompt_tokens is -1"),
    ("openai", {"choices": [], "usage": {"prompt_tokens": True}}, "usage.prompt_tokens is of type bool"),
    ("openai", {"usage": {"prompt_tokens_details": {"cached_tokens": 2**62}}}, "cached_tokens is 4611686018427387904"),
    ("sglang", {"meta_info": [1]}, "meta_info is of type list"),
    ("sglang", {"output_ids": "abc"}, "output_ids is of type str"),
    ("sglang", {"text": 5, "meta_info": {"completion_tokens": 1}}, "text is of type int"),
    ("sglang", {"meta_info": {"completion_tokens": 10**15}}, "meta_info.completion_tokens is 1000000000000000"),
    ("sglang", b"[" * 100_000 + b"]" * 100_000, "malformed stream: b'[[["),
])
def test_a_field_of_the_wrong_kind_is_a_malformed_stream(backend: str, event: object, needle: str) -> None:
    p = StreamParser(backend, keep_output=True, max_tokens=4)
    p.feed(_sse(event) + b"data: [DONE]\n\n")
    assert p.error is not None and p.error.startswith("malformed stream: ") and needle in p.error, p.error
    p.output()  # and the kept reply reads without an exception


def test_more_tokens_than_asked_for_end_the_stream() -> None:
    p = StreamParser("openai", max_tokens=4)
    fed = 0
    while not p.error:
        p.feed(_sse({"choices": [{"text": "a"}]}))
        fed += 1
    assert fed == token_limit(4) + 1 == 73
    assert p.error == "malformed stream: more than 72 tokens for max_tokens=4"
    native = StreamParser("sglang", max_tokens=4)  # a cumulative counter that leaps: the native fast path too
    native.feed(_sse({"meta_info": {"prompt_tokens": 3, "completion_tokens": 1}}))
    native.feed(_sse({"meta_info": {"completion_tokens": 9_999_999}}))
    assert native.error is not None and "more than 72 tokens" in native.error
    native = StreamParser("sglang", max_tokens=4)  # 5,000 digits: parsed in full (not int()'s ValueError), refused
    native.feed(_sse({"meta_info": {"prompt_tokens": 3, "completion_tokens": 1}}))
    native.feed(b'data: {"meta_info": {"completion_tokens": ' + b"9" * 5000 + b"}}\n\n")
    assert native.error is not None and native.error.startswith("malformed stream")


# ---- a load point: liveness, [DONE], control requests -------------------------------------------------

@pytest.mark.parametrize(("name", "trickle"), [
    ("comments", b": ping\n\n"), ("blank events", b"\n\n"), ("a line without end", b"a"),
])
def test_bytes_without_tokens_after_the_first_meet_the_between_tokens_timeout(name: str, trickle: bytes) -> None:
    """Only tokens keep a request alive: every read reset the timer, so a server trickling ``trickle``
    after one token held the request (and the load point) forever."""

    def reply(s: _Server, c: socket.socket) -> None:
        s.send(c, _OK_HEAD + _TOKEN)
        while not s.stop.wait(0.05):
            s.send(c, trickle)

    with serving(reply) as srv:
        _failed_with(srv, "between-tokens timeout x1", between=0.5)


def test_bytes_after_done_do_not_hold_the_request_open() -> None:
    def reply(s: _Server, c: socket.socket) -> None:
        s.send(c, _OK_HEAD + _TOKEN + _sse({"choices": [{"text": "b"}]}) + b"data: [DONE]\n\n")
        while not s.stop.wait(0.05):
            s.send(c, b"junk")

    with serving(reply) as srv:
        result = run_load(srv.url, _spec())
    assert result.metrics["completed"] == 1


def test_a_stream_of_tokens_without_end_fails_at_the_token_limit() -> None:
    def reply(s: _Server, c: socket.socket) -> None:
        s.send(c, _OK_HEAD)
        s.endless(c, _sse({"choices": [{"text": "a"}]}))

    with serving(reply) as srv:
        _failed_with(srv, "malformed stream x1")


def test_a_redirect_of_a_control_request_is_not_followed() -> None:
    elsewhere = socket.create_server(("127.0.0.1", 0))  # a listener the redirect points at: nobody may come
    elsewhere.settimeout(0.2)
    port = elsewhere.getsockname()[1]

    def control(s: _Server, c: socket.socket, path: str) -> bool:
        if path == "/server_info":
            s.send(c, b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:%d/server_info\r\nContent-Length: 0\r\n\r\n" % port)
            return True
        return False

    def reply(s: _Server, c: socket.socket) -> None:
        s.send(c, _OK_HEAD + _TOKEN + _sse({"choices": [{"text": "b"}]}) + b"data: [DONE]\n\n")

    try:
        with serving(reply, control) as srv:
            assert run_load(srv.url, _spec()).metrics["completed"] == 1
        with pytest.raises(TimeoutError):
            elsewhere.accept()
    finally:
        elsewhere.close()


@pytest.mark.parametrize("value", [1e308, 1e-300, float("nan"), -1, "20", True])
def test_a_time_scale_no_simulator_has_is_ignored(value: object) -> None:
    assert time_scale_of({"sim": {"time_scale": value}}) == 1.0
    assert time_scale_of({"sim": {"time_scale": 20}}) == 20.0
