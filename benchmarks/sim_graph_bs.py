"""The seed case on the simulated engine: output throughput per --cuda-graph-max-bs.

Runs :class:`autotune.sim.engine.core.Engine` in-process, in modelled time, on the
demo workload (fixed 512 input / 256 output tokens, concurrency 256, 512
prompts) for kimi-k2-class at TP 8 on 8 x RTX PRO 6000 over PCIe (SGLang 0.5.9
defaults otherwise: chunked prefill 8192, KV of the seed case's working
baseline, 159,277 tokens), once per ``cuda_graph_max_bs`` in {64, 128, 256,
512}, and prints the modelled output throughput of each and the 128 vs 512
gain (the real node showed +9 %), and where each constant of the speed,
memory and weight-load models comes from (measured, derived, fitted,
modelled). It then measures the engine's own token-emission capacity on
this machine (chunks delivered per wall second at concurrency 256).

Usage::

    python benchmarks/sim_graph_bs.py [--kv-tokens N] [--num-prompts N] [--interconnect nvlink --gpu h200]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from autotune.sglang.hardware.gpus import get_gpu
from autotune.sglang.memory.slack import PROVENANCE as MEMORY_PROVENANCE
from autotune.sglang.models.profile import load_model_profile
from autotune.sim.engine.core import Engine
from autotune.sim.perf.comm import PROVENANCE
from autotune.sim.perf.model import PerfInputs, PerfModel
from autotune.sim.weight_load import PROVENANCE as LOAD_PROVENANCE

ROOT = Path(__file__).resolve().parents[1]
HUGE_SCALE = 1e7  # modelled seconds per wall second: the host's speed does not matter


async def drive(perf: PerfModel, args: argparse.Namespace, *, time_scale: float) -> dict[str, Any]:
    """Closed-loop client: ``concurrency`` streams, ``num_prompts`` requests, like bench_serving."""
    engine = Engine(perf, kv_tokens=args.kv_tokens, max_running_requests=args.max_running_requests,
                    chunked_prefill_size=args.chunked_prefill_size, time_scale=time_scale, seed=0)
    await engine.start()
    sem = asyncio.Semaphore(args.concurrency)
    chunks = 0

    async def one(i: int) -> None:
        nonlocal chunks
        async with sem:
            async for _ in engine.generate(f"req-{i}", args.input_len, args.output_len):
                chunks += 1

    wall0, cpu0 = time.perf_counter(), time.process_time()
    try:
        await asyncio.gather(*(one(i) for i in range(args.num_prompts)))
    finally:
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        await engine.stop()
    stats = engine.stats()
    reqs = stats["requests"]
    span = max(r["finish_s"] for r in reqs) - min(r["arrival_s"] for r in reqs)
    return {
        "output_tok_s": stats["tokens_emitted"] / span,
        "modelled_s": span,
        "retractions": stats["retractions"],
        "steps": stats["steps"],
        "wall_s": wall,
        "cpu_s": cpu,
        "chunks": chunks,
        "tokens": stats["tokens_emitted"],
    }


def perf_for(args: argparse.Namespace, max_bs: int) -> PerfModel:
    return PerfModel(PerfInputs(
        model=load_model_profile(args.model), gpu=get_gpu(args.gpu), tp_size=args.tp_size,
        interconnect=args.interconnect, cuda_graph_max_bs=max_bs, chunked_prefill_size=args.chunked_prefill_size,
    ))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(ROOT / "studies" / "models" / "kimi-k2-class"))
    p.add_argument("--gpu", default="rtx-pro-6000")
    p.add_argument("--tp-size", type=int, default=8)
    p.add_argument("--interconnect", default="pcie", choices=["pcie", "nvlink"])
    p.add_argument("--kv-tokens", type=int, default=159_277)
    p.add_argument("--max-running-requests", type=int, default=2048)
    p.add_argument("--chunked-prefill-size", type=int, default=8192)
    p.add_argument("--input-len", type=int, default=512)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--num-prompts", type=int, default=512)
    p.add_argument("--graph-bs", type=int, nargs="+", default=[64, 128, 256, 512])
    args = p.parse_args(argv)

    print(f"model {Path(args.model).name}  {args.gpu} x TP{args.tp_size} over {args.interconnect}  "
          f"KV {args.kv_tokens} tokens  workload {args.input_len}/{args.output_len} tokens, "
          f"concurrency {args.concurrency}, {args.num_prompts} prompts")
    results: dict[int, dict[str, Any]] = {}
    for bs in args.graph_bs:
        r = asyncio.run(drive(perf_for(args, bs), args, time_scale=HUGE_SCALE))
        results[bs] = r
        print(f"  cuda_graph_max_bs {bs:4d}: output {r['output_tok_s']:8.1f} tok/s (modelled)  "
              f"span {r['modelled_s']:7.1f} s  steps {r['steps']}  retractions {r['retractions']}  "
              f"wall {r['wall_s']:.2f} s")
    if 128 in results and 512 in results:
        gain = results[128]["output_tok_s"] / results[512]["output_tok_s"] - 1
        print(f"  128 vs 512: {gain * 100:+.1f} % output throughput (real node: +9 %; the fitted constants "
              "below were chosen to reproduce it, so this is not a validation)")
    print("allreduce constants (autotune/sim/perf/comm.py):")
    for name, (kind, source) in PROVENANCE.items():
        print(f"  {kind:9s} {name}: {source}")
    print("memory constants (autotune/sglang/memory/slack.py, shared by the simulator and the predictor):")
    for name, (kind, source) in MEMORY_PROVENANCE.items():
        print(f"  {kind:9s} {name}: {source}")
    print("weight-load constants (autotune/sim/weight_load.py):")
    for name, (kind, source) in LOAD_PROVENANCE.items():
        print(f"  {kind:9s} {name}: {source}")

    # the engine's own capacity: chunks (= tokens, stream_interval 1) per second of this process,
    # consumers included; CPU seconds too, since the host may be shared with other work
    tokens = sum(r["tokens"] for r in results.values())
    chunks = sum(r["chunks"] for r in results.values())
    wall = sum(r["wall_s"] for r in results.values())
    cpu = sum(r["cpu_s"] for r in results.values())
    print(f"engine emission capacity on this host at concurrency {args.concurrency}, one core: "
          f"{tokens / wall:,.0f} tokens/s of wall time, {tokens / cpu:,.0f} tokens/s of CPU time "
          f"({chunks / cpu:,.0f} chunks/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
