"""How many modelled GPU-seconds each search strategy spends before it finds a near-optimal launch.

Usage::

    python benchmarks/search_efficiency.py [--study studies/demo.yaml] [--seeds 5] [--budget 150]

1. **Exhaustive optimum.** Every candidate of the study's grid (``autotune.space.iter_grid``)
   is evaluated once, offline (:func:`autotune.trial.offline.evaluate`: the simulated
   server's memory truth, startup and engine in modelled time, no processes). Results
   are cached in ``benchmarks/out/search_efficiency_<study>.json`` (keyed by the study
   file and the simulator's source, so an edit of either re-evaluates). The target is
   any configuration within ``--tolerance`` (2 %) of the best objective.
2. **Strategies**, for each seed, each with at most ``--budget`` trials and stopped at the
   first launch that reaches the target; the cost is the sum of the modelled GPU-seconds
   of every launch until then (startup + load, x GPUs; a launch that fails costs the
   startup time it burnt; a candidate pruned before launch costs 0):

   * ``autotune``: the study as given (its sampler, the baseline trial, memory-model
     pruning before launch, calibration from observed memory, failure learning), run by
     the real driver (``run_study``) with the :class:`~autotune.study.offline_executor.OfflineExecutor`;
     only the sampler seed varies.
   * ``grid``: every grid candidate in a shuffled order, all launched (no pruning): what a
     sweep script does.
   * ``random``: optuna's RandomSampler over the same space, everything it draws launched.
   * ``grid+prune`` (for transparency): the real driver with the grid sampler, so with
     autotune's pruning and failure learning but no model of speed.

   For ``autotune`` it also counts launches that died of a KV-pool OOM (``kv_oom``), which the
   memory formula can predict: the goal is none once calibrated.

Each candidate's result is the same in every strategy (the offline evaluator with the
study's sim seed), so strategies differ only in which candidates they launch. The last
line printed is one JSON object with the medians (``ratio_vs_grid`` = autotune / grid).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import optuna  # noqa: E402

from autotune import space  # noqa: E402
from autotune.trial import offline  # noqa: E402
from autotune.spec import StudySpec, load_study_spec  # noqa: E402
from autotune.outcome import FailureKind  # noqa: E402
from autotune.sglang.config import ServerConfig  # noqa: E402
from autotune.trial.contract import TrialRequest, TrialResult, TrialState  # noqa: E402

log = logging.getLogger("search_efficiency")
OUT = ROOT / "benchmarks" / "out"
#: Sources whose change invalidates the cached exhaustive evaluation.
_FINGERPRINT_DIRS = ("autotune/sim", "autotune/sglang", "autotune/load", "autotune/trial")


class _Found(Exception):
    """Raised from the executor's callback to stop a driver run at the first on-target launch."""


def _config_key(config: dict[str, Any]) -> str:
    d = {k: v for k, v in config.items() if k not in ("port", "host")}
    return json.dumps(d, sort_keys=True, default=str)


def _fingerprint(spec_path: Path) -> str:
    h = hashlib.sha256(spec_path.read_bytes())
    for sub in _FINGERPRINT_DIRS:
        for f in sorted((ROOT / sub).glob("*.py")):
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _request(spec: StudySpec, config: dict[str, Any]) -> TrialRequest:
    return TrialRequest(
        study_name=spec.name, trial_number=0, config=ServerConfig.from_dict(config), backend="sim",
        sglang_version=spec.server.sglang_version, gpu=spec.hardware.gpu, num_gpus=spec.hardware.num_gpus,
        interconnect=spec.hardware.interconnect, workload=spec.workload, objective=spec.objective.as_objective(),
        artifact_dir="", run_dir="", startup_timeout_s=spec.server.startup_timeout_s, sim=spec.server.sim,
    )


@dataclass
class Table:
    """Every evaluated candidate (grid and any other the driver asks for), by config key."""

    spec: StudySpec
    path: Path
    fingerprint: str
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    dirty: bool = False

    @classmethod
    def load(cls, spec: StudySpec, spec_path: Path, out: Path) -> "Table":
        path = out / f"search_efficiency_{spec.name}.json"
        fp = _fingerprint(spec_path)
        table = cls(spec, path, fp)
        if path.exists():
            data = json.loads(path.read_text())
            if data.get("fingerprint") == fp:
                table.results = data["results"]
            else:
                log.info("cache %s is stale (study or simulator changed): re-evaluating", path)
        return table

    def save(self) -> None:
        if self.dirty:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"fingerprint": self.fingerprint, "results": self.results}))
            tmp.replace(self.path)
            self.dirty = False

    def result(self, config: dict[str, Any]) -> TrialResult:
        key = _config_key(config)
        if key not in self.results:
            res = offline.evaluate(_request(self.spec, config))
            d = res.to_dict()
            d["artifacts"] = {}
            for m in d["metrics_by_point"].values():  # keep the table small: bench keys only
                m.pop("errors", None)
            self.results[key] = d
            self.dirty = True
        d = self.results[key]
        kind = FailureKind(d["failure_kind"]) if d["failure_kind"] else None
        return TrialResult(**{**d, "state": TrialState(d["state"]), "failure_kind": kind})

    def lookup(self, request: TrialRequest) -> TrialResult:
        return self.result(request.config.to_dict())


def exhaustive(table: Table) -> tuple[list[dict[str, Any]], float]:
    """Evaluate the whole grid; return the grid's params and the best objective value."""
    spec = table.spec
    grid = list(space.iter_grid(spec))
    t0 = time.monotonic()
    for i, params in enumerate(grid, 1):
        table.result(space.to_config(spec, params).to_dict())
        if i % 200 == 0:
            log.info("exhaustive: %d/%d candidates (%.0f s)", i, len(grid), time.monotonic() - t0)
            table.save()
    table.save()
    sign = 1.0 if spec.objective.resolved_direction == "maximize" else -1.0
    values = [r.value for r in (table.result(space.to_config(spec, p).to_dict()) for p in grid) if r.value is not None]
    return grid, max(values, key=lambda v: sign * v)


@dataclass
class Run:
    """One strategy, one seed."""

    gpu_s: float = 0.0
    launches: int = 0
    trials: int = 0
    found: bool = False
    kv_oom_launches: int = 0
    found_value: float | None = None


def _on_target(value: float | None, target: float, sign: float) -> bool:
    return value is not None and sign * value >= sign * target


def _account(run: Run, result: TrialResult, target: float, sign: float) -> bool:
    run.launches += 1
    run.gpu_s += result.gpu_seconds
    if result.failure_kind == "kv_oom":
        run.kv_oom_launches += 1
    if result.state == "complete" and _on_target(result.value, target, sign):
        run.found, run.found_value = True, result.value
        return True
    return False


def run_launch_all(table: Table, order: list[dict[str, Any]], target: float, sign: float) -> Run:
    """Launch candidates in ``order`` (no pruning) until one is on target."""
    run = Run()
    for params in order:
        run.trials += 1
        if _account(run, table.result(space.to_config(table.spec, params).to_dict()), target, sign):
            break
    return run


def run_random(table: Table, seed: int, budget: int, target: float, sign: float) -> Run:
    """optuna's RandomSampler over the study's space; every draw launched."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed),
                                direction=table.spec.objective.resolved_direction)
    run = Run()
    for _ in range(budget):
        trial = study.ask()
        params = space.suggest(trial, table.spec)
        res = table.result(space.to_config(table.spec, params).to_dict())
        run.trials += 1
        hit = _account(run, res, target, sign)
        if res.state == "complete" and res.value is not None:
            study.tell(trial, res.value)
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        if hit:
            break
    return run


def run_driver(table: Table, sampler: dict[str, Any], budget: int, target: float, sign: float) -> Run:
    """The real study driver (pruning, calibration, failure learning) with offline trial bodies."""
    from autotune.study.driver import run_study
    from autotune.study.offline_executor import OfflineExecutor

    run = Run()

    def on_result(_number: int, _request: TrialRequest, result: TrialResult) -> None:
        if _account(run, result, target, sign):
            raise _Found()

    with tempfile.TemporaryDirectory(prefix="autotune-search-") as tmp:
        spec = table.spec.model_copy(update={
            "storage": f"sqlite:///{tmp}/study.db", "run_dir": f"{tmp}/runs", "n_trials": budget,
            "sampler": table.spec.sampler.model_copy(update=sampler),
        })
        try:
            summary = run_study(spec, executor=OfflineExecutor(evaluate=table.lookup, on_result=on_result))
            run.trials = summary.finished
        except _Found:
            study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
            run.trials = len(study.get_trials(deepcopy=False))
    return run


def _fmt(run: Run) -> str:
    mark = "" if run.found else " (not found)"
    return f"{run.gpu_s:>10.0f} GPU-s {run.launches:>4d} launches {run.trials:>4d} trials{mark}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default=str(ROOT / "studies" / "demo.yaml"))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--budget", type=int, default=150, help="trials per strategy and seed")
    ap.add_argument("--tolerance", type=float, default=0.02, help="relative distance to the optimum that counts")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    noisy = [logging.getLogger(n) for n in ("autotune.sim.engine", "autotune.study.driver", "autotune.trial.offline")]
    levels = [lg.level for lg in noisy]
    logging.getLogger("search_efficiency").setLevel(logging.INFO)
    for lg in noisy:
        lg.setLevel(logging.CRITICAL if not args.verbose else logging.INFO)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            optuna.logging.set_verbosity(optuna.logging.ERROR)
            return _run(args)
    finally:
        for lg, level in zip(noisy, levels):
            lg.setLevel(level)


def _run(args: argparse.Namespace) -> int:
    spec_path = Path(args.study).resolve()
    spec = load_study_spec(spec_path)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ignore = out / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")
    table = Table.load(spec, spec_path, out)
    t0 = time.monotonic()
    grid, best = exhaustive(table)
    sign = 1.0 if spec.objective.resolved_direction == "maximize" else -1.0
    target = best * (1 - args.tolerance) if sign > 0 else best * (1 + args.tolerance)
    grid_results = [table.result(space.to_config(spec, p).to_dict()) for p in grid]
    n_hit = sum(1 for r in grid_results if r.state == "complete" and _on_target(r.value, target, sign))
    kinds: dict[str, int] = {}
    for r in grid_results:
        k = r.failure_kind or r.state
        kinds[k] = kinds.get(k, 0) + 1
    full_grid_gpu_s = sum(r.gpu_seconds for r in grid_results)
    print(f"study {spec.name}: {len(grid)} grid candidates evaluated offline in {time.monotonic() - t0:.0f} s "
          f"(memo {offline.cache_info()})")
    print(f"outcomes: {json.dumps(kinds, sort_keys=True)}; best {spec.objective.metric} = {best:.1f}; "
          f"target >= {target:.1f}: {n_hit} candidates; launching the whole grid costs {full_grid_gpu_s:.0f} GPU-s")

    strategies: dict[str, Callable[[int], Run]] = {
        "autotune": lambda s: run_driver(table, {"seed": s}, args.budget, target, sign),
        "grid": lambda s: run_launch_all(table, [grid[i] for i in np.random.default_rng(s).permutation(len(grid))],
                                         target, sign),
        "random": lambda s: run_random(table, s, args.budget, target, sign),
        "grid+prune": lambda s: run_driver(table, {"kind": "grid", "seed": s}, args.budget, target, sign),
    }
    runs: dict[str, list[Run]] = {name: [] for name in strategies}
    for seed in range(args.seeds):
        print(f"\nseed {seed}")
        for name, fn in strategies.items():
            t = time.monotonic()
            r = fn(seed)
            runs[name].append(r)
            extra = f" kv_oom launches {r.kv_oom_launches}" if name == "autotune" else ""
            print(f"  {name:<11s}{_fmt(r)}{extra}  ({time.monotonic() - t:.1f} s)")
        table.save()

    med = {name: statistics.median(r.gpu_s for r in rs) for name, rs in runs.items()}
    print("\nmedians over seeds:")
    for name, rs in runs.items():
        print(f"  {name:<11s}{med[name]:>10.0f} GPU-s  launches {statistics.median(r.launches for r in rs):>6.1f}  "
              f"found {sum(r.found for r in rs)}/{len(rs)}")
    summary = {
        "autotune_gpu_s": round(med["autotune"], 1),
        "grid_gpu_s": round(med["grid"], 1),
        "random_gpu_s": round(med["random"], 1),
        "grid_prune_gpu_s": round(med["grid+prune"], 1),
        "ratio_vs_grid": round(med["autotune"] / med["grid"], 3) if med["grid"] else None,
        "ratio_vs_random": round(med["autotune"] / med["random"], 3) if med["random"] else None,
        "autotune_launches": statistics.median(r.launches for r in runs["autotune"]),
        "autotune_predictable_oom_launches": sum(r.kv_oom_launches for r in runs["autotune"]),
        "found_within_budget": {name: sum(r.found for r in rs) for name, rs in runs.items()},
        "seeds": args.seeds, "budget": args.budget, "tolerance": args.tolerance,
        "best_value": round(best, 2), "grid_size": len(grid), "on_target_candidates": n_hit,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
