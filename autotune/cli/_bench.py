"""``autotune bench``: the load generator alone, against any SGLang or OpenAI-compatible URL.

Flags mirror SGLang's ``bench_serving`` (``--max-concurrency`` is ``--concurrency``,
``--random-input-len`` is ``--input-len``, ...). Prints bench_serving's result table, or
one JSON object with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.load import build_spec, run_load
from autotune.load.report import append_jsonl, format_table, summary_line, write_records

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
}


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or math.isnan(value):
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 1")
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
    p.add_argument("--api-key", default=None, help="sent as Authorization: Bearer KEY")
    p.add_argument("--model", default=None, help="served model name (default: from /v1/models)")
    p.add_argument("--flush-cache", action="store_true", help="POST /flush_cache before the timed run")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--output-file", type=Path, default=None, help="append the result as a JSONL line")
    p.add_argument("--output-details", type=Path, default=None, help="write per-request records as JSONL")
    p.add_argument("--tag", default=None, help="free text stored in the --output-file line")
    p.set_defaults(func=handler)


def spec_from_args(args: argparse.Namespace) -> Any:
    """Build the LoadSpec; a bad value becomes ConfigError naming the option."""
    num_prompts = args.num_prompts
    if num_prompts is None and args.duration is None:
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
    }
    if not str(args.url).startswith(("http://", "https://")):
        raise ConfigError(f"--url={args.url!r}: must start with http:// or https://")
    if args.dataset is not None and not args.dataset.is_file():
        raise ConfigError(f"--dataset={str(args.dataset)!r}: no such file")
    try:
        return build_spec(**fields)
    except ConfigError as exc:
        text = str(exc)
        for field, option in _OPTION_OF.items():
            if text.startswith(f"{field}="):
                raise ConfigError(option + text[len(field):]) from None
        raise


def handler(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    result = run_load(args.url, spec)
    if args.output_details is not None:
        write_records(args.output_details, result)
    line = summary_line(result, spec, tag=args.tag)
    if args.output_file is not None:
        append_jsonl(args.output_file, line)
    if args.json:
        print(json.dumps(line))
    else:
        print(format_table(result, spec))
    return 0
