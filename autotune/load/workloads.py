"""What traffic a load point sends: one pydantic model per workload ``kind``.

The kinds and their field names follow SGLang's ``bench_serving`` where it has them
(``--dataset-name random|sharegpt|generated-shared-prefix|mooncake``, ``--gsp-*``,
``--sharegpt-output-len``, ``--mooncake-slowdown-factor``)::

    random                   input_len, output_len, range_ratio (today's synthetic prompts)
    sharegpt                 path to ShareGPT JSON; turns: first | all; output_len (None: the answer's)
    generated-shared-prefix  num_groups x prompts_per_group; system_prompt_len, question_len, output_len
    multi-turn               num_conversations x turns, each turn carrying the whole history;
                             user_len, output_len, system_prompt_len, think_time_s
    trace                    path to a Mooncake JSONL or Azure LLM inference CSV trace, replayed at
                             its timestamps x slowdown_factor
    file                     path to JSONL of {"prompt" | "input_ids", "output_len"?}

Each is validated on construction (``extra="forbid"``); :data:`Workload` is the
discriminated union (an unknown ``kind`` lists the known ones).

How they meet the load point's own fields: the finite kinds need no ``num_prompts``
(given, it caps them; a dataset is cycled to reach it); a trace is sent at its own
timestamps (``request_rate`` is not used; without ``concurrency`` it is a pure open loop,
the one where send lateness is measured); ``multi-turn`` sends ``num_conversations x
turns`` requests, ``concurrency`` bounding the conversations in progress and
``request_rate`` their starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autotune.limits import MAX_PROMPT_TOKENS, MAX_PROMPTS, MAX_SEND_S, MAX_SEQUENCE_TOKENS

# Each kind is bounded in what it builds before its load point starts (autotune.limits): each length at
# most MAX_SEQUENCE_TOKENS, each count at most MAX_PROMPTS, and the products (requests, their longest
# prompt, their tokens in all) checked here, before a token is drawn. The synthetic prompts of the load
# point itself (num_prompts + warmup_requests) are counted by autotune.load.spec.load_problem.
_LEN = MAX_SEQUENCE_TOKENS
_COUNT = MAX_PROMPTS


def _over(what: str, got: int, limit: int, unit: str, whose: str = "a load point builds") -> str | None:
    return f"{what} = {got:,} {unit}, more than the {limit:,} {whose}" if got > limit else None


class _Kind(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RandomWorkload(_Kind):
    """Synthetic prompts of drawn lengths (bench_serving ``random-ids``)."""

    kind: Literal["random"] = "random"
    input_len: int = Field(1024, ge=1, le=_LEN)
    output_len: int = Field(256, ge=1, le=_LEN)
    range_ratio: float = Field(1.0, ge=0.0, le=1.0)


class ShareGPTWorkload(_Kind):
    """ShareGPT-format JSON: ``[{"conversations": [{"from": "human"|"gpt", "value": str}, ...]}]``."""

    kind: Literal["sharegpt"] = "sharegpt"
    path: Path
    turns: Literal["first", "all"] = "first"  # all: every human turn with its history, as multi-turn
    output_len: int | None = Field(None, ge=1, le=_LEN)  # bench_serving --sharegpt-output-len; None: the answer's
    context_len: int | None = Field(None, ge=2)  # bench_serving --sharegpt-context-len: skip longer pairs
    think_time_s: float = Field(0.0, ge=0.0, le=MAX_SEND_S)  # between turns when turns == "all"


class GeneratedSharedPrefixWorkload(_Kind):
    """Groups of prompts sharing a system prompt (bench_serving ``generated-shared-prefix``)."""

    kind: Literal["generated-shared-prefix"] = "generated-shared-prefix"
    num_groups: int = Field(64, ge=1, le=_COUNT)
    prompts_per_group: int = Field(16, ge=1, le=_COUNT)
    system_prompt_len: int = Field(2048, ge=1, le=_LEN)
    question_len: int = Field(128, ge=1, le=_LEN)
    output_len: int = Field(256, ge=1, le=_LEN)
    range_ratio: float = Field(1.0, ge=0.0, le=1.0)  # question and output lengths only
    ordered: bool = False  # bench_serving --gsp-ordered: group after group; by default shuffled, as there

    @model_validator(mode="after")
    def _bounded(self) -> GeneratedSharedPrefixWorkload:
        n = self.num_groups * self.prompts_per_group
        each = self.system_prompt_len + self.question_len  # every prompt is built whole (the prefix copied)
        problem = (_over(f"num_groups x prompts_per_group = {self.num_groups:,} x {self.prompts_per_group:,}",
                         n, _COUNT, "requests")
                   or _over(f"system_prompt_len + question_len = {self.system_prompt_len:,} + "
                            f"{self.question_len:,}", each, _LEN, "tokens", "a prompt may hold")
                   or _over(f"num_groups x prompts_per_group x (system_prompt_len + question_len) = {n:,} x {each:,}",
                            n * each, MAX_PROMPT_TOKENS, "prompt tokens"))
        if problem:
            raise ValueError(problem)
        return self


class MultiTurnWorkload(_Kind):
    """Conversations: each turn sends the whole history (system, every user turn and every reply so
    far) plus a new user message, after ``think_time_s`` from the previous reply."""

    kind: Literal["multi-turn"] = "multi-turn"
    num_conversations: int = Field(64, ge=1, le=_COUNT)
    turns: int = Field(4, ge=1, le=_COUNT)
    system_prompt_len: int = Field(0, ge=0, le=_LEN)  # shared by every conversation (0: none)
    user_len: int = Field(128, ge=1, le=_LEN)
    output_len: int = Field(128, ge=1, le=_LEN)
    range_ratio: float = Field(1.0, ge=0.0, le=1.0)
    think_time_s: float = Field(0.0, ge=0.0, le=MAX_SEND_S)

    @model_validator(mode="after")
    def _bounded(self) -> MultiTurnWorkload:
        n = self.num_conversations * self.turns
        turn = self.user_len + self.output_len
        last = self.system_prompt_len + self.turns * self.user_len + (self.turns - 1) * self.output_len
        # every conversation's history (its user turns, drawn up front, and the replies it keeps) at its end
        held = self.num_conversations * (self.system_prompt_len + self.turns * turn)
        problem = (_over(f"num_conversations x turns = {self.num_conversations:,} x {self.turns:,}",
                         n, _COUNT, "requests")
                   or _over(f"the last turn, system_prompt_len + turns x user_len + (turns - 1) x output_len = "
                            f"{self.system_prompt_len:,} + {self.turns:,} x {self.user_len:,} + "
                            f"{self.turns - 1:,} x {self.output_len:,}", last, _LEN, "tokens", "a prompt may hold")
                   or _over(f"num_conversations x (system_prompt_len + turns x (user_len + output_len)) = "
                            f"{self.num_conversations:,} x ({self.system_prompt_len:,} + {self.turns:,} x {turn:,})",
                            held, MAX_PROMPT_TOKENS, "tokens of history"))
        if problem:
            raise ValueError(problem)
        return self


class TraceWorkload(_Kind):
    """Replay of a request log at its timestamps: Mooncake JSONL (``timestamp`` ms,
    ``input_length``, ``output_length``, optional ``hash_ids`` of ``block_size``-token blocks)
    or the Azure LLM inference CSV (``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens``)."""

    kind: Literal["trace"] = "trace"
    path: Path
    format: Literal["mooncake", "azure"] | None = None  # None: from the file suffix (.jsonl / .csv)
    slowdown_factor: float = Field(1.0, gt=0)  # bench_serving --mooncake-slowdown-factor: 2 = half speed
    block_size: int = Field(512, ge=1, le=_LEN)  # tokens per Mooncake hash id
    max_requests: int | None = Field(None, ge=1, le=_COUNT)  # replay only the first N


class FileWorkload(_Kind):
    """JSONL of prompts: ``{"prompt": str}`` or ``{"input_ids": [int]}``, optional ``output_len``."""

    kind: Literal["file"] = "file"
    path: Path
    output_len: int = Field(256, ge=1, le=_LEN)  # for lines without their own


Workload = Annotated[
    RandomWorkload | ShareGPTWorkload | GeneratedSharedPrefixWorkload | MultiTurnWorkload | TraceWorkload
    | FileWorkload,
    Field(discriminator="kind"),
]

KINDS = ("random", "sharegpt", "generated-shared-prefix", "multi-turn", "trace", "file")


class _Holder(_Kind):
    """Validates one workload from plain data (``validate_workload``)."""

    workload: Workload


def validate_workload(data: object) -> RandomWorkload | ShareGPTWorkload | GeneratedSharedPrefixWorkload \
        | MultiTurnWorkload | TraceWorkload | FileWorkload:
    """Plain data (a dict with ``kind``) to its workload model; pydantic's ValidationError on bad data."""
    return _Holder.model_validate({"workload": data}).workload
