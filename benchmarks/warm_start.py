"""GPU-seconds to within 2 % of the optimum, a study warm-started from a related earlier one vs cold.

Usage::

    python benchmarks/warm_start.py                 # every pair, 20 seeds, then the demo check
    python benchmarks/warm_start.py --pairs release --seeds 5 --no-demo

Pairs of landscapes (``benchmarks/warm_start/``, study files built like ``benchmarks/scenarios/``):

* ``release``: the seed case of ``benchmarks/scenarios/1-seed-c256.yaml`` (Kimi-K2-class at TP 8 on
  8 x RTX PRO 6000, PCIe, c=256), SGLang 0.5.22 -> 0.5.23;
* ``workload``: the seed case on 0.5.23, 512 -> 2048-token prompts;
* ``node``: Llama-3.1-70B at TP 8 on 8 x RTX PRO 6000 -> TP 4 on 4 of them;
* ``checkpoint``: the seed case on 0.5.23, Kimi-K2-class -> a later checkpoint of the same
  architecture and shape with 4 % more weights (``benchmarks/warm_start/models/kimi-k2-class-v2``);
* ``unrelated``: the node pair's 8-GPU Llama study as the earlier one for the release pair's Kimi
  study on 0.5.23 (another model).

Per pair and seed: the earlier study runs (the real driver, offline trial bodies, its own budget;
its GPU-seconds are sunk and not counted), then the later study runs twice with the same seed: cold,
and with ``warm_start: [earlier]`` (the earlier study handed over in memory). Both are measured
exactly as ``benchmarks/search_efficiency.py`` measures its strategies (same offline evaluation,
noise model, truth table and cache, GPU-seconds to target: the spend at the launch after which the
pick stays within 2 % of the optimum to the end of the budget). Figures: median over seeds, [min,
max], how many seeds reached the target, and warm / cold of the medians. Goal: at most 0.3 on each
related pair, at most 1.05 on the unrelated one.

Demo check (``studies/demo.yaml`` after a release upgrade): the demo's study on SGLang 0.5.22 (its
0.5.23-only variable left out) runs 40 trials; a 12-trial study on 0.5.23 warm-started from it is
compared with a cold 40-trial one by the noise-free value of what each hands over (``autotune best``),
and every launch of the warm study that ended out of memory is counted. Offline evaluator (modelled
time), not simulated server processes.

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
from harness.search import LAST_STUDY, OUT, Noise, Run, Table, header, run_driver

from autotune import space
from autotune.spec import load_study_spec
from autotune.study import warm_start

ROOT = Path(__file__).resolve().parents[1]

PAIRS_DIR = ROOT / "benchmarks" / "warm_start"
PAIRS = {
    "release": ("1-release-before.yaml", "1-release-after.yaml"),
    "workload": ("2-workload-before.yaml", "2-workload-after.yaml"),
    "node": ("3-node-before.yaml", "3-node-after.yaml"),
    "checkpoint": ("4-checkpoint-before.yaml", "4-checkpoint-after.yaml"),
    "unrelated": ("3-node-before.yaml", "1-release-after.yaml"),
}
GOAL = {"related": 0.3, "unrelated": 1.05}
OOM_KINDS = ("kv_oom", "graph_capture_oom", "runtime_oom", "weights_oom")
log = logging.getLogger("warm_start")


def _table(path: Path, out: Path) -> Table:
    return Table.load(load_study_spec(path), path, out)


def _target(table: Table) -> tuple[float, float, float]:
    """(optimum, target, sign) of the table's landscape: its whole grid evaluated (and cached)."""
    spec = table.spec
    grid = list(space.iter_grid(spec))
    truths = [table.truth(space.to_config(spec, p).to_dict()) for p in grid]
    base = table.truth(space.to_config(spec, {}, baseline=True).to_dict())
    table.save()
    sign = 1.0 if spec.objective.resolved_direction == "maximize" else -1.0
    best = max([v for v in [*truths, base] if v is not None], key=lambda v: sign * v)
    return best, best * (1 - 0.02 * sign), sign


def _warm_run(table: Table, earlier: optuna.Study, before: Path, budget: int, noise: Noise, sign: float,
              seed: int) -> Run:
    """The later study with ``warm_start: [before]``, the earlier study handed over in memory."""
    warm_table = replace(table, spec=table.spec.model_copy(update={"warm_start": [str(before)]}))
    saved = warm_start.OPEN[0]
    warm_start.OPEN[0] = lambda spec, path: earlier
    try:
        run = run_driver(warm_table, budget, noise, sign, sampler={"seed": seed})
    finally:
        warm_start.OPEN[0] = saved
    table.results.update(warm_table.results)
    table.dirty = table.dirty or warm_table.dirty
    return run


def run_pair(name: str, seeds: int, out: Path) -> dict[str, Any]:
    before_path, after_path = (PAIRS_DIR / f for f in PAIRS[name])
    t0 = time.monotonic()
    before, after = _table(before_path, out), _table(after_path, out)
    best, target, sign = _target(after)
    sigma = float(header(after_path).get("noise_pct", 1.0)) / 100
    sigma_before = float(header(before_path).get("noise_pct", 1.0)) / 100
    budget = after.spec.n_trials
    cold: list[Run] = []
    warm: list[Run] = []
    for seed in range(seeds):
        run_driver(before, before.spec.n_trials, Noise(sigma_before, 1000 + seed), sign, sampler={"seed": seed})
        earlier = LAST_STUDY[0]
        cold.append(run_driver(after, budget, Noise(sigma, seed), sign, sampler={"seed": seed}))
        warm.append(_warm_run(after, earlier, before_path, budget, Noise(sigma, seed), sign, seed))
        before.save()
        after.save()
        print(f"  {name} seed {seed}: GPU-s to target cold {_num(cold[-1].to_target(target, sign))}, "
              f"warm {_num(warm[-1].to_target(target, sign))}", flush=True)
    tt = {k: [r.to_target(target, sign) for r in rs] for k, rs in (("cold", cold), ("warm", warm))}
    med = {k: statistics.median(v) for k, v in tt.items()}
    spent = {k: statistics.median(r.gpu_s for r in rs) for k, rs in (("cold", cold), ("warm", warm))}
    # a median run that never reached the target counts with what it spent (a lower bound)
    bounded = {k: (v if math.isfinite(v) else spent[k]) for k, v in med.items()}
    ratio = bounded["warm"] / bounded["cold"] if bounded["cold"] > 0 else math.inf
    kind = "unrelated" if name == "unrelated" else "related"
    return {
        "pair": name, "kind": kind, "before": before_path.name, "after": after_path.name,
        "optimum": round(best, 2), "budget": budget, "noise_pct": sigma * 100,
        "median_gpu_s": {k: _num(v) for k, v in med.items()},
        "spread_gpu_s": {k: [_num(min(v)), _num(max(v))] for k, v in tt.items()},
        "found": {k: sum(1 for x in v if math.isfinite(x)) for k, v in tt.items()},
        "median_spent_gpu_s": {k: round(v, 0) for k, v in spent.items()},
        "median_failed_gpu_s": {k: round(statistics.median(r.failed_gpu_s for r in rs), 0)
                                for k, rs in (("cold", cold), ("warm", warm))},
        "ratio_warm_vs_cold": round(ratio, 3), "goal": GOAL[kind], "met": ratio <= GOAL[kind],
        "elapsed_s": round(time.monotonic() - t0, 1),
    }


def demo_check(seeds: int, out: Path) -> dict[str, Any]:
    """The demo node after a release upgrade: 12 warm trials vs 40 cold (module docstring)."""
    path = ROOT / "studies" / "demo.yaml"
    after = _table(path, out)
    before_path = PAIRS_DIR / "demo-0522.yaml"
    before = _table(before_path, out)
    sign = 1.0
    rows = []
    for seed in range(seeds):
        run_driver(before, 40, Noise(0.01, 1000 + seed), sign, sampler={"seed": seed})
        earlier = LAST_STUDY[0]
        cold = run_driver(after, 40, Noise(0.01, seed), sign, sampler={"seed": seed})
        warm = _warm_run(after, earlier, before_path, 12, Noise(0.01, seed), sign, seed)
        study = LAST_STUDY[0]
        ooms = [t.number for t in study.get_trials(deepcopy=False)
                if t.user_attrs.get("failure_kind") in OOM_KINDS]
        rows.append({"seed": seed, "cold_40": _num2(cold.final), "warm_12": _num2(warm.final),
                     "ratio": round((warm.final or 0.0) / cold.final, 4) if cold.final else None,
                     "warm_launches": warm.launches, "warm_oom_launches": len(ooms)})
        print(f"  demo seed {seed}: {rows[-1]}", flush=True)
        after.save()
        before.save()
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    return {"rows": rows, "min_ratio": min(ratios) if ratios else None,
            "median_ratio": statistics.median(ratios) if ratios else None,
            "oom_launches": sum(r["warm_oom_launches"] for r in rows),
            "met": bool(ratios) and min(ratios) >= 0.97 and all(r["warm_oom_launches"] == 0 for r in rows)}


def _num(v: float) -> float | None:
    return None if not math.isfinite(v) else round(v, 0)


def _num2(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", nargs="*", choices=list(PAIRS), default=list(PAIRS))
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--demo-seeds", type=int, default=5)
    ap.add_argument("--no-demo", action="store_true")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in ("autotune.sim.engine", "autotune.study", "autotune.trial.offline"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    results: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        for name in args.pairs:
            r = run_pair(name, args.seeds, out)
            results[name] = r
            print(f"{name}: warm/cold {r['ratio_warm_vs_cold']} (goal <= {r['goal']}) | GPU-s to target, median "
                  f"[min, max] (found/seeds): cold {r['median_gpu_s']['cold']} {r['spread_gpu_s']['cold']} "
                  f"({r['found']['cold']}/{args.seeds}), warm {r['median_gpu_s']['warm']} "
                  f"{r['spread_gpu_s']['warm']} ({r['found']['warm']}/{args.seeds})", flush=True)
        demo = None if args.no_demo else demo_check(args.demo_seeds, out)
        if demo is not None:
            print(f"demo after 0.5.22 -> 0.5.23: warm 12 trials / cold 40 trials, best value handed over: min "
                  f"{demo['min_ratio']}, median {demo['median_ratio']} over {args.demo_seeds} seeds; "
                  f"out-of-memory launches of the warm study: {demo['oom_launches']}", flush=True)
    summary = {"pairs": results, "demo": demo, "seeds": args.seeds,
               "all_met": all(r["met"] for r in results.values()) and (demo is None or demo["met"]),
               "versions": {"optuna": optuna.__version__, "python": sys.version.split()[0]},
               "elapsed_s": round(time.monotonic() - t0, 1)}
    print(json.dumps(summary, default=lambda v: "inf" if isinstance(v, float) else str(v)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
