"""The stream parser on bytes real SGLang 0.5.23 sent (CPU, tiny random-weight Llama), no server needed.

A random model emits special tokens; SGLang streams each as a chunk whose text is ""
while ``usage.completion_tokens`` still rises. When such a token came last, counting
only chunks with text left the client one token short of the server's own count.
"""

from __future__ import annotations

import json

from autotune.load.transport.stream import StreamParser


def _sse(objs: list[dict]) -> bytes:
    return b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs) + b"data: [DONE]\n\n"


def _completion(text: str, ct: int, finish: str | None = None) -> dict:
    return {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}],
            "usage": {"prompt_tokens": 4, "total_tokens": 4 + ct, "completion_tokens": ct}}


def test_empty_text_tokens_count_like_the_servers_usage() -> None:
    # As captured from /v1/completions with continuous_usage_stats: tokens 2 and 5 decode to "".
    chunks = [_completion("bivu", 1), _completion("", 2), _completion(" bivu", 3), _completion(" bivu", 4),
              _completion("", 5, "length"),
              {"object": "text_completion", "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 5}}]
    p = StreamParser("openai")
    per_read = [p.feed(line + b"\n\n") for line in _sse(chunks).split(b"\n\n") if line]
    assert p.done and p.completion_tokens == 5
    assert sum(per_read) == 5 == p.counted
    assert per_read[:5] == [1, 1, 1, 1, 1]


def test_chat_role_chunk_and_usage_free_finish_chunk_count_nothing() -> None:
    role = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    content = [{"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": " :"}}],
                "usage": {"prompt_tokens": 6, "completion_tokens": ct}} for ct in (2, 4)]
    finish = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    total = {"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 6, "completion_tokens": 4}}
    p = StreamParser("openai-chat")
    counts = [p.feed(b"data: " + json.dumps(o).encode() + b"\n\n") for o in (role, *content, finish, total)]
    assert counts == [0, 2, 2, 0, 0] and p.completion_tokens == 4


def test_without_per_chunk_usage_the_final_total_carries_the_silent_tokens() -> None:
    plain = [{"choices": [{"index": 0, "text": t}]} for t in ("a", "", " b")]
    total = {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3}}
    p = StreamParser("openai")
    counts = [p.feed(b"data: " + json.dumps(o).encode() + b"\n\n") for o in (*plain, total)]
    assert counts == [1, 0, 1, 1] and p.completion_tokens == 3
