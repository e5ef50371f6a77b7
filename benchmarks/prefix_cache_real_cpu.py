"""Prefix sharing against REAL SGLang on CPU: the server's cached_tokens and its own count.

Launches real SGLang (a CPU venv, e.g. the one ``autotune sglang-env install --version
0.5.23 --device cpu`` builds) on a tiny local Llama with dummy weights, runs a
``generated-shared-prefix`` workload through autotune's load generator with the model's
tokenizer (ids inside its vocabulary), and compares:

* autotune's ``cache_hit_rate`` (Σ ``meta_info.cached_tokens`` / Σ ``prompt_tokens``, or
  ``usage.prompt_tokens_details.cached_tokens`` for the OpenAI backend), with
* the server's own count: Σ ``#cached-token`` / Σ (``#cached-token`` + ``#new-token``)
  over the ``Prefill batch.`` lines SGLang logged during the load point.

Measured, nothing modelled. Goal: ``cached_tokens > 0`` and the two within 1 %.

    python benchmarks/prefix_cache_real_cpu.py --python ~/.cache/autotune/sglang/0.5.23-cpu/bin/python \\
        --model studies/models/tiny-llama-cpu [--backend sglang|openai] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from autotune.launch import ServerProcess
from autotune.load import LoadSpec, run_load
from autotune.load.workloads import validate_workload

REPO = Path(__file__).resolve().parents[1]

CPU_FLAGS = ["--device", "cpu", "--disable-overlap-schedule", "--sleep-on-idle", "--attention-backend",
             "torch_native", "--max-total-tokens", "8192", "--load-format", "dummy", "--enable-cache-report"]
_PREFILL = re.compile(r"Prefill batch.*?#new-token: (\d+), #cached-token: (\d+)")


def server_hit_rate(log_lines: list[str]) -> tuple[float, int, int]:
    """(hit rate, cached, new) from SGLang's ``Prefill batch.`` log lines."""
    cached = new = 0
    for line in log_lines:
        m = _PREFILL.search(line)
        if m:
            new += int(m.group(1))
            cached += int(m.group(2))
    return (cached / (cached + new) if cached + new else 0.0), cached, new


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="python of a venv with SGLang (CPU)")
    ap.add_argument("--model", type=Path, required=True, help="tiny model dir with config.json + tokenizer.json")
    ap.add_argument("--backend", default="sglang", choices=("sglang", "openai", "openai-chat"))
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--per-group", type=int, default=16)
    ap.add_argument("--system-len", type=int, default=256)
    ap.add_argument("--question-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    log_path = Path(tempfile.mkdtemp(prefix="sglang-cpu-")) / "server.log"
    argv = [args.python, "-m", "sglang.launch_server", "--model-path", str(args.model.resolve()), "--host",
            "127.0.0.1", "--port", str(port), *CPU_FLAGS]
    server = ServerProcess(argv, env={"SGLANG_USE_CPU_ENGINE": "1"}, log_path=log_path, port=port,
                           startup_timeout_s=300)
    gsp = {"kind": "generated-shared-prefix", "num_groups": args.groups, "prompts_per_group": args.per_group,
           "system_prompt_len": args.system_len, "question_len": args.question_len, "output_len": args.output_len}
    try:
        server.start()
        server.wait_ready()
        spec = LoadSpec(backend=args.backend, concurrency=args.concurrency, warmup_requests=0, flush_cache=True,
                        dataset=validate_workload(gsp), tokenizer=args.model)
        before = len(log_path.read_text(errors="replace").splitlines())
        result = run_load(server.url, spec)
        lines = log_path.read_text(errors="replace").splitlines()[before:]
    finally:
        server.stop()
    m = result.metrics
    rate, cached, new = server_hit_rate(lines)
    figures: dict[str, Any] = {
        "backend": args.backend,
        "completed": m["completed"],
        "failed": m["failed"],
        "total_input_tokens": m["total_input_tokens"],
        "total_cached_tokens_client": m["total_cached_tokens"],
        "cache_hit_rate_client": m["cache_hit_rate"],
        "server_prefill_cached_tokens": cached,
        "server_prefill_new_tokens": new,
        "cache_hit_rate_server": rate,
        "difference_pct_points": None if m["cache_hit_rate"] is None else 100 * (m["cache_hit_rate"] - rate),
        "requests_with_hits": m.get("cached_requests"),
        "median_ttft_cached_ms": m.get("median_ttft_cached_ms"),
        "median_ttft_uncached_ms": m.get("median_ttft_uncached_ms"),
    }
    if args.json:
        print(json.dumps(figures))
    else:
        for k, v in figures.items():
            print(f"{k:<32} {v:.4f}" if isinstance(v, float) else f"{k:<32} {v}")
        ok = (m["total_cached_tokens"] or 0) > 0 and figures["difference_pct_points"] is not None \
            and abs(figures["difference_pct_points"]) <= 1.0
        print(f"goal cached_tokens > 0 and client = server within 1 %: {'met' if ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
