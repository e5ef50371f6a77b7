"""Endpoints of the simulated SGLang server, in process, against a stub token engine.

These check response shapes as SGLang's clients parse them (SSE framing, cumulative
``/generate`` chunks, OpenAI chunks and the usage chunk), readiness, ``/flush_cache``
and the stream/health fault kinds. The real process is tested in
test_sim_server_process.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from autotune.sim.faults import Faults, parse_faults
from autotune.sim.http import ServerState, start_http
from autotune.sim.tokenizer import WordTokenizer


@dataclass
class _Chunk:
    token_ids: list[int]
    modelled_time_s: float
    finished: bool
    finish_reason: str | None


class StubEngine:
    """Emits max_new_tokens tokens one per chunk, 0.01 modelled s apart; can be held."""

    def __init__(self) -> None:
        self.now = 0.0
        self.gate = asyncio.Event()
        self.gate.set()
        self.served = 0
        self.emitted = 0

    async def generate(self, rid: str, input_len: int, max_new_tokens: int, ignore_eos: bool = True,
                       keys: Any = None) -> AsyncIterator[_Chunk]:
        for i in range(max_new_tokens):
            await self.gate.wait()
            await asyncio.sleep(0)
            self.now += 0.01
            self.emitted += 1
            last = i == max_new_tokens - 1
            if last:
                self.served += 1
            yield _Chunk([100 + i], self.now, last, "length" if last else None)

    def stats(self, requests: bool = True) -> dict[str, Any]:
        return {"tokens_emitted": self.emitted, "requests_served": self.served, **({"requests": []} if requests else {})}

    def modelled_now(self) -> float:
        return self.now

    def flush_cache(self) -> bool:
        return True

    def cached_tokens(self, rid: str) -> int:
        return 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _sse_events(resp: aiohttp.ClientResponse) -> list[str]:
    """Split an SSE body the way bench_serving does: on blank lines, strip 'data: '."""
    body = (await resp.read()).decode()
    events = []
    for block in body.split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            events.append(block[len("data: "):])
    return events


class Harness:
    def __init__(self, faults: Faults | None = None, ready: bool = True) -> None:
        self.engine = StubEngine()
        self.crashed = 0
        self.lines: list[str] = []
        self.state = ServerState(served_model_name="sim-model", context_len=1000,
                                 server_info={"max_req_input_len": 994, "tp_size": 1, "internal_states": [{}]},
                                 model_info={"model_path": "m"}, engine=self.engine, faults=faults or Faults(),
                                 ready=ready, crash=self._crash, emit=self.lines.append)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def _crash(self) -> None:
        self.crashed += 1

    async def __aenter__(self) -> Harness:
        self.runner = await start_http(self.state, "127.0.0.1", self.port)
        self.session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.close()
        await self.runner.cleanup()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_tokenizer_counts_words_and_roundtrips_output() -> None:
    tok = WordTokenizer()
    assert tok.count("The capital  city\nof France") == 5
    assert tok.count("   ") == 0
    assert tok.encode("a b a") [0] == tok.encode("a")[0]
    text = tok.decode([5, 6, 7])
    assert tok.count(text) == 3
    assert tok.decode([5]) + tok.decode_increment([5, 6, 7], 1) == text
    assert tok.count_messages([{"role": "user", "content": "one two"},
                               {"role": "user", "content": [{"type": "text", "text": "three"}]}]) == 3


def test_not_ready_answers_503_everywhere_that_serves() -> None:
    async def body() -> None:
        async with Harness(ready=False) as h:
            for method, path in (("GET", "/health"), ("GET", "/health_generate"), ("POST", "/generate"),
                                 ("POST", "/v1/completions")):
                async with h.session.request(method, h.url + path, json={"text": "a"}) as r:
                    assert r.status == 503, path
            async with h.session.get(h.url + "/server_info") as r:
                assert (await r.json())["status"] == "Starting"
    run(body())


def test_generate_non_streaming_counts_prompt_and_output() -> None:
    async def body() -> None:
        async with Harness() as h:
            req = {"text": "one two three four", "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}}
            async with h.session.post(h.url + "/generate", json=req) as r:
                out = await r.json()
            meta = out["meta_info"]
            assert meta["prompt_tokens"] == 4 and meta["completion_tokens"] == 5
            assert out["output_ids"] == [100, 101, 102, 103, 104]
            assert meta["finish_reason"] == {"type": "length", "length": 5}
            assert meta["e2e_latency"] == pytest.approx(0.05)
            async with h.session.post(h.url + "/generate", json={"input_ids": [1, 2, 3],
                                                                 "sampling_params": {"max_new_tokens": 2}}) as r:
                assert (await r.json())["meta_info"]["prompt_tokens"] == 3
    run(body())


def test_generate_streaming_is_cumulative_and_ends_with_done() -> None:
    async def body() -> None:
        async with Harness() as h:
            req = {"text": "a b", "sampling_params": {"max_new_tokens": 4}, "stream": True}
            async with h.session.post(h.url + "/generate", json=req) as r:
                assert r.headers["Content-Type"].startswith("text/event-stream")
                events = await _sse_events(r)
            assert events[-1] == "[DONE]"
            chunks = [json.loads(e) for e in events[:-1]]
            assert [len(c["output_ids"]) for c in chunks] == [1, 2, 3, 4]
            assert [c["meta_info"]["completion_tokens"] for c in chunks] == [1, 2, 3, 4]
            assert chunks[-1]["text"].startswith(chunks[-2]["text"])
            assert chunks[0]["meta_info"]["finish_reason"] is None
            assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
            assert "e2e_latency" in chunks[-1]["meta_info"]
    run(body())


def test_openai_completions_stream_with_usage_chunk() -> None:
    async def body() -> None:
        async with Harness() as h:
            req = {"model": "sim-model", "prompt": "x y z", "max_tokens": 3, "stream": True,
                   "stream_options": {"include_usage": True}, "ignore_eos": True}
            async with h.session.post(h.url + "/v1/completions", json=req) as r:
                events = await _sse_events(r)
            assert events[-1] == "[DONE]"
            chunks = [json.loads(e) for e in events[:-1]]
            usage = chunks[-1]
            assert usage["choices"] == [] and usage["usage"]["prompt_tokens"] == 3
            assert usage["usage"]["completion_tokens"] == 3 and usage["usage"]["total_tokens"] == 6
            text = "".join(c["choices"][0]["text"] for c in chunks[:-1])
            assert WordTokenizer().count(text) == 3
            assert chunks[-2]["choices"][0]["finish_reason"] == "length"
            assert all(c["object"] == "text_completion" for c in chunks)
            async with h.session.post(h.url + "/v1/completions", json=dict(req, stream=False)) as r:
                out = await r.json()
            assert out["usage"]["completion_tokens"] == 3 and out["choices"][0]["finish_reason"] == "length"
    run(body())


def test_openai_chat_stream_role_then_content_and_non_stream() -> None:
    async def body() -> None:
        async with Harness() as h:
            req = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 2, "stream": True,
                   "stream_options": {"include_usage": True}}
            async with h.session.post(h.url + "/v1/chat/completions", json=req) as r:
                chunks = [json.loads(e) for e in (await _sse_events(r))[:-1]]
            assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
            assert chunks[0]["object"] == "chat.completion.chunk"
            content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
            assert WordTokenizer().count(content) == 2
            assert chunks[-1]["usage"]["prompt_tokens"] == 2
            async with h.session.post(h.url + "/v1/chat/completions", json=dict(req, stream=False)) as r:
                out = await r.json()
            assert out["object"] == "chat.completion" and out["usage"]["completion_tokens"] == 2
            assert WordTokenizer().count(out["choices"][0]["message"]["content"]) == 2
    run(body())


def test_info_endpoints_and_models() -> None:
    async def body() -> None:
        async with Harness() as h:
            async with h.session.get(h.url + "/v1/models") as r:
                card = (await r.json())["data"][0]
            assert card["id"] == "sim-model" and card["max_model_len"] == 1000 and card["owned_by"] == "sglang"
            async with h.session.get(h.url + "/get_server_info") as r:
                info = await r.json()
            assert info["status"] == "Up" and info["tp_size"] == 1
            assert any("deprecated" in line for line in h.lines)
            async with h.session.get(h.url + "/model_info") as r:
                assert (await r.json())["model_path"] == "m"
            async with h.session.get(h.url + "/sim/stats") as r:
                assert "tokens_emitted" in await r.json()
    run(body())


def test_bad_requests_are_400() -> None:
    async def body() -> None:
        async with Harness() as h:
            for payload in ({}, {"text": ""}, {"text": " ".join(["w"] * 995)}):
                async with h.session.post(h.url + "/generate", json=payload) as r:
                    assert r.status == 400, payload
                    assert "message" in (await r.json())["error"]
    run(body())


def test_flush_cache_refused_while_requests_run() -> None:
    async def body() -> None:
        async with Harness() as h:
            h.engine.gate.clear()
            task = asyncio.create_task(h.session.post(h.url + "/generate", json={
                "text": "a", "sampling_params": {"max_new_tokens": 2}}))
            for _ in range(200):
                if h.state.in_flight:
                    break
                await asyncio.sleep(0.01)
            async with h.session.post(h.url + "/flush_cache") as r:
                assert r.status == 400
            h.engine.gate.set()
            (await task).release()
            async with h.session.post(h.url + "/flush_cache") as r:
                assert r.status == 200
    run(body())


def test_fault_malformed_sse_breaks_exactly_the_nth_chunk() -> None:
    async def body() -> None:
        async with Harness(parse_faults(["malformed_sse:3"])) as h:
            req = {"text": "a", "sampling_params": {"max_new_tokens": 4}, "stream": True}
            async with h.session.post(h.url + "/generate", json=req) as r:
                events = (await _sse_events(r))[:-1]
            bad = []
            for i, e in enumerate(events):
                try:
                    json.loads(e)
                except json.JSONDecodeError:
                    bad.append(i)
            assert bad == [2]
    run(body())


def test_fault_health_fail_after() -> None:
    async def body() -> None:
        async with Harness(parse_faults(["health_fail_after:2"])) as h:
            codes = []
            for path in ("/health", "/health_generate", "/health", "/health"):
                async with h.session.get(h.url + path) as r:
                    codes.append(r.status)
            assert codes == [200, 200, 503, 503]
    run(body())


def test_fault_crash_after_calls_crash_once_n_requests_finished() -> None:
    async def body() -> None:
        async with Harness(parse_faults(["crash_after:2"])) as h:
            for _ in range(2):
                async with h.session.post(h.url + "/generate", json={"text": "a",
                                                                     "sampling_params": {"max_new_tokens": 1}}) as r:
                    assert r.status == 200
                await asyncio.sleep(0.1)
                if h.crashed:
                    break
            assert h.crashed == 1 and h.state.faults.requests_finished == 2
    run(body())


def test_parse_faults_rejects_bad_specs() -> None:
    from autotune.errors import ConfigError

    f = parse_faults(["slow_tokens:2.5", "hang_startup,crash_after:3"])
    assert f.slow_tokens == 2.5 and f.hang_startup and f.crash_after == 3
    for bad in ("nope", "crash_after", "crash_after:x", "hang_startup:1", "malformed_sse:0"):
        with pytest.raises(ConfigError):
            parse_faults([bad])
