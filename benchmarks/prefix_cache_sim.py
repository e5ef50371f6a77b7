"""Prefix sharing on the simulated SGLang server: cache hit rate and TTFT, shared vs unshared.

Runs the issue's workload, ``generated-shared-prefix`` with 16 groups x 32 prompts and a
2,048-token system prompt (128-token questions, 64-token outputs, concurrency 64), and the
baseline with the same lengths and no sharing (``random``, 2,176 in / 64 out), each
``--repeats`` times on one simulated H200 (Qwen3-32B class: about 220k KV tokens, so the
16 system prompts and 64 running requests fit together; on one H100 the pool holds ~20k
tokens and LRU eviction of the prefixes halves the hit rate, which is the point of tuning
the memory split), the cache flushed before each load point. Prints medians with min-max spread of:

* the client's cache hit rate (from the server's ``meta_info.cached_tokens``) and the
  simulator's own count over the same requests (``/sim/stats``): they must agree;
* median TTFT shared vs unshared and their ratio (goal >= 3x), hit rate goal > 80 %;
* the first wave after the flush: how many of the first ``prefill batch`` requests missed.

Which figures are what: all latencies are *modelled* by the simulator's prefill/decode
cost model (``autotune.sim.perf.model``): this shows that the cache's effect follows from the
modelled prefill cost; it is not a measurement of real SGLang. The hit rate is exact
bookkeeping of the radix tree (no model constants). Nothing here is fitted to the goal.

    python benchmarks/prefix_cache_sim.py [--repeats 3] [--time-scale 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from autotune.load import LoadSpec, run_load
from autotune.load.workloads import validate_workload

REPO = Path(__file__).resolve().parents[1]

MODEL = REPO / "studies" / "models" / "qwen3-32b-class"
GSP = {"kind": "generated-shared-prefix", "num_groups": 16, "prompts_per_group": 32, "system_prompt_len": 2048,
       "question_len": 128, "output_len": 64}
FLAT = {"kind": "random", "input_len": 2048 + 128, "output_len": 64}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cache(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/sim/stats", timeout=10) as resp:
        return dict(json.loads(resp.read())["cache"])


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f} - {max(values):.3f}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--time-scale", type=float, default=4.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--ordered", action="store_true", help="group after group (default: shuffled, as bench_serving)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = Path(tempfile.mkdtemp(prefix="prefix-cache-")) / "sim.log"
    argv = [sys.executable, "-m", "autotune.sim", "--model-path", str(MODEL), "--sim-gpu", args.gpu,
            "--sim-time-scale", str(args.time_scale), "--port", str(port), "--enable-cache-report"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
    rows: list[dict[str, Any]] = []
    try:
        while "fired up" not in log_path.read_text(errors="replace"):
            if proc.poll() is not None:
                print(log_path.read_text()[-2000:])
                return 1
            time.sleep(0.1)
        for rep in range(args.repeats):
            common = {"concurrency": args.concurrency, "warmup_requests": 0, "flush_cache": True, "seed": rep}
            before = _cache(url)
            shared = run_load(url, LoadSpec(dataset=validate_workload({**GSP, "ordered": args.ordered}), **common))
            after = _cache(url)
            flat = run_load(url, LoadSpec(dataset=validate_workload(FLAT), num_prompts=512, **common))
            hits = after["cached_tokens"] - before["cached_tokens"]
            truth = hits / (after["prompt_tokens"] - before["prompt_tokens"])
            first = sorted(shared.records, key=lambda r: r["start_s"])[: args.concurrency]
            sm, fm = shared.metrics, flat.metrics
            rows.append({
                "hit_rate_client": sm["cache_hit_rate"], "hit_rate_server": truth,
                "median_ttft_shared_ms": sm["median_ttft_ms"], "median_ttft_unshared_ms": fm["median_ttft_ms"],
                "ttft_ratio": fm["median_ttft_ms"] / sm["median_ttft_ms"],
                "throughput_shared_tok_s": sm["output_throughput"],
                "throughput_unshared_tok_s": fm["output_throughput"],
                "first_wave_misses": sum(1 for r in first if r["cached_tokens"] == 0),
                "first_request_cached": first[0]["cached_tokens"],
                "time_scale_measured": sm["time_scale"],
            })
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    summary = {k: [r[k] for r in rows] for k in rows[0]}
    if args.json:
        print(json.dumps({"repeats": rows}))
        return 0
    print(f"generated-shared-prefix 16 x 32, system 2048, question 128, output 64, concurrency {args.concurrency}, "
          f"{'ordered' if args.ordered else 'shuffled'}, {args.gpu}; {args.repeats} repeats, median [min - max]")
    for k, v in summary.items():
        print(f"{k:<28} {_spread([float(x) for x in v])}")
    ok = (statistics.median(summary["hit_rate_client"]) > 0.8 and statistics.median(summary["ttft_ratio"]) >= 3
          and all(abs(a - b) < 1e-9
                  for a, b in zip(summary["hit_rate_client"], summary["hit_rate_server"], strict=True)))
    print(f"goals (hit rate > 80 %, TTFT >= 3x lower, client = server hit rate): {'met' if ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
