"""Small sample files of every workload format, generated here (nothing is downloaded).

``python -m autotune.load.samples DIR [--requests N] [--seed S]`` writes::

    sharegpt.json       ShareGPT conversations (human/gpt turns)
    mooncake.jsonl      Mooncake trace: timestamp (ms), input_length, output_length, hash_ids
    azure.csv           Azure LLM inference trace: TIMESTAMP, ContextTokens, GeneratedTokens
    prompts.jsonl       prompt file: {"prompt": ..., "output_len": ...}

Tests and examples use them; users point workloads at their own files of the same shape.
The Mooncake sample shares hash-id prefixes between requests (as real agent traffic does),
so replaying it against a server with a prefix cache shows hits.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from autotune.load.tokens import WORDS


def _text(rng: np.random.Generator, n: int) -> str:
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), size=n).tolist())


def write_sharegpt(path: Path, n: int, rng: np.random.Generator) -> Path:
    convs = []
    for k in range(n):
        turns = []
        for _ in range(int(rng.integers(1, 4))):
            turns.append({"from": "human", "value": _text(rng, int(rng.integers(8, 64)))})
            turns.append({"from": "gpt", "value": _text(rng, int(rng.integers(8, 96)))})
        convs.append({"id": f"sample-{k}", "conversations": turns})
    path.write_text(json.dumps(convs, indent=1))
    return path


def trace_rows(n: int, rng: np.random.Generator, *, rate: float = 20.0, block: int = 512) -> list[dict[str, object]]:
    """Mooncake rows: Poisson arrivals at ``rate``/s; a quarter of the requests extend an earlier one's blocks."""
    rows: list[dict[str, object]] = []
    t = 0.0
    next_hash = 0
    for _ in range(n):
        n_in = int(rng.integers(64, 4 * block))
        blocks = -(-n_in // block)
        if rows and rng.random() < 0.25:  # a follow-up: the earlier request's blocks, then new ones
            base = list(rows[int(rng.integers(0, len(rows)))]["hash_ids"])  # type: ignore[call-overload]
            hashes = (base + list(range(next_hash, next_hash + blocks)))[:max(blocks, len(base) + 1)]
            n_in = max(n_in, (len(hashes) - 1) * block + 1)
        else:
            hashes = list(range(next_hash, next_hash + blocks))
        next_hash += blocks
        rows.append({"timestamp": int(t * 1000), "input_length": n_in,
                     "output_length": int(rng.integers(16, 256)), "hash_ids": hashes})
        t += float(rng.exponential(1.0 / rate))
    return rows


def write_mooncake(path: Path, n: int, rng: np.random.Generator) -> Path:
    with path.open("w") as fh:
        for row in trace_rows(n, rng):
            fh.write(json.dumps(row) + "\n")
    return path


def write_azure(path: Path, n: int, rng: np.random.Generator) -> Path:
    start = datetime(2023, 11, 16, 18, 15, 46)
    t = 0.0
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for _ in range(n):
            stamp = start + timedelta(seconds=t)
            w.writerow([stamp.strftime("%Y-%m-%d %H:%M:%S.%f") + "0", int(rng.integers(32, 2048)),
                        int(rng.integers(8, 256))])
            t += float(rng.exponential(1.0 / 10.0))
    return path


def write_prompts(path: Path, n: int, rng: np.random.Generator) -> Path:
    with path.open("w") as fh:
        for _ in range(n):
            fh.write(json.dumps({"prompt": _text(rng, int(rng.integers(16, 256))),
                                 "output_len": int(rng.integers(16, 128))}) + "\n")
    return path


def write_samples(directory: Path, *, requests: int = 200, seed: int = 0) -> dict[str, Path]:
    """Write one sample of every format into ``directory``; returns ``{format: path}``."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    return {
        "sharegpt": write_sharegpt(directory / "sharegpt.json", max(requests // 4, 1), rng),
        "mooncake": write_mooncake(directory / "mooncake.jsonl", requests, rng),
        "azure": write_azure(directory / "azure.csv", requests, rng),
        "file": write_prompts(directory / "prompts.jsonl", requests, rng),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autotune.load.samples", description=__doc__.splitlines()[0])
    ap.add_argument("directory", type=Path)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    for fmt, path in write_samples(args.directory, requests=args.requests, seed=args.seed).items():
        print(f"{fmt}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
