"""SGLang's HTTP endpoints, served by aiohttp for the simulated server.

Shapes follow SGLang's ``python/sglang/srt/entrypoints/http_server.py`` (0.5.9 and 0.5.23): ``/generate`` with
cumulative SSE chunks and ``meta_info``, OpenAI ``/v1/completions`` and
``/v1/chat/completions`` (chunks, ``[DONE]``, the usage chunk of
``stream_options.include_usage``), ``/server_info``, ``/model_info``, ``/v1/models``,
``/flush_cache``, health. Everything answers 503 until :attr:`ServerState.ready`.
``/sim/stats`` is the simulator's ground truth (exact tokens, per-request modelled times; ``?requests=0``: without
the per-request records).

Latencies in responses (``e2e_latency``) are *modelled* seconds, like every time the
simulator reports; divide wall clock by the time scale to compare.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from autotune.errors import AutotuneError
from autotune.sim.faults import Faults
from autotune.sim.tokenizer import WordTokenizer

logger = logging.getLogger(__name__)

class EngineLike(Protocol):
    """What the HTTP layer needs of :class:`autotune.sim.engine.core.Engine`."""

    def generate(self, rid: str, input_len: int, max_new_tokens: int, ignore_eos: bool = True,
                 keys: Sequence[int] | None = None) -> AsyncIterator[Any]: ...

    def flush_cache(self) -> bool: ...

    def cached_tokens(self, rid: str) -> int: ...

    def stats(self, requests: bool = True) -> dict[str, Any]: ...

    def modelled_now(self) -> float: ...


def _default_crash() -> None:
    os._exit(1)


@dataclass
class ServerState:
    """Everything the endpoints read; filled in by the startup sequence."""

    served_model_name: str
    context_len: int
    server_info: dict[str, Any] = field(default_factory=dict)  # static part of /server_info
    model_info: dict[str, Any] = field(default_factory=dict)
    engine: EngineLike | None = None
    tokenizer: WordTokenizer = field(default_factory=WordTokenizer)
    faults: Faults = field(default_factory=Faults)
    ready: bool = False
    dead: bool = False  # the engine died (runtime OOM); health fails from then on
    crash: Callable[[], None] = _default_crash
    emit: Callable[[str], None] = lambda line: None  # writes one server log line
    in_flight: int = 0
    cache_report: bool = False  # --enable-cache-report: usage.prompt_tokens_details.cached_tokens
    api_key: str | None = None  # --api-key: every endpoint but health wants it (auth_middleware)
    admin_api_key: str | None = None  # --admin-api-key: /flush_cache wants it instead
    created: int = field(default_factory=lambda: int(time.time()))
    _rid_counter: itertools.count = field(default_factory=itertools.count)

    @property
    def max_req_input_len(self) -> int:
        return int(self.server_info.get("max_req_input_len", self.context_len - 6))

    def new_rid(self) -> str:
        return f"{uuid.uuid4().hex[:16]}{next(self._rid_counter)}"


STATE_KEY = web.AppKey("state", ServerState)


class BadRequest(Exception):
    """A request SGLang would refuse with 400; the message is SGLang-like."""


def _error(status: int, message: str) -> web.Response:
    body = {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status}
    return web.json_response({"error": body} if status != 503 else body, status=status)


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


class _Stream:
    """One request's token stream: runs the engine, counts tokens, applies stream faults."""

    def __init__(self, state: ServerState, input_len: int, max_new_tokens: int, ignore_eos: bool, rid: str | None,
                 keys: Sequence[int] | None = None) -> None:
        if input_len < 1:
            raise BadRequest("The input is empty. Please provide a non-empty prompt or input_ids.")
        if input_len > state.max_req_input_len:
            raise BadRequest(
                f"The input ({input_len} tokens) is longer than the model's context length "
                f"({state.context_len} tokens)."
            )
        if max_new_tokens < 0:
            raise BadRequest(f"max_new_tokens must be at least 0, got {max_new_tokens}.")
        self.state = state
        self.rid = rid or state.new_rid()
        self.input_len = input_len
        self.max_new_tokens = min(max_new_tokens, state.context_len - input_len)
        self.ignore_eos = ignore_eos
        self.keys = keys  # prompt token ids: the radix cache's key
        self.cached_tokens = 0
        self.output_ids: list[int] = []
        self.text = ""  # decoded output so far, extended per chunk (not re-decoded)
        self.finish_reason: str | None = None
        self.arrival_s = state.engine.modelled_now() if state.engine else 0.0
        self.end_s = self.arrival_s

    async def chunks(self) -> AsyncIterator[list[int]]:
        """Yield each chunk's new token ids; keeps cumulative state on ``self``."""
        engine = self.state.engine
        if engine is None:
            raise web.HTTPServiceUnavailable()
        if self.max_new_tokens == 0:
            self.finish_reason = "length"
            return
        state_tok = self.state.tokenizer
        agen = engine.generate(self.rid, self.input_len, self.max_new_tokens, ignore_eos=self.ignore_eos,
                               keys=self.keys)
        try:
            async for chunk in agen:
                self.cached_tokens = engine.cached_tokens(self.rid)
                piece = state_tok.decode(chunk.token_ids)
                if piece:
                    self.text = f"{self.text} {piece}" if self.text else piece
                self.output_ids.extend(chunk.token_ids)
                self.end_s = chunk.modelled_time_s
                if chunk.finished:
                    self.finish_reason = chunk.finish_reason or "length"
                yield list(chunk.token_ids)
                if chunk.finished:
                    break
        finally:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None:
                await aclose()

    @property
    def e2e_latency(self) -> float:
        return max(0.0, self.end_s - self.arrival_s)

    def sglang_finish_reason(self) -> dict[str, Any] | None:
        if self.finish_reason is None:
            return None
        if self.finish_reason == "length":
            return {"type": "length", "length": len(self.output_ids)}
        return {"type": self.finish_reason, "matched": 0}


def _check_ready(state: ServerState) -> web.Response | None:
    if not state.ready:
        return _error(503, "The server is not ready yet (starting up).")
    return None


async def _finish_request(state: ServerState) -> None:
    if state.faults.on_request_finished():
        state.emit("Simulated fault crash_after: the server exits abruptly.")
        asyncio.get_running_loop().call_later(0.05, state.crash)


async def _stream_response(request: web.Request, state: ServerState, stream: _Stream,
                           render: Callable[[list[int]], list[Any]],
                           tail: Callable[[], list[Any]]) -> web.StreamResponse:
    """Send ``render(new_ids)`` objects per chunk, then ``tail()`` objects, then ``[DONE]``."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    state.in_flight += 1
    try:
        try:
            async for new_ids in stream.chunks():
                for obj in render(new_ids):
                    if state.faults.next_sse_chunk_is_malformed():
                        await resp.write(b'data: {"text": "broken' + b"\n\n")
                    else:
                        await resp.write(_sse(obj))
        except AutotuneError as exc:  # the engine stopped under this request
            await resp.write(_sse({"error": {"message": str(exc)}}))
        else:
            for obj in tail():
                await resp.write(_sse(obj))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    except (ConnectionResetError, asyncio.CancelledError):
        logger.debug("client of %s went away", stream.rid)
        raise
    finally:
        state.in_flight -= 1
    await _finish_request(state)
    return resp


async def _run_to_end(state: ServerState, stream: _Stream) -> None:
    state.in_flight += 1
    try:
        async for _ in stream.chunks():
            pass
    finally:
        state.in_flight -= 1
    await _finish_request(state)


async def _run_all(state: ServerState, streams: list[_Stream]) -> web.Response | None:
    """Run non-streamed requests to their end; a 500 response if the engine stopped under them."""
    try:
        await asyncio.gather(*(_run_to_end(state, s) for s in streams))
    except AutotuneError as exc:
        return web.json_response({"error": {"message": str(exc)}}, status=500)
    return None


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"Invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    return body


# ---------------------------------------------------------------- native /generate
def _generate_obj(state: ServerState, stream: _Stream) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": stream.rid,
        "finish_reason": stream.sglang_finish_reason(),
        "prompt_tokens": stream.input_len,
        "weight_version": "default",
        "total_retractions": 0,
        "completion_tokens": len(stream.output_ids),
        "cached_tokens": stream.cached_tokens,
    }
    if stream.finish_reason is not None:
        meta["e2e_latency"] = stream.e2e_latency
    return {"text": stream.text, "output_ids": list(stream.output_ids), "meta_info": meta}


async def handle_generate(request: web.Request) -> web.StreamResponse:
    state: ServerState = request.app[STATE_KEY]
    if (resp := _check_ready(state)) is not None:
        return resp
    try:
        body = await _json_body(request)
        if "input_ids" in body and body["input_ids"] is not None:
            prompts = body["input_ids"]
            batch = bool(prompts) and isinstance(prompts[0], list)
            keys = list(prompts) if batch else [prompts]
            lens = [len(p) for p in keys]
        elif isinstance(body.get("text"), (str, list)):
            texts = body["text"]
            batch = isinstance(texts, list)
            keys = [state.tokenizer.encode(t) for t in (texts if batch else [texts])]
            lens = [len(k) for k in keys]
        else:
            raise BadRequest("Either text or input_ids should be provided.")
        sp = body.get("sampling_params") or {}
        max_new = int(sp.get("max_new_tokens", 128) if sp.get("max_new_tokens") is not None else 128)
        ignore_eos = bool(sp.get("ignore_eos", False))
        rids = body.get("rid")
        streams = [_Stream(state, n, max_new, ignore_eos,
                           (rids[i] if isinstance(rids, list) else rids) if rids else None, keys[i])
                   for i, n in enumerate(lens)]
    except (BadRequest, ValueError, TypeError) as exc:
        return _error(400, str(exc))
    if body.get("stream"):
        if batch:
            return _error(400, "The simulated server streams single requests only.")
        stream = streams[0]
        return await _stream_response(request, state, stream, lambda _ids: [_generate_obj(state, stream)], lambda: [])
    if (failed := await _run_all(state, streams)) is not None:
        return failed
    objs = [_generate_obj(state, s) for s in streams]
    return web.json_response(objs if batch else objs[0])


# ---------------------------------------------------------------- OpenAI-compatible
def _usage(state: ServerState, stream: _Stream) -> dict[str, Any]:
    # SGLang fills prompt_tokens_details only when launched with --enable-cache-report
    details = {"cached_tokens": stream.cached_tokens} if state.cache_report else None
    return {"prompt_tokens": stream.input_len, "completion_tokens": len(stream.output_ids),
            "total_tokens": stream.input_len + len(stream.output_ids), "prompt_tokens_details": details,
            "reasoning_tokens": 0}


async def _openai(request: web.Request, chat: bool) -> web.StreamResponse:
    state: ServerState = request.app[STATE_KEY]
    if (resp := _check_ready(state)) is not None:
        return resp
    try:
        body = await _json_body(request)
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest("messages must be a non-empty list.")
            keys = state.tokenizer.encode_messages(messages)
            input_len = len(keys)
            default_max = state.context_len - input_len
            max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
                keys = list(prompt)
            elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                keys = state.tokenizer.encode(prompt[0])
            elif isinstance(prompt, str):
                keys = state.tokenizer.encode(prompt)
            else:
                raise BadRequest("prompt must be a string or a list of token ids.")
            input_len = len(keys)
            default_max = 16  # OpenAI's (and SGLang's) default max_tokens for completions
            max_tokens = body.get("max_tokens")
        stream = _Stream(state, input_len, int(default_max if max_tokens is None else max_tokens),
                         bool(body.get("ignore_eos", False)), body.get("rid"), keys)
    except (BadRequest, ValueError, TypeError) as exc:
        return _error(400, str(exc))
    model = body.get("model") or state.served_model_name
    cid = ("chatcmpl-" if chat else "cmpl-") + stream.rid
    created = int(time.time())
    obj_kind = "chat.completion" if chat else "text_completion"

    def finish() -> str | None:
        return None if stream.finish_reason is None else ("length" if stream.finish_reason == "length" else "stop")

    def envelope(choices: list[dict[str, Any]], usage: Any = None, chunk: bool = True) -> dict[str, Any]:
        kind = obj_kind + (".chunk" if chunk and chat else "")
        return {"id": cid, "object": kind, "created": created, "model": model, "choices": choices, "usage": usage}

    if body.get("stream"):
        opts = body.get("stream_options") or {}
        include_usage = bool(opts.get("include_usage"))
        # SGLang's continuous_usage_stats: cumulative usage on every chunk, so a client can
        # tell how many tokens a chunk carried (several under speculative decoding).
        continuous = include_usage and bool(opts.get("continuous_usage_stats"))
        sent_role = [False]

        def render(new_ids: list[int]) -> list[Any]:
            text = state.tokenizer.decode_increment(stream.output_ids, len(stream.output_ids) - len(new_ids)) \
                if new_ids else ""
            out = []
            if chat and not sent_role[0]:
                sent_role[0] = True
                out.append(envelope([{"index": 0, "delta": {"role": "assistant", "content": ""},
                                      "logprobs": None, "finish_reason": None, "matched_stop": None}]))
            if chat:
                choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish(),
                          "matched_stop": None}
            else:
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish(), "matched_stop": None}
            out.append(envelope([choice], _usage(state, stream) if continuous else None))
            return out

        def tail() -> list[Any]:
            return [envelope([], _usage(state, stream))] if include_usage else []

        return await _stream_response(request, state, stream, render, tail)
    if (failed := await _run_all(state, [stream])) is not None:
        return failed
    text = stream.text
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text, "reasoning_content": None,
                                          "tool_calls": None}, "logprobs": None, "finish_reason": finish(),
                  "matched_stop": None}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish(), "matched_stop": None}
    return web.json_response(envelope([choice], _usage(state, stream), chunk=False))


async def handle_completions(request: web.Request) -> web.StreamResponse:
    return await _openai(request, chat=False)


async def handle_chat(request: web.Request) -> web.StreamResponse:
    return await _openai(request, chat=True)


# ---------------------------------------------------------------- info, health, control
async def handle_health(request: web.Request) -> web.Response:
    state: ServerState = request.app[STATE_KEY]
    if not state.ready or state.dead:
        return web.Response(status=503)
    if state.faults.health_check_fails():
        return web.Response(status=503)
    return web.Response(status=200)


def _server_info(state: ServerState) -> dict[str, Any]:
    info = dict(state.server_info)
    info["status"] = "Up" if state.ready else "Starting"
    internal = dict(info.get("internal_states", [{}])[0]) if info.get("internal_states") else {}
    if state.engine is not None:
        stats = state.engine.stats()
        now = state.engine.modelled_now()
        internal["last_gen_throughput"] = stats.get("tokens_emitted", 0) / now if now > 0 else 0.0
        cache = stats.get("cache") or {}
        if cache.get("enabled"):
            internal["cache_hit_rate"] = cache.get("hit_rate", 0.0)
        if stats.get("spec_accept_length") is not None:  # as SGLang: only once a verify ran
            internal["avg_spec_accept_length"] = stats["spec_accept_length"]
    info["internal_states"] = [internal]
    return info


async def handle_server_info(request: web.Request) -> web.Response:
    state: ServerState = request.app[STATE_KEY]
    if request.path.startswith("/get_"):
        state.emit(f"Endpoint '{request.path}' is deprecated and will be removed in a future version. "
                   f"Please use '{request.path.replace('/get_', '/')}' instead.")
    if request.path.endswith("model_info"):
        return web.json_response(state.model_info)
    return web.json_response(_server_info(state))


async def handle_models(request: web.Request) -> web.Response:
    state: ServerState = request.app[STATE_KEY]
    card = {"id": state.served_model_name, "object": "model", "created": state.created, "owned_by": "sglang",
            "root": state.served_model_name, "parent": None, "max_model_len": state.context_len}
    return web.json_response({"object": "list", "data": [card]})


async def handle_flush_cache(request: web.Request) -> web.Response:
    state: ServerState = request.app[STATE_KEY]
    if state.in_flight > 0 or (state.engine is not None and not state.engine.flush_cache()):
        return web.Response(status=400, text="Cache not flushed. " + _FLUSH_NOTE)
    return web.Response(status=200, text="Cache flushed.\n" + _FLUSH_NOTE)


_FLUSH_NOTE = ("Please check backend logs for more details. "
               "(When there are running or waiting requests, the operation will not be performed.)\n")


async def handle_sim_stats(request: web.Request) -> web.Response:
    state: ServerState = request.app[STATE_KEY]
    # ?requests=0: the counters and the clock without a record per request served (the load generator's clock
    # probe polls this during a run; the records grow with every request the server has served)
    records = request.query.get("requests", "1").lower() not in ("0", "false", "no")
    stats: dict[str, Any] = dict(state.engine.stats(records)) if state.engine is not None else {}
    stats["modelled_now_s"] = state.engine.modelled_now() if state.engine is not None else 0.0
    stats["in_flight_http"] = state.in_flight
    stats["faults"] = {"requests_finished": state.faults.requests_finished,
                       "sse_chunks_sent": state.faults.sse_chunks_sent, "health_checks": state.faults.health_checks}
    return web.json_response(stats)


#: Endpoints SGLang marks ``AuthLevel.ADMIN_OPTIONAL`` among those the simulator serves.
_ADMIN_OPTIONAL = ("/flush_cache",)


def _bearer(header: str | None, key: str) -> bool:
    scheme, _, token = (header or "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(token, key)


@web.middleware
async def auth_middleware(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
    """SGLang's API keys, as 0.5.9 checks them (``sglang/srt/utils/auth.py``, ``decide_request_auth``):
    OPTIONS, ``/health*`` and ``/metrics`` are open; an admin-optional endpoint wants
    ``--admin-api-key`` when set, else ``--api-key``; every other endpoint wants ``--api-key``
    when set, as ``Authorization: Bearer KEY``. A refusal is 401 ``{"error": "Unauthorized"}``."""
    state: ServerState = request.app[STATE_KEY]
    path = request.path
    if request.method == "OPTIONS" or path.startswith(("/health", "/metrics")):
        return await handler(request)
    key = state.api_key
    if path in _ADMIN_OPTIONAL and state.admin_api_key:
        key = state.admin_api_key
    if key and not _bearer(request.headers.get("Authorization"), key):
        return web.json_response({"error": "Unauthorized"}, status=401)
    return await handler(request)


def build_app(state: ServerState) -> web.Application:
    """The aiohttp application serving SGLang's endpoints from ``state``."""
    app = web.Application(client_max_size=64 * 1024 * 1024,
                          middlewares=[auth_middleware] if state.api_key or state.admin_api_key else [])
    app[STATE_KEY] = state
    r = app.router
    for path in ("/health", "/health_generate"):
        r.add_get(path, handle_health)
    for path in ("/model_info", "/get_model_info", "/server_info", "/get_server_info"):
        r.add_get(path, handle_server_info)
    r.add_get("/v1/models", handle_models)
    r.add_route("*", "/flush_cache", handle_flush_cache)
    r.add_post("/generate", handle_generate)
    r.add_put("/generate", handle_generate)
    r.add_post("/v1/completions", handle_completions)
    r.add_post("/v1/chat/completions", handle_chat)
    r.add_get("/sim/stats", handle_sim_stats)
    return app


async def start_http(state: ServerState, host: str, port: int) -> web.AppRunner:
    """Bind and start serving; the caller owns the returned runner (``await runner.cleanup()``)."""
    runner = web.AppRunner(build_app(state), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    return runner
