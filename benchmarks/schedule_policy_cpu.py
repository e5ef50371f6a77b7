"""SGLang's own schedule-policy code timed on this CPU: the admission round's prefix matching that the simulated
server charges for ``--schedule-policy lpm`` and ``dfs-weight`` (``autotune/sim/perf/knobs.py``).

Every admission round that may add a request (``get_new_batch_prefill`` past its ``batch_is_full`` check) calls
``SchedulePolicy.calc_priority`` on the whole waiting queue. For ``lpm`` (up to 128 waiting requests) and
``dfs-weight`` (always) that matches each request's prompt and output against the radix tree, and by 0.5.9
also inserts it into an in-batch tree (``_compute_prefix_matches``, ``schedule_policy.py`` at v0.5.9); ``fcfs``
does nothing. This script builds SGLang's own ``RadixCache`` (60 cached sequences of 2,200 tokens, a warm pool),
a waiting queue of SGLang ``Req`` objects with random prompts (no shared prefix), and times ``calc_priority``
over a grid of queue depths and prompt lengths: the median of ``--reps`` calls, wall clock, the spread as
[min, max]. It fits ``seconds = a x requests + b x tokens`` to the ``dfs-weight`` points (least squares, no
intercept) and prints the fit beside the simulator's constants (``POLICY_MATCH_PER_REQ_S``,
``POLICY_MATCH_PER_TOKEN_S``) and the model's figure for each point.

Usage (SGLang need not serve anything: only its scheduler's Python runs)::

    ~/.cache/autotune/sglang/0.5.9-cpu/bin/python benchmarks/schedule_policy_cpu.py [--quick] [--json PATH]

The slow tier's SGLang 0.5.9 CPU venv (``autotune.testing.real_sglang``) has what it needs. Run it from the
repository root (or with ``PYTHONPATH`` set to it) to print the model's figures too. SGLang 0.3.x's scheduler
imports vLLM and outlines at module level, though nothing on this path uses them; ``--stub`` replaces the named
modules with empty ones before SGLang is imported, e.g. for the 0.3.5.post2 wheel unpacked into ``DIR``::

    PYTHONPATH=DIR:. ~/.cache/autotune/sglang/0.5.9-cpu/bin/python benchmarks/schedule_policy_cpu.py \\
        --stub outlines,vllm,sglang.srt.configs,sglang.srt.constrained,sglang.srt.model_executor,\\
sglang.srt.server_args,sglang.srt.utils,sglang.srt.sampling.sampling_batch_info,sglang.srt.mem_cache.memory_pool,\\
sglang.srt.mem_cache.chunk_cache

Every figure is **measured** on the machine that runs it; a server CPU's single thread may be faster than this
repository's 2-core CI machine, where the simulator's constants were measured.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

POLICIES = ("fcfs", "lpm", "dfs-weight")
LENGTHS = (100, 500, 2000, 8000)
DEPTHS = (32, 128, 512, 2000)
MAX_QUEUE_TOKENS = 4_000_000  # a queue of 2,000 requests of 2,000 tokens
CACHED_SEQUENCES, CACHED_LEN = 60, 2200
VOCAB = 128_000


def _error(message: str) -> int:
    print(f"schedule_policy_cpu: {message}", file=sys.stderr)
    return 2


class _Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Empty modules for the named ones and everything under them (``--stub``)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if any(name == n or name.startswith(n + ".") for n in self.names):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        module = mock.MagicMock(name=spec.name)  # any attribute: a class, a function, a constant
        module.__path__, module.__spec__ = [], spec
        return module

    def exec_module(self, module: Any) -> None:
        return None


class Harness:
    """SGLang's RadixCache, SchedulePolicy and Req, across the API change between 0.3.x and 0.5.x."""

    def __init__(self, rng: random.Random) -> None:
        import torch
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.managers.schedule_policy import SchedulePolicy
        from sglang.srt.mem_cache.radix_cache import RadixCache
        from sglang.srt.sampling.sampling_params import SamplingParams

        self.torch, self.Req, self.SchedulePolicy, self.SamplingParams = torch, Req, SchedulePolicy, SamplingParams
        self.rng = rng
        self.new_api = hasattr(RadixCache, "create_simulated")
        self.tree = RadixCache.create_simulated() if self.new_api else RadixCache(None, None, disable=False)
        for _ in range(CACHED_SEQUENCES):
            self._insert(self._ids(CACHED_LEN))

    def _ids(self, n: int) -> list[int]:
        return [self.rng.randrange(VOCAB) for _ in range(n)]

    def _insert(self, ids: list[int]) -> None:
        value = self.torch.arange(len(ids), dtype=self.torch.int64)
        if self.new_api:
            from sglang.srt.mem_cache.base_prefix_cache import InsertParams
            from sglang.srt.mem_cache.radix_cache import RadixKey

            self.tree.insert(InsertParams(key=RadixKey(token_ids=ids), value=value))
        else:
            self.tree.insert(ids, value)

    def policy(self, name: str) -> Any:
        if self.new_api:
            return self.SchedulePolicy(name, self.tree, False, False, False)
        return self.SchedulePolicy(name, self.tree)

    def queue(self, n: int, length: int) -> list[Any]:
        return [self.Req(f"r{i}", "", self._ids(length), self.SamplingParams(max_new_tokens=200)) for i in range(n)]


def measure(h: Harness, policies: tuple[str, ...], depths: tuple[int, ...], lengths: tuple[int, ...],
            reps: int) -> list[dict[str, Any]]:
    points = []
    for length in lengths:
        for n in depths:
            if n * length > MAX_QUEUE_TOKENS:
                continue
            queue = h.queue(n, length)
            for name in policies:
                policy = h.policy(name)
                policy.calc_priority(queue)  # warm-up
                times = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    policy.calc_priority(queue)
                    times.append(time.perf_counter() - t0)
                points.append({"policy": name, "waiting": n, "prompt_len": length, "seconds": statistics.median(times),
                               "min": min(times), "max": max(times)})
    return points


def fit(points: list[dict[str, Any]]) -> dict[str, float]:
    """Least squares of seconds = a x waiting + b x tokens over the dfs-weight points."""
    rows = [(p["waiting"], p["waiting"] * p["prompt_len"], p["seconds"]) for p in points if p["policy"] == "dfs-weight"]
    sxx = sum(x * x for x, _, _ in rows)
    sxy = sum(x * y for x, y, _ in rows)
    syy = sum(y * y for _, y, _ in rows)
    sxt = sum(x * t for x, _, t in rows)
    syt = sum(y * t for _, y, t in rows)
    det = sxx * syy - sxy * sxy
    a = (sxt * syy - syt * sxy) / det
    b = (syt * sxx - sxt * sxy) / det
    return {"per_request_s": a, "per_token_s": b}


def _model() -> Any | None:
    try:
        from autotune.sim.perf.knobs import KnobSpeed
    except ImportError:
        return None
    return KnobSpeed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7, help="timed calls per point (default 7)")
    ap.add_argument("--quick", action="store_true", help="a smaller grid (a wiring check)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stub", default="", help="comma-separated modules to replace with empty ones (SGLang 0.3.x)")
    ap.add_argument("--json", type=Path, help="write every point and the fit here")
    args = ap.parse_args(argv)
    if not 1 <= args.reps <= 1000:
        return _error(f"--reps: 1 to 1000 (got {args.reps})")
    stubs = [s.strip() for s in args.stub.split(",") if s.strip()]
    if stubs:
        sys.meta_path.insert(0, _Stubs(stubs))
    try:
        import sglang

        h = Harness(random.Random(args.seed))
    except ImportError as exc:
        return _error(f"SGLang's scheduler could not be imported ({exc}); run this with an SGLang venv's python")
    version = getattr(sglang, "__version__", "unknown")
    depths, lengths = ((32, 512), (100, 2000)) if args.quick else (DEPTHS, LENGTHS)
    try:
        points = measure(h, POLICIES, depths, lengths, args.reps)
    except (TypeError, ValueError, AttributeError) as exc:
        return _error(f"SGLang {version}'s calc_priority did not run outside its server ({type(exc).__name__}: {exc});"
                      " this script speaks 0.3.x's and 0.5.9's API")
    line = fit(points)
    knobs = _model()
    print(f"SGLang {version}: SchedulePolicy.calc_priority over a waiting queue of random prompts, median of "
          f"{args.reps} calls [min, max], wall clock on this CPU (measured)")
    print(f"{'policy':<11} {'waiting':>7} {'prompt':>7} {'ms':>9} {'[min, max]':>18} {'us/request':>10}"
          + ("   model ms" if knobs else ""))
    for p in points:
        row = (f"{p['policy']:<11} {p['waiting']:>7} {p['prompt_len']:>7} {p['seconds'] * 1e3:>9.3f} "
               f"[{p['min'] * 1e3:7.3f}, {p['max'] * 1e3:7.3f}] {p['seconds'] / p['waiting'] * 1e6:>10.1f}")
        if knobs:
            modelled = knobs(schedule_policy=p["policy"]).schedule_round_s(p["waiting"], p["waiting"] * p["prompt_len"])
            p["modelled_seconds"] = modelled
            row += f" {modelled * 1e3:>10.3f}"
        print(row)
    print(f"fit (dfs-weight): {line['per_request_s'] * 1e6:.1f} us per waiting request + "
          f"{line['per_token_s'] * 1e9:.1f} ns per token of theirs")
    if knobs:
        from autotune.sim.perf.knobs import POLICY_MATCH_PER_REQ_S, POLICY_MATCH_PER_TOKEN_S

        print(f"the simulator's constants: {POLICY_MATCH_PER_REQ_S * 1e6:.1f} us and {POLICY_MATCH_PER_TOKEN_S * 1e9:.1f} ns")
    if args.json:
        args.json.write_text(json.dumps({"sglang": version, "reps": args.reps, "points": points, "fit": line},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
