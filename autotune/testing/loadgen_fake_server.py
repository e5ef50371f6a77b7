"""An independent, minimal streaming LLM server with known timing, for load-generator tests.

Raw asyncio protocol (HTTP/1.1 keep-alive, chunked responses), no framework, so its
own overhead is small and its timing is the truth the load generator is checked
against. Every stream emits its first token ``--ttft-ms`` after the request arrived
and then one token every ``--token-delay-ms`` on an absolute schedule (no drift);
with ``--token-delay-ms 0`` it streams as fast as the client reads (back-pressure
aware). ``--ticker`` paces all streams on one decode-step timer instead (cheaper at
high concurrency, like an engine's batch step). Each token is one SSE event written
as one chunk.

Endpoints: ``POST /generate`` (SGLang native: cumulative ``text``/``output_ids``,
``meta_info.completion_tokens``), ``POST /v1/completions`` and
``POST /v1/chat/completions`` (OpenAI SSE; usage chunk with
``stream_options.include_usage``, per-chunk usage with ``continuous_usage_stats``),
``GET /v1/models``, ``GET /server_info`` (no ``"sim"`` unless ``--time-scale`` is given),
``POST /flush_cache`` (also restarts the truth window), ``GET /stats`` (ground truth:
server-side timings of every request since the last flush).

Run: ``python -m autotune.testing.loadgen_fake_server --port 0`` prints ``PORT <n>`` when listening.
Faults: ``--die-after-tokens N`` exits the process (no goodbye) after N tokens in total;
``--hold-after-done`` never ends a response body after its ``[DONE]`` event.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

WORD = " tok"  # one word = one token for a whitespace tokenizer


class Truth:
    """Server-side record of the requests since the last flush."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.all_requests = 0
        self.flushes = getattr(self, "flushes", 0)

    def summary(self) -> dict[str, Any]:
        done = [r for r in self.requests if r["done"] is not None]
        out: dict[str, Any] = {
            "requests": len(self.requests),
            "completed": len(done),
            "all_requests": self.all_requests,
            "flushes": self.flushes,
            "total_output_tokens": sum(r["tokens"] for r in done),
            "total_input_tokens": sum(r["prompt_tokens"] for r in done),
        }
        if done:
            first = min(r["arrival"] for r in self.requests)
            last = max(r["done"] for r in done)
            out["duration"] = last - first
            out["output_throughput"] = out["total_output_tokens"] / (last - first)
            ttfts = sorted((r["first"] - r["arrival"]) * 1000 for r in done)
            out["median_ttft_ms"] = ttfts[len(ttfts) // 2] if len(ttfts) % 2 else sum(
                ttfts[len(ttfts) // 2 - 1 : len(ttfts) // 2 + 1]
            ) / 2
            tpots = [(r["last"] - r["first"]) * 1000 / (r["tokens"] - 1) for r in done if r["tokens"] > 1]
            out["mean_tpot_ms"] = sum(tpots) / len(tpots) if tpots else 0.0
            out["in_flight_mean"] = sum(r["done"] - r["arrival"] for r in done) / (last - first)
            out["prompt_tokens"] = [r["prompt_tokens"] for r in self.requests]
            out["output_lens"] = [r["tokens"] for r in done]
            out["arrivals"] = [r["arrival"] for r in self.requests]
            out["ttfts_ms"] = [(r["first"] - r["arrival"]) * 1000 for r in done]
            out["firsts"] = [r["first"] for r in done]
        return out


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.truth = Truth()
        self.tokens_total = 0
        self.connections = 0
        self.ticking: list[Stream] = []
        self.loop = asyncio.get_running_loop()
        self.delay = args.token_delay_ms / 1000.0
        self.ttft = args.ttft_ms / 1000.0

    async def tick(self) -> None:
        """--ticker: one decode step every ``delay``; each open stream gets one token per step."""
        step = self.loop.time()
        while True:
            step += self.delay
            await asyncio.sleep(max(step - self.loop.time(), 0.0))
            now = self.loop.time()
            alive = []
            for st in self.ticking:
                if st.proto.closed:
                    continue
                if st.t_first <= now:
                    st.step()  # one token (paced mode emits one per call)
                if st.k < st.n and not st.proto.closed:
                    alive.append(st)
            self.ticking = alive

    def count_token(self) -> None:
        self.tokens_total += 1
        if self.args.die_after_tokens and self.tokens_total >= self.args.die_after_tokens:
            os._exit(3)


class Stream:
    """One streamed response being written."""

    def __init__(self, proto: Conn, kind: str, body: dict[str, Any], prompt_tokens: int) -> None:
        self.proto = proto
        self.kind = kind
        self.n = int(
            (body.get("sampling_params") or {}).get("max_new_tokens", 16)
            if kind == "generate"
            else body.get("max_tokens", 16)
        )
        if proto.server.args.eos_after:  # the model "stops" early, as without ignore_eos
            self.n = min(self.n, proto.server.args.eos_after)
        so = body.get("stream_options") or {}
        self.usage = bool(so.get("include_usage"))
        self.cont = bool(so.get("continuous_usage_stats"))
        self.model = body.get("model", "fake-model")
        self.prompt_tokens = prompt_tokens
        self.k = 0
        self.text_json = ""
        self.ids_json = b""

        self.rec: dict[str, Any] = {
            "arrival": time.perf_counter(),
            "first": None,
            "last": None,
            "done": None,
            "tokens": 0,
            "prompt_tokens": prompt_tokens,
        }
        proto.server.truth.requests.append(self.rec)
        proto.server.truth.all_requests += 1
        self.t_first = proto.server.loop.time() + proto.server.ttft

    def event(self) -> bytes:
        k = self.k
        if self.kind == "generate":
            # cumulative text and ids, kept as growing JSON fragments (cheap at high token rates)
            self.text_json += WORD
            self.ids_json += b"%d" % (6 + k) if k == 1 else b",%d" % (6 + k)
            finish = b'{"type":"length","length":%d}' % k if k == self.n else b"null"
            return (
                b'data: {"text":"' + self.text_json.encode() + b'","output_ids":[' + self.ids_json
                + b'],"meta_info":{"id":"r","prompt_tokens":%d,"completion_tokens":%d,"finish_reason":'
                % (self.prompt_tokens, k) + finish + b"}}\n\n"
            )
        obj: dict[str, Any]
        if self.kind == "chat":
            obj = {
                "id": "c",
                "object": "chat.completion.chunk",
                "model": self.model,
                "choices": [
                    {"index": 0, "delta": {"content": WORD}, "finish_reason": "length" if k == self.n else None}
                ],
            }
        else:
            obj = {
                "id": "c",
                "object": "text_completion",
                "model": self.model,
                "choices": [{"index": 0, "text": WORD, "finish_reason": "length" if k == self.n else None}],
            }
        if self.cont and self.kind != "generate":
            obj["usage"] = self._usage(k)
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    def _usage(self, k: int) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": k, "total_tokens": self.prompt_tokens + k}

    def start(self) -> None:
        p = self.proto
        p.write_head(200, "text/event-stream", chunked=True)
        if self.kind == "chat":
            role = {"id": "c", "object": "chat.completion.chunk", "model": self.model,
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
            p.write_chunk(b"data: " + json.dumps(role).encode() + b"\n\n")
        if p.server.args.ticker and p.server.delay > 0:
            p.server.ticking.append(self)  # joins the decode-step ticker once t_first has passed
        else:
            p.server.loop.call_at(self.t_first, self.step)

    def step(self) -> None:
        """Emit the next token(s): paced, or as many as the socket takes when delay is 0."""
        p = self.proto
        srv = p.server
        if p.closed:
            return
        while True:
            self.k += 1
            now = time.perf_counter()
            p.write_chunk(self.event())
            self.rec["tokens"] = self.k
            if self.rec["first"] is None:
                self.rec["first"] = now
            self.rec["last"] = now
            srv.count_token()
            if self.k >= self.n:
                self.finish()
                return
            if srv.delay > 0:
                if not srv.args.ticker:
                    srv.loop.call_at(self.t_first + self.k * srv.delay, self.step)
                return
            if p.paused:
                p.on_resume = self.step
                return

    def finish(self) -> None:
        p = self.proto
        if self.usage and self.kind != "generate":
            tail = {"id": "c", "object": "text_completion", "model": self.model, "choices": [],
                    "usage": self._usage(self.k)}
            p.write_chunk(b"data: " + json.dumps(tail).encode() + b"\n\n")
        p.write_chunk(b"data: [DONE]\n\n")
        self.rec["done"] = time.perf_counter()
        if p.server.args.hold_after_done:
            return  # fault: the body never ends and the connection stays busy
        p.write_end()
        p.busy = False
        p.process()


class Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.buf = b""
        self.busy = False
        self.paused = False
        self.closed = False
        self.on_resume: Any = None
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.server.connections += 1
        sock = transport.get_extra_info("socket")
        if sock is not None:  # no Nagle: a token must not wait for the ACK of the headers
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        cb, self.on_resume = self.on_resume, None
        if cb is not None:
            cb()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self.process()

    # --- framing ---
    def write_head(self, status: int, ctype: str, *, chunked: bool, length: int = 0) -> None:
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found"}.get(status, "X")
        framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {length}"
        self.transport.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n{framing}\r\n\r\n".encode()
        )

    def write_chunk(self, data: bytes) -> None:
        self.transport.write(b"%x\r\n%s\r\n" % (len(data), data))

    def write_end(self) -> None:
        self.transport.write(b"0\r\n\r\n")

    def reply_json(self, obj: Any, status: int = 200) -> None:
        data = json.dumps(obj).encode()
        self.write_head(status, "application/json", chunked=False, length=len(data))
        self.transport.write(data)

    # --- requests ---
    def process(self) -> None:
        while not self.busy and not self.closed:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[:head_end].decode("latin-1").split("\r\n")
            method, path, _ = head[0].split(" ", 2)
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", 0))
            if len(self.buf) < head_end + 4 + length:
                return
            body = self.buf[head_end + 4 : head_end + 4 + length]
            self.buf = self.buf[head_end + 4 + length :]
            self.handle(method, path, body, headers)

    def handle(self, method: str, path: str, raw: bytes, headers: dict[str, str]) -> None:
        srv = self.server
        key = srv.args.api_key
        if key and path != "/stats" and headers.get("authorization") != f"Bearer {key}":
            return self.reply_json({"error": {"message": "bad api key"}}, 401)
        if path == "/server_info":
            info: dict[str, Any] = {"version": "fake", "max_total_num_tokens": 1 << 20}
            if srv.args.time_scale:
                info["sim"] = {"time_scale": srv.args.time_scale}
            if srv.args.accept_length:
                info["internal_states"] = [{"avg_spec_accept_length": srv.args.accept_length}]
            if srv.args.server_info_pad:
                info["pad"] = "x" * srv.args.server_info_pad
            return self.reply_json(info)
        if path == "/v1/models":
            return self.reply_json({"object": "list", "data": [{"id": srv.args.model, "object": "model"}]})
        if path == "/stats":
            return self.reply_json({**srv.truth.summary(), "connections": srv.connections})
        if path == "/flush_cache":
            srv.truth.flushes += 1
            srv.truth.reset()
            return self.reply_json({"ok": True})
        kinds = {"/generate": "generate", "/v1/completions": "completions", "/v1/chat/completions": "chat"}
        if method != "POST" or path not in kinds:
            return self.reply_json({"error": {"message": f"no route {method} {path}"}}, 404)
        body = json.loads(raw or b"{}")
        kind = kinds[path]
        if kind == "generate":
            prompt_tokens = len(body["input_ids"]) if "input_ids" in body else len(str(body.get("text", "")).split())
        elif kind == "chat":
            prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        else:
            prompt = body.get("prompt", "")
            prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        self.busy = True
        Stream(self, kind, body, prompt_tokens).start()


async def serve(args: argparse.Namespace) -> None:
    srv = Server(args)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Conn(srv), "127.0.0.1", args.port, backlog=4096)
    ticker = loop.create_task(srv.tick()) if args.ticker and srv.delay > 0 else None
    port = server.sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    async with server:
        await server.serve_forever()
    if ticker is not None:
        ticker.cancel()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token-delay-ms", type=float, default=5.0)
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--model", default="fake-model")
    ap.add_argument("--time-scale", type=float, default=0.0, help="report a 'sim' time scale (default: none)")
    ap.add_argument("--die-after-tokens", type=int, default=0)
    ap.add_argument("--eos-after", type=int, default=0, help="stop every stream after this many tokens")
    ap.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY")
    ap.add_argument("--hold-after-done", action="store_true", help="never end the body after [DONE]")
    ap.add_argument("--uvloop", action="store_true")
    ap.add_argument("--accept-length", type=float, default=0.0,
                    help="report this avg_spec_accept_length in /server_info (default: none)")
    ap.add_argument("--server-info-pad", type=int, default=0, help="pad /server_info's answer with this many bytes")
    ap.add_argument("--ticker", action="store_true",
                    help="paced mode on one global decode-step timer (cheaper; TTFT waits for the next step)")
    args = ap.parse_args(argv)
    if args.uvloop:
        import uvloop

        uvloop.run(serve(args))
    else:
        asyncio.run(serve(args))


class FakeServer:
    """A running fake server subprocess (see :func:`running`)."""

    def __init__(self, proc: subprocess.Popen[str], port: int) -> None:
        self.proc = proc
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/stats", timeout=10) as resp:
            return json.loads(resp.read())


@contextlib.contextmanager
def running(*options: str) -> Iterator[FakeServer]:
    """Start the server on a free port (it binds port 0 and reports it); always kill it."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--port", "0", *options],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("PORT "):
            raise RuntimeError(f"fake server did not start: {line!r}")
        yield FakeServer(proc, int(line.split()[1]))
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


if __name__ == "__main__":
    main()
