"""``autotune bench``: the load generator alone, against any SGLang or OpenAI-compatible URL.

Flags mirror SGLang's ``bench_serving`` (``--max-concurrency`` is ``--concurrency``,
``--random-input-len`` is ``--input-len``, ...). Prints bench_serving's result table, or
one JSON object with ``--json``.

Workloads (``--dataset-name``, bench_serving's names where it has them): ``random``
(default), ``sharegpt``, ``generated-shared-prefix`` (``--gsp-*``), ``multi-turn``
(``--mt-*``), ``mooncake`` / ``trace`` (``--dataset-path`` to a Mooncake JSONL or Azure CSV
trace, replayed at its timestamps x ``--mooncake-slowdown-factor``), ``file``. Sample
files of every format: ``python -m autotune.load.samples DIR``.

A request's time limits are a study's ``workload.timeouts``, named after its fields
(``--first-token-timeout`` is ``first_token_s``, ...), with its defaults and bounds: without
them a stalled server held every request for the 600 s default, and a study's shorter limits
could not be reproduced outside it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from autotune.errors import ConfigError
from autotune.files import check_writable, regular_file
from autotune.limits import DATASET_BYTES, clip, shown
from autotune.load import build_spec, run_load
from autotune.load.report import append_jsonl, format_table, summary_line, write_records
from autotune.load.spec import GOODPUT_KEYS, LoadTimeouts, shown_url, url_problem
from autotune.load.tokens import tokenizer_file
from autotune.load.workloads import validate_workload

# workload field -> the option that sets it, per --dataset-name
_WORKLOAD_OPTION = {
    "num_groups": "--gsp-num-groups", "prompts_per_group": "--gsp-prompts-per-group",
    "system_prompt_len": "--gsp-system-prompt-len", "question_len": "--gsp-question-len",
    "num_conversations": "--mt-num-conversations", "turns": "--mt-turns", "user_len": "--mt-user-len",
    "think_time_s": "--mt-think-time", "slowdown_factor": "--mooncake-slowdown-factor",
    "path": "--dataset-path", "context_len": "--sharegpt-context-len", "block_size": "--trace-block-size",
    "input_len": "--input-len", "range_ratio": "--range-ratio",
}
_DATASET_NAMES = ("random", "random-ids", "sharegpt", "generated-shared-prefix", "multi-turn", "mooncake", "trace",
                  "file", "custom")

# LoadSpec field -> the option that sets it, so errors name what the user typed.
_OPTION_OF = {
    "base_url": "--url",
    "backend": "--backend",
    "concurrency": "--concurrency",
    "num_prompts": "--num-prompts",
    "input_len": "--input-len",
    "output_len": "--output-len",
    "request_rate": "--request-rate",
    "duration_s": "--duration",
    "warmup_requests": "--warmup-requests",
    "range_ratio": "--range-ratio",
    "seed": "--seed",
    "dataset_path": "--dataset",
    "api_key": "--api-key",
    "model": "--model",
    "goodput_slo": "--goodput",
    "tokenizer": "--tokenizer",
}

# A request's time limits: the study's ``workload.timeouts`` field -> its option and what it bounds. Each takes
# the study's default and bounds (LoadTimeouts validates both), and ``none`` as the study's null: no limit.
_TIMEOUTS = {
    "connect_s": ("--connect-timeout", "seconds to connect to the server"),
    "first_token_s": ("--first-token-timeout", "seconds from sending a request to its first token (queueing and "
                      "prefill included)"),
    "between_tokens_s": ("--between-tokens-timeout", "seconds between two reads that carry tokens"),
    "total_s": ("--total-timeout", "seconds a request may take in all"),
}
_OPTION_OF.update({f"timeouts.{field}": option for field, (option, _) in _TIMEOUTS.items()})


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{shown(text)} must be at least 1")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{shown(text)} must be 0 or more")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a number") from None
    if not value > 0 or math.isnan(value):
        raise argparse.ArgumentTypeError(f"{shown(text)} must be greater than 0")
    return value


def _seconds_or_none(text: str) -> str | None:
    """A timeout as typed (``none``: no limit); LoadTimeouts parses and bounds it, as it does the study's."""
    return None if text.strip().lower() == "none" else text


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{shown(text)} must be between 0 and 1")
    return value


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bench",
        help="run the load generator alone against a server (like SGLang's bench_serving)",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--backend", choices=("sglang", "openai", "openai-chat"), default="sglang",
                   help="sglang: /generate; openai: /v1/completions; openai-chat: /v1/chat/completions")
    p.add_argument("--concurrency", type=_positive_int, default=None, help="closed-loop cap on requests in flight")
    p.add_argument("--num-prompts", type=_positive_int, default=None, help="requests to send (default 1000)")
    p.add_argument("--input-len", type=_positive_int, default=1024, help="prompt tokens (synthetic)")
    p.add_argument("--output-len", type=_positive_int, default=1024, help="tokens to generate")
    p.add_argument("--request-rate", type=_positive_float, default=math.inf,
                   help="Poisson arrivals per second (default inf: all at once)")
    p.add_argument("--duration", type=_positive_float, default=None, help="stop sending after this many seconds")
    p.add_argument("--warmup-requests", type=_non_negative_int, default=1, help="requests excluded from metrics")
    p.add_argument("--range-ratio", type=_ratio, default=1.0,
                   help="lengths uniform in [len*ratio, len] (default 1.0: fixed lengths)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dataset", type=Path, default=None,
                   help='JSONL of {"prompt": str | "input_ids": [...], "output_len": int}')
    w = p.add_argument_group("workload (bench_serving's --dataset-name and its options)")
    w.add_argument("--dataset-name", choices=_DATASET_NAMES, default="random",
                   help="random: synthetic prompts of --input-len/--output-len; others below")
    w.add_argument("--dataset-path", type=Path, default=None,
                   help="sharegpt JSON, Mooncake JSONL / Azure CSV trace, or prompt JSONL (file)")
    w.add_argument("--gsp-num-groups", type=_positive_int, default=64)
    w.add_argument("--gsp-prompts-per-group", type=_positive_int, default=16)
    w.add_argument("--gsp-system-prompt-len", type=_positive_int, default=2048)
    w.add_argument("--gsp-question-len", type=_positive_int, default=128)
    w.add_argument("--gsp-output-len", type=_positive_int, default=256)
    w.add_argument("--gsp-ordered", action="store_true",
                   help="send group after group (default: shuffled, as bench_serving)")
    w.add_argument("--sharegpt-output-len", type=_positive_int, default=None,
                   help="output tokens per request (default: the answer's length)")
    w.add_argument("--sharegpt-context-len", type=_positive_int, default=None, help="skip longer pairs")
    w.add_argument("--sharegpt-turns", choices=("first", "all"), default="first",
                   help="all: every turn with its history (a conversation)")
    w.add_argument("--mt-num-conversations", type=_positive_int, default=64)
    w.add_argument("--mt-turns", type=_positive_int, default=4)
    w.add_argument("--mt-system-prompt-len", type=_non_negative_int, default=0)
    w.add_argument("--mt-user-len", type=_positive_int, default=128)
    w.add_argument("--mt-output-len", type=_positive_int, default=128)
    w.add_argument("--mt-think-time", type=float, default=0.0, help="seconds between a reply and the next turn")
    w.add_argument("--trace-format", choices=("mooncake", "azure"), default=None,
                   help="default: from the file suffix (.csv: azure)")
    w.add_argument("--mooncake-slowdown-factor", type=_positive_float, default=1.0,
                   help="multiply the trace's timestamps (2: half speed)")
    w.add_argument("--trace-block-size", type=_positive_int, default=512, help="tokens per Mooncake hash id")
    w.add_argument("--tokenizer", type=Path, default=None,
                   help="model directory or tokenizer.json: exact prompt lengths for text prompts")
    w.add_argument("--goodput", nargs="+", default=None, metavar="KEY:MS",
                   help="per-request SLO for goodput, e.g. ttft_ms:500 tpot_ms:50 (vLLM's ttft/tpot/e2el too)")
    t = p.add_argument_group("request time limits (a study's workload.timeouts): a request past one fails")
    for field, (option, what) in _TIMEOUTS.items():
        default = LoadTimeouts.model_fields[field].default
        t.add_argument(option, dest=field, type=_seconds_or_none, default=default, metavar="SECONDS",
                       help=f"{what} (default {'none' if default is None else f'{default:g}'}; none: no limit)")
    p.add_argument("--api-key", default=None, help="sent as Authorization: Bearer KEY")
    p.add_argument("--model", default=None, help="served model name (default: from /v1/models)")
    p.add_argument("--flush-cache", action="store_true", help="POST /flush_cache before the timed run")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--output-file", type=Path, default=None,
                   help="append the result as a JSONL line (its directory is checked before the run)")
    p.add_argument("--output-details", type=Path, default=None, help="write per-request records as JSONL (likewise)")
    p.add_argument("--tag", default=None, help="free text stored in the --output-file line")
    p.set_defaults(func=handler)


def spec_from_args(args: argparse.Namespace) -> Any:
    """Build the LoadSpec; a bad value becomes ConfigError naming the option."""
    num_prompts = args.num_prompts
    if num_prompts is None and args.duration is None and args.dataset_name in ("random", "random-ids"):
        num_prompts = 1000
    fields = {
        "backend": args.backend,
        "base_url": args.url,
        "api_key": args.api_key,
        "model": args.model,
        "concurrency": args.concurrency,
        "request_rate": args.request_rate,
        "num_prompts": num_prompts,
        "duration_s": args.duration,
        "warmup_requests": args.warmup_requests,
        "flush_cache": args.flush_cache,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "range_ratio": args.range_ratio,
        "seed": args.seed,
        "dataset_path": args.dataset,
        "dataset": workload_from_args(args),
        "tokenizer": args.tokenizer,
        "goodput_slo": _goodput(args.goodput),
        "timeouts": {field: getattr(args, field) for field in _TIMEOUTS},
    }
    problem = url_problem(str(args.url))
    if problem:  # a malformed URL is bad input (2), a server that does not answer is not (1)
        raise ConfigError(f"--url={shown_url(args.url)}: {problem}")
    if args.dataset is not None:
        _input_file(args.dataset, "--dataset", DATASET_BYTES)
    if args.tokenizer is not None:
        tokenizer_file(args.tokenizer, "--tokenizer")
    for option, path in (("--output-file", args.output_file), ("--output-details", args.output_details)):
        if path is not None:
            check_writable(path, option)  # before the benchmark, not after it
    try:
        return build_spec(**fields)
    except ConfigError as exc:
        text = str(exc).removeprefix("load spec: ")  # a rule across fields names the one it reports
        for field, option in _OPTION_OF.items():
            if text.startswith(f"{field}="):
                raise ConfigError(option + text[len(field):]) from None
        raise


def workload_from_args(args: argparse.Namespace) -> Any:
    """The workload model of ``--dataset-name`` (None: random prompts); ConfigError naming the option."""
    name = args.dataset_name
    path = args.dataset_path
    if name in ("random", "random-ids"):
        return None
    if name in ("sharegpt", "mooncake", "trace", "file", "custom"):
        if path is None:
            raise ConfigError(f"--dataset-path=None: --dataset-name {name} needs a file")
        _input_file(path, "--dataset-path", DATASET_BYTES)
    data: dict[str, Any]
    if name == "sharegpt":
        data = {"kind": "sharegpt", "path": path, "turns": args.sharegpt_turns, "output_len": args.sharegpt_output_len,
                "context_len": args.sharegpt_context_len}
    elif name == "generated-shared-prefix":
        data = {"kind": name, "num_groups": args.gsp_num_groups, "prompts_per_group": args.gsp_prompts_per_group,
                "system_prompt_len": args.gsp_system_prompt_len, "question_len": args.gsp_question_len,
                "output_len": args.gsp_output_len, "ordered": args.gsp_ordered}
    elif name == "multi-turn":
        data = {"kind": name, "num_conversations": args.mt_num_conversations, "turns": args.mt_turns,
                "system_prompt_len": args.mt_system_prompt_len, "user_len": args.mt_user_len,
                "output_len": args.mt_output_len, "think_time_s": args.mt_think_time}
    elif name in ("mooncake", "trace"):
        fmt = args.trace_format or ("mooncake" if name == "mooncake" else None)
        data = {"kind": "trace", "path": path, "format": fmt,
                "slowdown_factor": args.mooncake_slowdown_factor, "block_size": args.trace_block_size}
    else:
        data = {"kind": "file", "path": path, "output_len": args.output_len}
    try:
        return validate_workload(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][-1]) if err.get("loc") else "dataset"
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if field == data["kind"]:  # a rule across the kind's fields (what it builds): they are named in it
            text = re.sub(r"\b[a-z]+(?:_[a-z]+)*\b", lambda m: _option(name, m.group()) if m.group() in data
                          and m.group() != "kind" else m.group(), msg)
            raise ConfigError(f"--dataset-name {name}: {clip(text, 300)}") from None
        raise ConfigError(f"{_option(name, field)}={shown(err.get('input'))}: {clip(msg, 200)}") from None


def _option(name: str, field: str) -> str:
    """The option of ``--dataset-name name`` that sets workload field ``field``."""
    prefix = {"generated-shared-prefix": "--gsp-", "multi-turn": "--mt-"}.get(name)
    if prefix is not None and field != "path":
        return prefix + field.removesuffix("_s").replace("_", "-")
    return _WORKLOAD_OPTION.get(field, f"--{field.replace('_', '-')}")


def _input_file(path: Path, option: str, limit: int) -> None:
    """A file the benchmark will read: there, a regular file (not /dev/zero, not a FIFO), within ``limit``."""
    if not os.path.lexists(path):
        raise ConfigError(f"{option}={shown(str(path), 200)}: no such file")
    regular_file(path, option, limit)


def _goodput(items: list[str] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items or []:
        key, sep, value = item.partition(":")
        try:
            out[key] = float(value) if sep else float("nan")
        except ValueError:
            out[key] = float("nan")
        if not out[key] > 0:
            raise ConfigError(f"--goodput={shown(item)}: expected KEY:MILLISECONDS with a positive number")
        if key not in GOODPUT_KEYS:
            raise ConfigError(f"--goodput={shown(item)}: unknown key {shown(key)}; known: ttft_ms, tpot_ms, e2e_latency_ms "
                              "(or vLLM's ttft, tpot, e2el)")
    return out


def handler(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)  # every option, the output paths included, checked before the run
    result = run_load(args.url, spec)
    line = summary_line(result, spec, tag=args.tag)
    if args.json:  # the figures first: a file that cannot be written after all does not lose them
        print(json.dumps(line))
    else:
        print(format_table(result, spec))
    sys.stdout.flush()
    if args.output_details is not None:
        write_records(args.output_details, result)
    if args.output_file is not None:
        append_jsonl(args.output_file, line)
    return 0
