"""Can the load generator keep up with a realistic engine, with every workload kind, and does it
report the truth?

Starts autotune/testing/loadgen_fake_server.py pacing one token per ``--delay-ms`` per stream on one
decode-step ticker (10 ms: 100 tok/s per stream, 25,600 tok/s at concurrency 256) and runs
one load point per workload kind (``--workload all``, or one kind), each against a fresh
server, printing next to the server's own ground truth:

* closed-loop kinds (random, generated-shared-prefix, sharegpt, file, multi-turn):
  ``keepup`` = the server's mean requests in flight / the concurrency asked for. An ideal
  client keeps every slot busy (1.0); the goal is within 2 % of it (>= 0.98). Also the
  delivered tok/s against what the pacing allows (incl. TTFT), and the reported-vs-true
  output throughput and TPOT errors (goal within 1 %).
* trace (a generated Mooncake trace of ``--trace-requests`` requests, Poisson arrivals at a
  rate that keeps ~concurrency streams busy, replayed open loop at its timestamps):
  ``keepup`` = the span an on-time client would take (last timestamp + one request's
  service time) / the span the server saw (first arrival to last completion); send lateness
  p50/p99/max as the client measured it
  and as the server saw it (arrival times relative to the first request, against the
  trace's offsets; goal p99 <= 5 ms); the trace's total tokens against the server's.
* the client's CPU per output token, event-loop lag p99 and its own client-bound flag.

All figures are measured (wall clock, this machine, shared with whatever else runs: the
1-minute load average is printed); nothing is modelled or fitted. The server (on uvloop)
is pinned to the first core and the client to the others (``--no-pin`` to share them), so
the server's own pacing work does not come out of the client's core.

Usage: python benchmarks/loadgen_keepup.py [--workload all|random|generated-shared-prefix|sharegpt|file|
       multi-turn|trace] [--concurrency 256] [--delay-ms 10] [--output-len 256] [--trace-requests 1000]
       [--repeats 1] [--no-pin] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from autotune.load import LoadSpec, run_load
from autotune.load.samples import trace_rows, write_sharegpt
from autotune.load.workloads import validate_workload
from autotune.testing.loadgen_fake_server import running

KINDS = ("random", "generated-shared-prefix", "sharegpt", "file", "multi-turn", "trace")


def _datasets(kind: str, args: argparse.Namespace, tmp: Path) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(workload, extra LoadSpec fields) for ``kind`` with ~n requests of output_len tokens each."""
    n, c, out = args.num_prompts or 4 * args.concurrency, args.concurrency, args.output_len
    rng = np.random.default_rng(0)
    if kind == "random":
        return None, {"num_prompts": n, "input_len": args.input_len, "output_len": out}
    if kind == "generated-shared-prefix":
        return {"kind": kind, "num_groups": n // 32, "prompts_per_group": 32, "system_prompt_len": args.input_len - 32,
                "question_len": 32, "output_len": out}, {}
    if kind == "sharegpt":
        path = write_sharegpt(tmp / "sharegpt.json", 200, rng)
        return {"kind": kind, "path": str(path), "output_len": out}, {"num_prompts": n}
    if kind == "file":
        path = tmp / "prompts.jsonl"
        path.write_text("".join(json.dumps({"prompt": " ".join(["word"] * args.input_len), "output_len": out}) + "\n"
                                for _ in range(n)))
        return {"kind": kind, "path": str(path)}, {}
    if kind == "multi-turn":
        return {"kind": kind, "num_conversations": c, "turns": max(n // c, 1), "user_len": args.input_len // 2,
                "output_len": out}, {}
    # trace: Poisson arrivals keeping ~c streams busy: rate = c / (ttft + (out - 1) x delay)
    service_s = args.ttft_ms / 1000 + (out - 1) * args.delay_ms / 1000
    rows = trace_rows(args.trace_requests, rng, rate=c / service_s)
    path = tmp / "trace.jsonl"
    path.write_text("".join(json.dumps({**r, "output_length": out}) + "\n" for r in rows))
    return {"kind": "trace", "path": str(path)}, {"concurrency": None}


def run_kind(kind: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    dataset, extra = _datasets(kind, args, tmp)
    fields: dict[str, Any] = {"backend": args.backend, "concurrency": args.concurrency, "warmup_requests": 0,
                              "flush_cache": True, "output_len": args.output_len, **extra}
    if dataset is not None:
        fields["dataset"] = validate_workload(dataset)
    with running("--token-delay-ms", str(args.delay_ms), "--ttft-ms", str(args.ttft_ms), "--ticker", "--uvloop") as server:
        if args.pin:
            os.sched_setaffinity(server.proc.pid, args.pin[0])
        result = run_load(server.url, LoadSpec(**fields))
        truth = server.stats()
    m = result.metrics
    fig: dict[str, Any] = {
        "workload": kind,
        "load_average_1m": os.getloadavg()[0],
        "completed": m["completed"],
        "failed": m["failed"],
        "tokens_reported": m["total_output_tokens"],
        "tokens_true": truth["total_output_tokens"],
        "input_tokens_reported": m["total_input_tokens"],
        "input_tokens_true": truth["total_input_tokens"],
        "reported_tok_s": m["output_throughput"],
        "true_tok_s": truth["output_throughput"],
        "throughput_error_pct": 100 * (m["output_throughput"] / truth["output_throughput"] - 1),
        "tpot_error_pct": 100 * (m["mean_tpot_ms"] / truth["mean_tpot_ms"] - 1),
        "ttft_diff_ms": m["median_ttft_ms"] - truth["median_ttft_ms"],
        "client_cpu_us_per_token": m["client_cpu_us_per_token"],
        "event_loop_lag_p99_ms": m["event_loop_lag_p99_ms"],
        "client_bound": m["client_bound"],
    }
    if kind == "trace":
        rows = [json.loads(line) for line in Path(dataset["path"]).read_text().splitlines()]  # type: ignore[index]
        offsets = np.asarray([(r["timestamp"] - rows[0]["timestamp"]) / 1000 for r in rows])
        arrivals = np.sort(np.asarray(truth["arrivals"]))
        server_late = (arrivals - arrivals[0] - offsets) * 1000
        service_s = args.ttft_ms / 1000 + (args.output_len - 1) * args.delay_ms / 1000
        ideal_span = offsets[-1] + service_s  # an on-time client: last send + its service time
        fig.update({
            "requests_in_trace": len(rows),
            "trace_input_tokens": sum(r["input_length"] for r in rows),
            "send_lag_p50_ms": m["send_lag_p50_ms"],
            "send_lag_p99_ms": m["send_lag_p99_ms"],
            "send_lag_max_ms": m["send_lag_max_ms"],
            "server_seen_lateness_p99_ms": float(np.percentile(server_late, 99)),
            "server_seen_lateness_max_ms": float(server_late.max()),
            "ideal_span_s": float(ideal_span),
            "true_span_s": truth["duration"],
            "keepup": float(ideal_span) / truth["duration"] if truth.get("duration") else 0.0,
        })
    else:
        fig["keepup"] = truth["in_flight_mean"] / args.concurrency
        per_req_s = args.ttft_ms / 1000 + (args.output_len - 1) * args.delay_ms / 1000
        steady = args.concurrency * 1000.0 / args.delay_ms * ((args.output_len - 1) * args.delay_ms / 1000) / per_req_s
        fig["delivered_share_of_pacing"] = truth["output_throughput"] / steady
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="all", choices=("all", *KINDS))
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--delay-ms", type=float, default=10.0)
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--num-prompts", type=int, default=None, help="default: 4 x concurrency")
    ap.add_argument("--trace-requests", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--backend", default="sglang", choices=("sglang", "openai", "openai-chat"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the server and the client to separate cores")
    args = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    args.pin = None if args.no_pin or len(cores) < 2 else ({cores[0]}, set(cores[1:]))
    if args.pin:  # the server on the first core, this client on the others: neither slows the other
        os.sched_setaffinity(0, args.pin[1])
    kinds = KINDS if args.workload == "all" else (args.workload,)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            runs = [run_kind(kind, args, Path(tmp)) for _ in range(args.repeats)]
            results.append({"workload": kind, "runs": runs})
    if args.json:
        print(json.dumps(results))
        return 0
    where = f"server pinned to core {sorted(args.pin[0])}, client to {sorted(args.pin[1])}" if args.pin else "not pinned"
    for res in results:
        runs = res["runs"]
        print(f"--- {res['workload']} (c={args.concurrency}, {args.delay_ms:g} ms/token, {len(runs)} run(s): "
              f"median [min - max]; {where})")
        for key in runs[0]:
            vals = [r[key] for r in runs]
            if isinstance(vals[0], bool) or not isinstance(vals[0], (int, float)):
                print(f"  {key:<30} {vals if len(vals) > 1 else vals[0]}")
            elif len(vals) == 1:
                print(f"  {key:<30} {vals[0]:.3f}" if isinstance(vals[0], float) else f"  {key:<30} {vals[0]}")
            else:
                print(f"  {key:<30} {statistics.median(vals):.3f} [{min(vals):.3f} - {max(vals):.3f}]")
        keep = statistics.median(r["keepup"] for r in runs)
        line = f"  goal keepup >= 0.98: {'met' if keep >= 0.98 else 'MISSED'}"
        if res["workload"] == "trace":
            lag = statistics.median(r["send_lag_p99_ms"] for r in runs)
            line += f"; send lag p99 <= 5 ms: {'met' if lag <= 5 else 'MISSED'}"
            tok = all(r["input_tokens_reported"] == r["trace_input_tokens"] for r in runs)
            line += f"; input tokens = trace's: {'yes' if tok else 'NO'}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
