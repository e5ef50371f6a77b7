"""Benchmark: 8 TP-2 candidates on 8 declared GPUs, all at once vs one at a time, through RayExecutor.

Each candidate is a real trial body (``run_trial_body``) launching the simulated SGLang
server (``python -m autotune.sim``) with a small model (studies/models/qwen3-32b-class)
and running a short load point against it. ``--body sleep`` swaps in a body that only
holds its GPUs for ``--sleep-s`` seconds (the scheduling overhead alone).

Why ``--time-scale 0.5`` by default: on a 2-core box four simulated servers plus their
load generators compete for the CPUs, and at a high time scale each trial is CPU-bound
(measured: 2.3x at time scale 1 with other engineers' tests running), while on a GPU node
a trial mostly waits on the GPU. A low time scale keeps the simulated trials mostly
waiting too, so the figure measures the executor, not the host's core count.

Both runs use one local Ray instance (loopback, ``--num-gpus`` declared); the
sequential run is the same executor with ``max_parallel: 1``. ``--repeats N`` (default 3)
runs N pairs, alternating which of the two goes first, and prints each pair's ratio and
the median [min-max] of the times and of the ratios (wall-clock, measured). The goal: the
parallel run is at least 3x faster (median ratio); exit 1 below it.

    python benchmarks/ray_parallel.py                  # sim servers
    python benchmarks/ray_parallel.py --body sleep     # bare scheduling
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from autotune.objective import Objective
from autotune.sglang.knobs.config import ServerConfig
from autotune.spec import SimSpec, StudySpec, WorkloadSpec
from autotune.study.execution.ray.executor import RayExecutor
from autotune.trial.contract import TrialRequest, TrialResult, TrialState

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "studies" / "models" / "qwen3-32b-class"
GOAL = 3.0


def sleep_body(req: TrialRequest, report: Any) -> TrialResult:
    """Hold the trial's GPUs for ``env['BENCH_SLEEP_S']`` seconds; nothing else."""
    time.sleep(float(req.env["BENCH_SLEEP_S"]))
    return TrialResult(state=TrialState.COMPLETE, value=1.0, observed={"cvd": os.environ.get("CUDA_VISIBLE_DEVICES")})


def _spec(args: argparse.Namespace, max_parallel: int | None) -> StudySpec:
    return StudySpec.model_validate({
        "name": "ray-bench",
        "server": {"model_path": str(MODEL), "tp_size": args.tp},
        "hardware": {"gpu": args.gpu, "num_gpus": args.num_gpus},
        "executor": {"kind": "ray", "num_gpus": args.num_gpus, "max_parallel": max_parallel},
    })


def _requests(args: argparse.Namespace, run_dir: Path, tag: str) -> list[TrialRequest]:
    workload = WorkloadSpec(backend="sglang", input_len=256, output_len=64, range_ratio=1.0,
                            num_prompts=args.num_prompts, concurrency=[16], warmup_requests=2, flush_cache=True,
                            seed=0)
    out = []
    for n in range(args.trials):
        out.append(TrialRequest(
            study_name="ray-bench", trial_number=n,
            config=ServerConfig(model_path=str(MODEL), tp_size=args.tp),
            backend="sim", sglang_version="0.5.9", gpu=args.gpu, num_gpus=args.num_gpus, interconnect="nvlink",
            workload=workload, objective=Objective(),
            artifact_dir=str(run_dir / tag / f"trial-{n}"), run_dir=str(run_dir / tag), startup_timeout_s=120,
            sim=SimSpec(time_scale=args.time_scale, seed=0), env={"BENCH_SLEEP_S": str(args.sleep_s)},
        ))
    return out


def _drive(ex: RayExecutor, requests: list[TrialRequest]) -> tuple[float, dict[int, TrialResult]]:
    """The driver's pattern: submit while a slot is free, collect results; returns (wall s, results)."""
    pending = list(requests)
    results: dict[int, TrialResult] = {}
    t0 = time.monotonic()
    while pending or ex.in_flight():
        while pending and ex.slots_free(pending[0]) > 0:
            req = pending.pop(0)
            ex.submit(req.trial_number, req)
        for number, result in ex.wait(1.0):
            results[number] = result
    return time.monotonic() - t0, results


def _check(label: str, results: dict[int, TrialResult]) -> bool:
    bad = {n: f"{r.failure_kind}: {r.evidence[:160]}" for n, r in results.items() if r.state != "complete"}
    for n, why in sorted(bad.items()):
        print(f"  {label} trial {n} did not complete: {why}")
    return not bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--body", choices=["sim", "sleep"], default="sim")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--num-gpus", type=int, default=8)
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--time-scale", type=float, default=0.5, help="sim time scale (low: mostly waiting)")
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--sleep-s", type=float, default=5.0, help="hold time of --body sleep")
    parser.add_argument("--repeats", type=int, default=3, help="pairs of runs (order alternates)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    body = sleep_body if args.body == "sleep" else None
    os.environ.pop("RAY_ADDRESS", None)
    ok, times = True, {"parallel": [], "sequential": []}
    with tempfile.TemporaryDirectory(prefix="ray-bench-") as tmp:
        run_dir = Path(tmp)
        t0 = time.monotonic()
        owner = RayExecutor(_spec(args, None), body=body)  # starts the local instance
        print(f"ray.init: {time.monotonic() - t0:.1f} s")
        try:
            seq_ex = RayExecutor(_spec(args, 1), body=body)  # joins the same instance
            try:
                for rep in range(args.repeats):
                    order = [("parallel", owner), ("sequential", seq_ex)]
                    for label, ex in order if rep % 2 == 0 else order[::-1]:
                        wall, results = _drive(ex, _requests(args, run_dir, f"{label}-{rep}"))
                        ok = _check(label, results) and ok
                        times[label].append(wall)
                    print(f"pair {rep + 1}: one at a time {times['sequential'][-1]:.1f} s, parallel "
                          f"{times['parallel'][-1]:.1f} s, ratio {times['sequential'][-1] / times['parallel'][-1]:.2f}x",
                          flush=True)
            finally:
                seq_ex.shutdown(cancel=True)
        finally:
            owner.shutdown(cancel=True)
    ratios = [s / p for s, p in zip(times["sequential"], times["parallel"], strict=True)]
    print(f"body={args.body} trials={args.trials} tp={args.tp} gpus={args.num_gpus} time_scale={args.time_scale} "
          f"cpus={os.cpu_count()} pairs={args.repeats}")
    print(f"one at a time: {_spread(times['sequential'])} s")
    print(f"parallel:      {_spread(times['parallel'])} s")
    print(f"ratio:         {_spread(ratios, 2)}x (goal >= {GOAL:.0f}x, median)")
    return 0 if ok and statistics.median(ratios) >= GOAL else 1


def _spread(xs: list[float], digits: int = 1) -> str:
    return f"{statistics.median(xs):.{digits}f} [{min(xs):.{digits}f}-{max(xs):.{digits}f}]"


if __name__ == "__main__":
    sys.exit(main())
