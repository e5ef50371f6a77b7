"""Stream parsing: SSE events split across reads, token counts per backend, errors."""

from __future__ import annotations

import json

from autotune.load.transport.stream import StreamParser


def sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def native(k: int, prompt: int = 7) -> bytes:
    return sse({"text": "x" * k, "output_ids": list(range(k)),
                "meta_info": {"prompt_tokens": prompt, "completion_tokens": k}})


def test_native_cumulative_counts_become_per_read_increments() -> None:
    p = StreamParser("sglang")
    assert p.feed(native(1)) == 1
    assert p.feed(native(3) + native(4)) == 3  # two events in one read: 2 + 1 new tokens
    assert p.feed(b"data: [DONE]\n\n") == 0
    assert p.done and p.completion_tokens == 4 and p.prompt_tokens == 7 and p.tokens_from_server


def test_events_split_anywhere_across_reads() -> None:
    raw = native(1) + native(2) + b"data: [DONE]\n\n"
    p = StreamParser("sglang")
    got = [p.feed(raw[i : i + 5]) for i in range(0, len(raw), 5)]
    assert sum(got) == 2 and p.done


def test_crlf_framing_is_accepted() -> None:
    p = StreamParser("sglang")
    assert p.feed(native(2).replace(b"\n", b"\r\n")) == 2


def test_openai_without_per_chunk_usage_counts_chunks_then_takes_server_total() -> None:
    p = StreamParser("openai")
    assert p.feed(sse({"choices": [{"text": " a"}]})) == 1
    assert p.feed(sse({"choices": [{"text": ""}]})) == 0  # empty text carries no token
    assert p.feed(sse({"choices": [{"text": " b"}]})) == 1
    assert not p.tokens_from_server and p.completion_tokens == 2
    p.feed(sse({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 5}}) + b"data: [DONE]\n\n")
    assert p.completion_tokens == 5 and p.prompt_tokens == 9 and p.tokens_from_server and p.done


def test_openai_continuous_usage_gives_tokens_per_chunk() -> None:
    p = StreamParser("openai")
    assert p.feed(sse({"choices": [{"text": " ab"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}})) == 2
    assert p.feed(sse({"choices": [{"text": " c"}], "usage": {"prompt_tokens": 3, "completion_tokens": 3}})) == 1
    assert p.feed(sse({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3}})) == 0
    assert p.completion_tokens == 3


def test_chat_role_chunk_is_not_a_token() -> None:
    p = StreamParser("openai-chat")
    assert p.feed(sse({"choices": [{"delta": {"role": "assistant", "content": ""}}]})) == 0
    assert p.feed(sse({"choices": [{"delta": {"content": "hi"}}]})) == 1


def test_error_event_is_reported() -> None:
    p = StreamParser("sglang")
    p.feed(native(1) + sse({"error": {"message": "out of memory"}}))
    assert p.error == "server error: out of memory"


def test_malformed_event_is_reported() -> None:
    p = StreamParser("openai")
    p.feed(b"data: {not json\n\n")
    assert p.error is not None and p.error.startswith("malformed stream")


def test_comment_and_event_lines_are_ignored() -> None:
    p = StreamParser("sglang")
    assert p.feed(b": keep-alive\n\nevent: message\n" + native(1)) == 1


def test_native_fast_path_is_not_fooled_by_generated_text() -> None:
    p = StreamParser("sglang")
    p.feed(native(1))
    tricky = {"text": 'say "completion_tokens": 999 and "error"', "output_ids": [1, 2],
              "meta_info": {"prompt_tokens": 7, "completion_tokens": 2}}
    assert p.feed(sse(tricky)) == 1 and p.completion_tokens == 2 and p.error is None
    tricky2 = {"text": "completion_tokens", "output_ids": [1, 2, 3], "meta_info": {"completion_tokens": 3}}
    assert p.feed(sse(tricky2)) == 1 and p.completion_tokens == 3


def test_native_error_after_tokens_is_seen() -> None:
    p = StreamParser("sglang")
    p.feed(native(1) + native(2))
    p.feed(sse({"error": {"message": "engine died", "completion_tokens": 5}}))
    assert p.error == "server error: engine died" and p.completion_tokens == 2
