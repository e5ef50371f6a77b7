"""GPU-seconds each search strategy spends until the launch settings it would hand a user are within 2 % of the optimum.

Usage::

    python benchmarks/search_efficiency.py --suite                  # every study in benchmarks/scenarios/
    python benchmarks/search_efficiency.py --study studies/demo.yaml [--seeds 20] [--budget N]

Per study (scenario):

1. **Truth.** Every candidate of the study's grid (``autotune.space.iter_grid``) over the
   space after pruning (what ``autotune plan`` keeps and the driver searches: a value that
   cannot run on the node, such as ``--attn-dp-size 8`` at TP 2, or a knob that cannot
   matter there, is out for every strategy, the sweeps included; the scenario's
   ``removed`` lists them) is evaluated once, offline
   (:func:`autotune.trial.offline.evaluate`: the simulated server's memory truth, startup
   and engine in modelled time, no processes), and so are SGLang's defaults. The optimum
   is the best objective value among them that completes (and meets the SLO, if any); the
   target is every candidate within ``--tolerance`` (2 %) of it.
   **Cache**: ``benchmarks/out/search_efficiency_<study name>.json``, keyed by a SHA-256 of
   the study file's bytes, the sources under ``autotune/sim``, ``autotune/sglang`` and
   ``autotune/load``, and ``CACHE_VERSION``; any change re-evaluates. Entries are the
   evaluator's noise-free results per launch configuration. The table, the noise and the
   driver runs are benchmarks/harness/search.py (benchmarks/warm_start.py uses them too).
2. **Noise** (modelled, not measured): every measurement a strategy makes is the cached
   value times ``1 + e``, ``e ~ Normal(0, sigma)``, drawn from a generator keyed on
   (strategy seed, configuration, how many times this run measured it), so a re-run of
   the same configuration measures a different value and confirmation repeats matter.
   ``sigma`` is ``--noise-pct`` (default 1 %: a common run-to-run spread of a serving
   benchmark on a quiet node; an assumption) unless the study file says
   ``# noise_pct: X`` in its header comments. Only the objective value is noisy; latency
   metrics (and so SLO verdicts) and GPU-seconds are not.
3. **Strategies**, each with the same trial budget (``--budget``, default the study's
   ``n_trials``) and seed:

   * ``autotune``: the real driver (``run_study`` with the offline executor): the study's
     sampler (``auto`` by default), designed start and adaptive stages, pruning before
     launch by the memory model, calibration, failure learning, confirmation re-runs.
   * ``driver+random``: the same driver (pruning, calibration, failure learning,
     confirmation) with optuna's RandomSampler and no search policy (stages off, no design).
   * ``grid+prune``: the same driver with the shuffled grid sampler and no search policy.
   * ``grid``: the grid in a shuffled order, every candidate launched (a sweep script).
   * ``random``: optuna's RandomSampler, every draw launched.

   Launch costs are the simulator's modelled seconds x GPUs (startup: weight load, CUDA
   graph capture, warm-up, from ``autotune/sim/startup.py``; load: the engine's modelled
   time; a failed launch costs what it burnt; a pruned candidate costs 0).
4. **Figures.** A strategy's *pick* after each launch is what the tool would hand a user:
   for the sweep baselines the best single measurement so far; for the driver what
   ``autotune best`` would hand over if the user stopped there (``best_trial`` on the trials
   finished so far: the best search trial, with an SLO the best that meets it, or, once re-runs
   measured the noise, the best noise-aware estimate; at the end, with the confirmation
   medians). Until 2026-12-02 the driver's pick before the end was the best single search
   run, which was ``best_trial`` as long as no re-run ran before the confirmation; a noisy
   study now re-runs its leaders during the search. *GPU-seconds to target* is the
   spend at the launch after which the pick stays within the tolerance of the optimum
   (by its noise-free value) to the end of the budget; ``inf`` if the final pick is off
   target. Medians and [min, max] over ``--seeds`` seeds (20 by default: with 5, a shuffled
   grid's median on a landscape where one candidate in six is on target moved by 2x between
   seed sets, and in the noisy scenario every strategy ends on target in only about half
   its runs, so 5 or 10 seeds' median is a coin toss); *final regret* is the final
   pick's distance to the optimum (``defaults_regret_pct``: SGLang's defaults', the
   baseline every driver strategy launches, as its last search trial (first with the
   grid); None when the defaults fail or miss the SLO). ``failed_gpu_s`` is what launches
   that died
   (OOM and other failures) cost: what pruning saves shows as the gap between
   ``random`` and ``driver+random``.

The headline is ``worst_ratio_vs_best_other``: over scenarios, the largest ratio of
autotune's median GPU-seconds to target to the best other strategy's (a strategy whose
median run never reached the target counts with what it spent, a lower bound on its
GPU-seconds to target, so the ratio against it is an upper bound, flagged
``best_other_found: false``). The last line
printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from harness.search import OUT, Noise, Run, Table, config_key, header, log, run_driver

from autotune import space
from autotune.spec import StudySpec, load_study_spec

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "benchmarks" / "scenarios"
STRATEGIES = ("autotune", "driver+random", "grid+prune", "grid", "random")


def _pick_of_measurements(meas: list[tuple[str, float]], sign: float) -> str | None:
    return max(meas, key=lambda m: sign * m[1])[0] if meas else None


def run_sweep(table: Table, order: list[dict[str, Any]], noise: Noise, sign: float) -> Run:
    """Launch every candidate of ``order`` (no pruning); the pick is the best single measurement."""
    run = Run()
    meas: list[tuple[str, float]] = []
    truth: dict[str, float | None] = {}
    for params in order:
        cfg = space.to_config(table.spec, params).to_dict()
        res = noise.measure(table, cfg)
        run.launch(res)
        key = config_key(cfg)
        truth[key] = table.truth(cfg)
        feasible = res.state == "complete" and res.value is not None and \
            not (res.slo_violation is not None and res.slo_violation > 0)
        if feasible:
            meas.append((key, float(res.value)))  # type: ignore[arg-type]
        pick = _pick_of_measurements(meas, sign)
        run.events.append((run.gpu_s, truth.get(pick) if pick else None))
    run.final = run.events[-1][1] if run.events else None
    return run


def random_order(spec: StudySpec, seed: int, budget: int) -> list[dict[str, Any]]:
    """``budget`` draws of optuna's RandomSampler over the study's space."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    out = []
    for _ in range(budget):
        trial = study.ask()
        out.append(space.suggest(trial, spec))
        study.tell(trial, 0.0)
    return out


@dataclass
class Scenario:
    path: Path
    spec: StudySpec  # the space after pruning (autotune.study.candidates.without_dead_knobs)
    hard: str
    noise_pct: float
    removed: list[str] = field(default_factory=list)  # what pruning took out, and why (``autotune plan``'s lines)


def evaluate_scenario(sc: Scenario, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    spec = sc.spec
    table = Table.load(spec, sc.path, out)
    t0 = time.monotonic()
    grid = list(space.iter_grid(spec))
    for i, params in enumerate(grid, 1):
        table.result(space.to_config(spec, params).to_dict())
        if i % 200 == 0:
            log.info("%s: %d/%d candidates evaluated (%.0f s)", spec.name, i, len(grid), time.monotonic() - t0)
            table.save()
    table.save()
    sign = 1.0 if spec.objective.resolved_direction == "maximize" else -1.0
    truths = [table.truth(space.to_config(spec, p).to_dict()) for p in grid]
    feasible = [v for v in truths if v is not None]
    if not feasible:
        raise SystemExit(f"{spec.name}: no candidate of the grid completes (and meets the SLO)")
    base_truth = table.truth(space.to_config(spec, {}, baseline=True).to_dict())
    # SGLang's defaults are a candidate too (every driver strategy launches them first)
    best = max(feasible + ([base_truth] if base_truth is not None else []), key=lambda v: sign * v)
    target = best * (1 - args.tolerance) if sign > 0 else best * (1 + args.tolerance)
    n_hit = sum(1 for v in feasible if sign * v >= sign * target)
    budget = args.budget or spec.n_trials
    sigma = sc.noise_pct / 100
    log.info("%s: %d candidates (%d feasible, %d on target), best %.1f, budget %d, noise %.1f %%",
             spec.name, len(grid), len(feasible), n_hit, best, budget, sc.noise_pct)

    def shuffled(seed: int) -> list[dict[str, Any]]:
        return [grid[i] for i in np.random.default_rng(seed).permutation(len(grid))[:budget]]

    off = {"stages": "off", "initial_design": 0}
    strategies: dict[str, Callable[[int], Run]] = {
        "autotune": lambda s: run_driver(table, budget, Noise(sigma, s), sign, sampler={"seed": s}),
        "driver+random": lambda s: run_driver(table, budget, Noise(sigma, s), sign,
                                              sampler={"kind": "random", "seed": s}, search=off),
        "grid+prune": lambda s: run_driver(table, budget, Noise(sigma, s), sign,
                                           sampler={"kind": "grid", "seed": s}, search=off),
        "grid": lambda s: run_sweep(table, shuffled(s), Noise(sigma, s), sign),
        "random": lambda s: run_sweep(table, random_order(spec, s, budget), Noise(sigma, s), sign),
    }
    runs: dict[str, list[Run]] = {name: [] for name in strategies}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for name, fn in strategies.items():
            runs[name].append(fn(seed))
        table.save()
    res: dict[str, Any] = {"hard": sc.hard, "removed": sc.removed, "grid_size": len(grid), "feasible": len(feasible),
                           "defaults_regret_pct": None if base_truth is None
                           else round(max(0.0, sign * (best - base_truth) / abs(best) * 100), 2),
                           "on_target_candidates": n_hit, "best_value": round(best, 2), "budget": budget,
                           "noise_pct": sc.noise_pct, "median_gpu_s": {}, "spread_gpu_s": {}, "found": {},
                           "median_final_regret_pct": {}, "median_failed_gpu_s": {}, "median_launches": {}}
    med: dict[str, float] = {}
    for name, rs in runs.items():
        tt = [r.to_target(target, sign) for r in rs]
        med[name] = statistics.median(tt)
        res["median_gpu_s"][name] = _num(med[name])
        res["spread_gpu_s"][name] = [_num(min(tt)), _num(max(tt))]
        res["found"][name] = sum(1 for v in tt if math.isfinite(v))
        res["median_final_regret_pct"][name] = round(statistics.median(r.regret_pct(best, sign) for r in rs), 2)
        res["median_failed_gpu_s"][name] = round(statistics.median(r.failed_gpu_s for r in rs), 0)
        res["median_launches"][name] = statistics.median(r.launches for r in rs)
    spent = {name: statistics.median(r.gpu_s for r in rs) for name, rs in runs.items()}
    res["median_spent_gpu_s"] = {n: round(v, 0) for n, v in spent.items()}
    # A strategy that did not reach the target (median) would need more than it spent: that
    # spend is a lower bound on its GPU-seconds to target, so a ratio against it is an upper
    # bound on autotune's (the headline uses it instead of a flattering 0).
    bounded = {n: (v if math.isfinite(v) else spent[n]) for n, v in med.items() if n != "autotune"}
    best_other = min(bounded, key=lambda n: bounded[n])
    res["ratio_vs"] = {n: _ratio(med["autotune"], v) for n, v in med.items() if n != "autotune"}
    res["best_other"] = best_other
    res["best_other_found"] = math.isfinite(med[best_other])
    res["ratio_vs_best_other"] = _ratio(med["autotune"], bounded[best_other])
    res["eval_s"] = round(time.monotonic() - t0, 1)
    return res


def _num(v: float) -> float | None:
    return None if not math.isfinite(v) else round(v, 0)


def _ratio(a: float, b: float) -> float | None:
    """a / b; None when neither reached the target (no evidence either way)."""
    if not math.isfinite(a) and not math.isfinite(b):
        return None
    if not math.isfinite(a):
        return math.inf
    if not math.isfinite(b):
        return 0.0
    return round(a / b, 3) if b > 0 else (0.0 if a == 0 else math.inf)


def _finite(obj: Any) -> Any:
    """JSON without Infinity: a ratio of a strategy that never reached the target is "inf"."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return "inf"
    return obj


def _line(name: str, r: dict[str, Any]) -> str:
    def f(v: float | None) -> str:
        return "not found" if v is None else f"{v:,.0f}"
    meds = "  ".join(f"{n} {f(r['median_gpu_s'][n])} ({r['found'][n]}/{SEEDS[0]})" for n in STRATEGIES)
    ratio = r["ratio_vs_best_other"]
    bound = "" if r["best_other_found"] else " at most (it did not reach the target: its spend is a lower bound)"
    return (f"{name}: ratio vs best other ({r['best_other']}) {ratio if ratio is not None else 'n/a'}{bound} | "
            f"GPU-s to target, median (found/seeds): {meds}")


SEEDS = [5]


#: What the figures depend on outside this repository: optuna's samplers (TPE, random), numpy's
#: generators (noise, shuffles), scipy's scrambled Sobol points (the designed start); torch only
#: by its presence (with it, ``sampler: auto`` picks GP on all-numeric spaces: scenario 3).
#: ``benchmarks/constraints.txt`` pins the versions benchmarks/README.md's table was taken with.
#: pandas and ray are printed too (the figures are not known to depend on them).
VERSIONED = ("optuna", "numpy", "scipy", "pandas", "ray", "torch")
CONSTRAINTS = ROOT / "benchmarks" / "constraints.txt"


def versions() -> dict[str, str]:
    """Python's and each :data:`VERSIONED` package's installed version ("absent" when not installed)."""
    from importlib import metadata

    out = {"python": ".".join(map(str, sys.version_info[:3]))}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def pinned() -> dict[str, str]:
    """``name==version`` lines of :data:`CONSTRAINTS`."""
    out: dict[str, str] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;#]+)", line)
        if m:
            out[m.group(1).lower()] = m.group(2)
    return out


def _unpinned(env: dict[str, str]) -> list[str]:
    """The pinned packages whose installed version differs from the pin, and torch when installed."""
    pins = pinned() if CONSTRAINTS.exists() else {}
    off = [f"{n} {env[n]} (pinned {v})" for n, v in sorted(pins.items()) if n in env and env[n] != v]
    if env.get("torch", "absent") != "absent":
        off.append(f"torch {env['torch']} (the table was taken without torch)")
    return off


def _versions_line(env: dict[str, str]) -> str:
    off = _unpinned(env)
    note = "as pinned in benchmarks/constraints.txt" if not off else \
        "NOT as pinned in benchmarks/constraints.txt, figures may differ from benchmarks/README.md's: " + ", ".join(off)
    return "versions: " + " ".join(f"{k} {v}" for k, v in env.items()) + f" ({note})"


def load_scenario(path: Path, noise_pct: float) -> Scenario:
    from autotune.study.candidates import without_dead_knobs

    spec, removed = without_dead_knobs(load_study_spec(path))
    h = header(path)
    return Scenario(path, spec, h.get("hard", ""), float(h.get("noise_pct", noise_pct)), [r.line() for r in removed])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--suite", action="store_true", help=f"every study file in {SCENARIOS.relative_to(ROOT)}/")
    which.add_argument("--study", help="one study file")
    ap.add_argument("--seeds", type=int, default=20, help="how many seeds (default 20)")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="the first seed (default 0): --first-seed 20 runs seeds 20-39, a second seed set")
    ap.add_argument("--budget", type=int, default=None,
                    help="trials per strategy and seed (default: the study's n_trials)")
    ap.add_argument("--tolerance", type=float, default=0.02, help="relative distance to the optimum that counts")
    ap.add_argument("--noise-pct", type=float, default=1.0, help="measurement noise (sigma, %%) unless the study says")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error("--seeds must be >= 1")
    if args.first_seed < 0:
        ap.error("--first-seed must be >= 0")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    noisy = [logging.getLogger(n) for n in ("autotune.sim.engine", "autotune.study", "autotune.trial.offline")]
    levels = [lg.level for lg in noisy]
    for lg in noisy:
        lg.setLevel(logging.CRITICAL if not args.verbose else logging.INFO)
    SEEDS[0] = args.seeds
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            optuna.logging.set_verbosity(optuna.logging.ERROR)
            return _run(args)
    finally:
        for lg, level in zip(noisy, levels, strict=True):
            lg.setLevel(level)


def _run(args: argparse.Namespace) -> int:
    paths = sorted(SCENARIOS.glob("*.yaml")) if args.suite or not args.study else [Path(args.study).resolve()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ignore = out / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")
    results: dict[str, Any] = {}
    t0 = time.monotonic()
    env = versions()
    print(_versions_line(env), flush=True)
    for path in paths:
        sc = load_scenario(path, args.noise_pct)
        r = evaluate_scenario(sc, args, out)
        results[sc.spec.name] = r
        print(_line(sc.spec.name, r), flush=True)
    ratios = [r["ratio_vs_best_other"] for r in results.values()]
    known = [x for x in ratios if x is not None]
    summary = {
        "scenarios": results,
        "worst_ratio_vs_best_other": max(known) if known else None,
        "scenarios_at_most_half": sum(1 for x in known if x <= 0.5),
        "scenarios_at_most_one": sum(1 for x in known if x <= 1.0),
        "n_scenarios": len(results),
        "seeds": args.seeds, "first_seed": args.first_seed, "tolerance": args.tolerance, "versions": env,
        "versions_as_pinned": not _unpinned(env), "elapsed_s": round(time.monotonic() - t0, 1),
    }
    print(json.dumps(_finite(summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
