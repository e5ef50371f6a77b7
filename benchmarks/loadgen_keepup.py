"""Can the load generator keep up with a realistic engine, and does it report the truth?

Starts tests/loadgen_fake_server.py pacing one token per ``--delay-ms`` per stream
(10 ms: 100 tok/s per stream, 25,600 tok/s at concurrency 256), runs one load point
and prints, next to the server's own ground truth:

* delivered tok/s (server-side) as a share of what the pacing allows (goal >= 94 %),
* reported-vs-true error of output throughput and mean TPOT (goal within 1 %),
* median TTFT difference (goal within 1 ms), delivered concurrency (Little's law),
* the client's CPU per output token, event-loop lag p99 and client-bound flag.

Usage: python benchmarks/loadgen_keepup.py [--concurrency 256] [--delay-ms 10]
       [--output-len 256] [--num-prompts 1024] [--backend sglang|openai|openai-chat] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from loadgen_fake_server import running  # noqa: E402

from autotune.load import LoadSpec, run_load  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--delay-ms", type=float, default=10.0)
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--num-prompts", type=int, default=None, help="default: 4 x concurrency")
    ap.add_argument("--backend", default="sglang", choices=("sglang", "openai", "openai-chat"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    n = args.num_prompts or 4 * args.concurrency
    possible = args.concurrency * 1000.0 / args.delay_ms
    with running("--token-delay-ms", str(args.delay_ms), "--ttft-ms", str(args.ttft_ms), "--ticker") as server:
        spec = LoadSpec(backend=args.backend, concurrency=args.concurrency, num_prompts=n, input_len=args.input_len,
                        output_len=args.output_len, warmup_requests=0, flush_cache=True)
        result = run_load(server.url, spec)
        truth = server.stats()
    m = result.metrics
    # steady state possible rate over the run: streams also spend ttft_ms per request not emitting
    per_req_s = args.ttft_ms / 1000 + (args.output_len - 1) * args.delay_ms / 1000
    steady = possible * ((args.output_len - 1) * args.delay_ms / 1000) / per_req_s
    figures = {
        "concurrency": args.concurrency,
        "delay_ms": args.delay_ms,
        "load_average_1m": os.getloadavg()[0],
        "possible_tok_s_while_streaming": possible,
        "possible_tok_s_incl_ttft": steady,
        "delivered_tok_s_server": truth["output_throughput"],
        "delivered_share": truth["output_throughput"] / steady,
        "reported_tok_s": m["output_throughput"],
        "throughput_error_pct": 100 * (m["output_throughput"] / truth["output_throughput"] - 1),
        "tokens_reported": m["total_output_tokens"],
        "tokens_true": truth["total_output_tokens"],
        "mean_tpot_ms": m["mean_tpot_ms"],
        "true_mean_tpot_ms": truth["mean_tpot_ms"],
        "tpot_error_pct": 100 * (m["mean_tpot_ms"] / truth["mean_tpot_ms"] - 1),
        "median_ttft_ms": m["median_ttft_ms"],
        "true_median_ttft_ms": truth["median_ttft_ms"],
        "ttft_diff_ms": m["median_ttft_ms"] - truth["median_ttft_ms"],
        "p99_ttft_ms": m["p99_ttft_ms"],
        "p99_itl_ms": m["p99_itl_ms"],
        "delivered_concurrency_server": truth["in_flight_mean"],
        "reported_concurrency": m["concurrency"],
        "client_cpu_us_per_token": m["client_cpu_us_per_token"],
        "client_cpu_share_of_core": m["client_cpu_share"],
        "event_loop_lag_p99_ms": m["event_loop_lag_p99_ms"],
        "client_bound": m["client_bound"],
        "failed": m["failed"],
    }
    if args.json:
        print(json.dumps(figures))
    else:
        for k, v in figures.items():
            print(f"{k:<34} {v:.3f}" if isinstance(v, float) else f"{k:<34} {v}")
        ok_share = figures["delivered_share"] >= 0.94
        ok_err = abs(figures["throughput_error_pct"]) <= 1.0
        print(f"goal delivered >= 94 %: {'met' if ok_share else 'MISSED'}; "
              f"reported within 1 % of truth: {'met' if ok_err else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
