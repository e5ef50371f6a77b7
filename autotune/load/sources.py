"""The requests of a load point for every workload kind (:mod:`autotune.load.workloads`).

:func:`prompt_stream` yields :class:`~autotune.load.prompts.Prompt` objects in send order
for every kind but ``multi-turn`` (and ShareGPT with ``turns: all``), whose turns depend
on the replies: :func:`conversation_plans` gives their plans and :func:`turn_prompt`
builds each turn from the history when it is due.

Prompts are token ids for the ``sglang`` backend (exact lengths by construction) and
text for the OpenAI backends, sized with the model's tokenizer when one is given
(:mod:`autotune.load.tokens`). Shared parts are shared exactly: a shared-prefix group's
system prompt, a conversation's history, a Mooncake trace's hash blocks are the same
ids (or text) in every request that carries them, so a radix cache can hit them.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from autotune.limits import MAX_PROMPT_TOKENS, MAX_SEND_S
from autotune.load import prompts as _prompts
from autotune.load.formats import DatasetError, TraceRow, read_prompts, read_sharegpt, read_trace
from autotune.load.prompts import Prompt
from autotune.load.spec import LoadSpec
from autotune.load.tokens import HFCounter, TokenCounter, load_counter
from autotune.load.workloads import (
    FileWorkload,
    GeneratedSharedPrefixWorkload,
    MultiTurnWorkload,
    RandomWorkload,
    ShareGPTWorkload,
    TraceWorkload,
)

Segment = list[int] | str  # token ids (sglang backend) or text (OpenAI backends)


@dataclass
class ConversationPlan:
    """One conversation: an optional system prompt, the user turns and each reply's length."""

    conversation: int
    system: Segment | None
    users: list[Segment]
    output_lens: list[int]
    think_time_s: float = 0.0
    replies: list[Segment] = field(default_factory=list)  # filled in as the replies arrive


@functools.lru_cache(maxsize=8)
def counter_for(tokenizer: Path | None) -> TokenCounter:
    return load_counter(tokenizer)


def is_conversational(spec: LoadSpec) -> bool:
    d = spec.dataset
    return isinstance(d, MultiTurnWorkload) or (isinstance(d, ShareGPTWorkload) and d.turns == "all")


class _Maker:
    """Draws segments of exact token length for one backend."""

    def __init__(self, spec: LoadSpec, seed_offset: int = 0) -> None:
        self.ids = spec.backend == "sglang"
        # ids inside the model's vocabulary (LoadSpec.token_id_range), else the default range
        self.id_range = spec.token_id_range or (_prompts._ID_LOW, _prompts._ID_HIGH)
        self.counter = counter_for(spec.tokenizer)
        self.rng = np.random.default_rng(spec.seed + seed_offset)

    def segment(self, n: int, rng: np.random.Generator | None = None) -> Segment:
        r = rng if rng is not None else self.rng
        if self.ids:
            if isinstance(self.counter, HFCounter):  # the model's own vocabulary
                ids = self.counter.token_ids(r, n)
                if ids is not None:
                    return ids
            return r.integers(self.id_range[0], self.id_range[1], size=n).tolist()
        return self.counter.text_of_len(r, n)

    def lengths(self, length: int, ratio: float, n: int) -> list[int]:
        return [int(v) for v in _prompts.draw_lengths(length, ratio, n, self.rng).tolist()]


def _join(parts: list[Segment]) -> Segment:
    if parts and isinstance(parts[0], list):
        out: list[int] = []
        for p in parts:
            out.extend(p)  # type: ignore[arg-type]
        return out
    return " ".join(str(p) for p in parts if p)


def _prompt(spec: LoadSpec, parts: list[Segment], output_len: int, n_in: int | None, **where: object) -> Prompt:
    """A prompt from its parts: ids joined, text joined, or chat messages (system first)."""
    body = _join(parts)
    if isinstance(body, list):
        return Prompt(output_len=output_len, input_ids=body, input_len=len(body), **where)  # type: ignore[arg-type]
    if spec.backend == "openai-chat" and len(parts) > 1:
        msgs = [{"role": "system", "content": str(parts[0])}, {"role": "user", "content": _join(parts[1:])}]
        return Prompt(output_len=output_len, text=body, messages=msgs, input_len=n_in, **where)  # type: ignore[arg-type]
    return Prompt(output_len=output_len, text=body, input_len=n_in, **where)  # type: ignore[arg-type]


def _random(spec: LoadSpec, d: RandomWorkload, warmup: bool) -> Iterator[Prompt]:
    flat = spec.model_copy(update={"dataset": None, "input_len": d.input_len, "output_len": d.output_len,
                                   "range_ratio": d.range_ratio})
    counter = counter_for(spec.tokenizer)
    if spec.backend == "sglang" or counter.note is not None:
        return _prompts.prompt_stream(flat, warmup=warmup)
    return _exact_random(flat, warmup)  # text of exact length under the model's tokenizer


def _exact_random(spec: LoadSpec, warmup: bool) -> Iterator[Prompt]:
    maker = _Maker(spec, 1_000_003 if warmup else 0)
    n = spec.warmup_requests if warmup else spec.num_prompts
    for k in itertools.count():
        if n is not None and k >= n:
            return
        n_in = maker.lengths(spec.input_len, spec.range_ratio, 1)[0]
        n_out = maker.lengths(spec.output_len, spec.range_ratio, 1)[0]
        yield _prompt(spec, [maker.segment(n_in)], n_out, n_in)


def _gsp(spec: LoadSpec, d: GeneratedSharedPrefixWorkload) -> list[Prompt]:
    maker = _Maker(spec)
    out: list[Prompt] = []
    for g in range(d.num_groups):
        system = maker.segment(d.system_prompt_len)
        q_lens = maker.lengths(d.question_len, d.range_ratio, d.prompts_per_group)
        o_lens = maker.lengths(d.output_len, d.range_ratio, d.prompts_per_group)
        for q_len, o_len in zip(q_lens, o_lens, strict=True):
            out.append(_prompt(spec, [system, maker.segment(q_len)], o_len, d.system_prompt_len + q_len, group=g))
    if not d.ordered:
        order = maker.rng.permutation(len(out)).tolist()
        out = [out[i] for i in order]
    return out


def trace_rows(d: TraceWorkload) -> list[TraceRow]:
    """The rows of trace ``d`` a load point replays (its first ``max_requests``: the rest is not read), checked
    against what a load point builds (:mod:`autotune.limits`) before a token is drawn: at most ``MAX_PROMPTS`` requests,
    their prompt tokens and the tokens of the distinct hash blocks they are cut from each at most
    ``MAX_PROMPT_TOKENS``, and sent within ``MAX_SEND_S`` at their timestamps x ``slowdown_factor``."""
    limit = "" if d.max_requests is not None else " (max_requests replays fewer)"
    rows = read_trace(d.path, d.format, d.max_requests, limit)  # refuses the row past MAX_PROMPTS at its line
    tokens = sum(r.input_len for r in rows)
    if tokens > MAX_PROMPT_TOKENS:
        raise DatasetError(f"{d.path}: its {len(rows):,} requests hold {tokens:,} prompt tokens, more than the "
                           f"{MAX_PROMPT_TOKENS:,} a load point builds{limit}")
    blocks: set[int] = set()
    for r in rows:  # the hash blocks _trace draws: those a request reaches before its input_len is filled
        if r.hash_ids:
            blocks.update(r.hash_ids[: -(-r.input_len // d.block_size)])
    if len(blocks) * d.block_size > MAX_PROMPT_TOKENS:
        raise DatasetError(f"{d.path}: {len(blocks):,} distinct hash_ids x block_size {d.block_size:,} = "
                           f"{len(blocks) * d.block_size:,} tokens of blocks, more than the {MAX_PROMPT_TOKENS:,} "
                           "a load point builds (a smaller block_size)")
    span = rows[-1].at_s * d.slowdown_factor
    if span > MAX_SEND_S:
        raise DatasetError(f"{d.path}:{rows[-1].line}: timestamp: the trace lasts {span:.3g} s at slowdown_factor "
                           f"{d.slowdown_factor:g}, more than the {MAX_SEND_S:,} s (a week) a load point may take")
    return rows


def _trace(spec: LoadSpec, d: TraceWorkload) -> list[Prompt]:
    rows = trace_rows(d)
    maker = _Maker(spec)
    blocks: dict[int, Segment] = {}
    out: list[Prompt] = []
    for r in rows:
        parts: list[Segment] = []
        have = 0
        for h in r.hash_ids or ():
            if have >= r.input_len:
                break
            if h not in blocks:  # the same hash id is the same tokens in every request
                blocks[h] = maker.segment(d.block_size, np.random.default_rng([spec.seed, h & 0x7FFFFFFF]))
            take = min(d.block_size, r.input_len - have)
            block = blocks[h]
            parts.append(block[:take] if isinstance(block, list) else _head_words(block, take))
            have += take
        if have < r.input_len:
            parts.append(maker.segment(r.input_len - have))
        out.append(_prompt(spec, parts, r.output_len, r.input_len, at_s=r.at_s * d.slowdown_factor))
    return out


def _head_words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


def _file(spec: LoadSpec, d: FileWorkload) -> list[Prompt]:
    out = []
    for row in read_prompts(d.path):
        n_out = row.output_len or d.output_len
        if row.input_ids is not None:
            if spec.backend == "openai-chat":
                raise DatasetError(f"{d.path}:{row.line}: input_ids: cannot be sent to the openai-chat backend")
            out.append(Prompt(output_len=n_out, input_ids=row.input_ids, input_len=len(row.input_ids)))
        else:
            out.append(_prompt(spec, [row.text or ""], n_out, None))
    return out


def _sharegpt_first(spec: LoadSpec, d: ShareGPTWorkload, limit: int | None = None) -> list[Prompt]:
    """The first human/gpt pair of each conversation that passes bench_serving's filter, in file order; the
    first ``limit`` of them only (the rest are not counted)."""
    counter = counter_for(spec.tokenizer)
    out: list[Prompt] = []
    for _line, turns in read_sharegpt(d.path):
        if limit is not None and len(out) >= limit:
            break
        pairs = _pairs(turns)
        if not pairs:
            continue
        question, answer = pairs[0]
        n_in, n_ans = counter.count(question), max(counter.count(answer), 1)
        n_out = d.output_len or n_ans
        if n_in < 2 or n_out < 2 or (d.context_len and n_in + n_out > d.context_len):
            continue  # bench_serving's filter of ShareGPT pairs
        out.append(_prompt(spec, [question], n_out, n_in if counter.exact else None))
    if not out:
        raise DatasetError(f"{d.path}:1: conversations: no human/gpt pair usable (too short or over context_len)")
    return out


def _pairs(turns: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(human, gpt) pairs in order; a system turn and unpaired turns are skipped."""
    pairs = []
    convo = [t for t in turns if t[0] != "system"]
    for a, b in itertools.pairwise(convo):
        if a[0] == "human" and b[0] == "gpt":
            pairs.append((a[1], b[1]))
    return pairs


def prompt_stream(spec: LoadSpec, *, warmup: bool = False) -> Iterator[Prompt]:
    """The prompts of a run (or its warm-up) in send order; a trace's carry ``at_s``.

    Finite kinds are cycled when ``num_prompts`` asks for more (as a dataset file is);
    warm-up takes the first ``warmup_requests`` prompts without their send times.
    """
    d = spec.dataset
    if d is None:
        return _prompts.prompt_stream(spec, warmup=warmup)
    if isinstance(d, RandomWorkload):
        return _random(spec, d, warmup)
    if is_conversational(spec):  # warm-up only: first turns
        plans = conversation_plans(spec)
        firsts = [turn_prompt(spec, p, 0) for p in plans]
        return iter(firsts[: spec.warmup_requests]) if warmup else iter(firsts)
    if isinstance(d, GeneratedSharedPrefixWorkload):
        data = _gsp(spec, d)
    elif isinstance(d, TraceWorkload):
        data = _trace(spec, d)
    elif isinstance(d, FileWorkload):
        data = _file(spec, d)
    elif isinstance(d, ShareGPTWorkload):
        # a run sends its first num_prompts (cycled when fewer pass the filter) and warms up on the first
        # warmup_requests: the pairs past both are never sent, so their tokens are not counted
        need = max(spec.num_prompts, spec.warmup_requests) if spec.num_prompts is not None else None
        data = _sharegpt_first(spec, d, need)
    else:  # pragma: no cover - every kind is handled above
        raise DatasetError(f"workload kind {d.kind!r}: not a prompt stream")
    if warmup:  # the first prompts, without a trace's send times
        first = itertools.islice(itertools.cycle(data), spec.warmup_requests)
        return iter([Prompt(output_len=p.output_len, text=p.text, input_ids=p.input_ids, input_len=p.input_len,
                            messages=p.messages) for p in first])
    if spec.num_prompts is not None and spec.num_prompts > len(data) and not isinstance(d, TraceWorkload):
        return itertools.islice(itertools.cycle(data), spec.num_prompts)
    return iter(data)


def check_files(spec: LoadSpec) -> None:
    """Read the workload's file now (DatasetError: one line with file, line and field), so that a
    bad dataset fails before any request is sent."""
    check_workload_files(spec.dataset)


def check_workload_files(d: object) -> None:
    """Read the file of workload ``d`` (a trace, ShareGPT, prompts; nothing for the others) now."""
    if isinstance(d, TraceWorkload):
        trace_rows(d)
    elif isinstance(d, ShareGPTWorkload):
        read_sharegpt(d.path)
    elif isinstance(d, FileWorkload):
        read_prompts(d.path)


def total_requests(spec: LoadSpec) -> int | None:
    """How many requests the run sends when its workload says (None: num_prompts/duration decide)."""
    d = spec.dataset
    if isinstance(d, MultiTurnWorkload):
        return d.num_conversations * d.turns
    return None


def conversation_plans(spec: LoadSpec) -> list[ConversationPlan]:
    """The conversations of a ``multi-turn`` (or ShareGPT ``turns: all``) workload."""
    d = spec.dataset
    if isinstance(d, ShareGPTWorkload):
        plans = []
        counter = counter_for(spec.tokenizer)
        for k, (_line, turns) in enumerate(read_sharegpt(d.path)):
            pairs = _pairs(turns)
            system: Segment | None = next((t[1] for t in turns if t[0] == "system"), None)
            if pairs:
                plans.append(ConversationPlan(k, system, [q for q, _ in pairs],
                                              [d.output_len or max(counter.count(a), 1) for _, a in pairs],
                                              d.think_time_s))
        if not plans:
            raise DatasetError(f"{d.path}:1: conversations: no human/gpt pair")
        return plans
    assert isinstance(d, MultiTurnWorkload)
    maker = _Maker(spec)
    shared = maker.segment(d.system_prompt_len) if d.system_prompt_len else None
    plans = []
    for c in range(d.num_conversations):
        users = [maker.segment(n) for n in maker.lengths(d.user_len, d.range_ratio, d.turns)]
        plans.append(ConversationPlan(c, shared, users, maker.lengths(d.output_len, d.range_ratio, d.turns),
                                      d.think_time_s))
    return plans


def turn_prompt(spec: LoadSpec, plan: ConversationPlan, turn: int) -> Prompt:
    """Turn ``turn`` of ``plan``: the whole history (system, users, replies so far) and the new user turn."""
    n_out = plan.output_lens[turn]
    where = {"conversation": plan.conversation, "turn": turn + 1}
    if spec.backend == "openai-chat":
        msgs: list[dict[str, str]] = []
        if plan.system is not None:
            msgs.append({"role": "system", "content": str(plan.system)})
        for k in range(turn):
            msgs.append({"role": "user", "content": str(plan.users[k])})
            msgs.append({"role": "assistant", "content": str(plan.replies[k]) if k < len(plan.replies) else ""})
        msgs.append({"role": "user", "content": str(plan.users[turn])})
        return Prompt(output_len=n_out, text=str(plan.users[turn]), messages=msgs, **where)  # type: ignore[arg-type]
    parts: list[Segment] = [plan.system] if plan.system is not None else []
    for k in range(turn):
        parts.append(plan.users[k])
        if k < len(plan.replies):
            parts.append(plan.replies[k])
    parts.append(plan.users[turn])
    body = _join(parts)
    if isinstance(body, list):
        return Prompt(output_len=n_out, input_ids=body, input_len=len(body), **where)  # type: ignore[arg-type]
    return Prompt(output_len=n_out, text=body, **where)  # type: ignore[arg-type]
