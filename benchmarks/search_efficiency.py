"""GPU-seconds each search strategy spends until the launch settings it would hand a user are within 2 % of the optimum.

Usage::

    python benchmarks/search_efficiency.py --suite                  # every study in benchmarks/scenarios/
    python benchmarks/search_efficiency.py --study studies/demo.yaml [--seeds 20] [--budget N]

Per study (scenario):

1. **Truth.** Every candidate of the study's grid (``autotune.space.iter_grid``) is
   evaluated once, offline (:func:`autotune.trial.offline.evaluate`: the simulated server's
   memory truth, startup and engine in modelled time, no processes), and so are SGLang's
   defaults. The optimum is the best objective value among them that completes (and meets
   the SLO, if any); the
   target is every candidate within ``--tolerance`` (2 %) of it.
   **Cache**: ``benchmarks/out/search_efficiency_<study name>.json``, keyed by a SHA-256 of
   the study file's bytes, the sources under ``autotune/sim``, ``autotune/sglang`` and
   ``autotune/load``, and :data:`CACHE_VERSION`; any change re-evaluates. Entries are the
   evaluator's noise-free results per launch configuration.
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
import contextlib
import hashlib
import json
import logging
import math
import re
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import optuna  # noqa: E402

from autotune import space  # noqa: E402
from autotune.outcome import FailureKind  # noqa: E402
from autotune.sglang.config import ServerConfig  # noqa: E402
from autotune.spec import StudySpec, load_study_spec  # noqa: E402
from autotune.trial import offline  # noqa: E402
from autotune.trial.contract import TrialRequest, TrialResult, TrialState  # noqa: E402

log = logging.getLogger("search_efficiency")
OUT = ROOT / "benchmarks" / "out"
SCENARIOS = ROOT / "benchmarks" / "scenarios"
#: Sources whose change invalidates the cached exhaustive evaluation.
_FINGERPRINT_DIRS = ("autotune/sim", "autotune/sglang", "autotune/load", "autotune/trial")
#: Bumped when what a cache entry holds changes.
CACHE_VERSION = "3"
LAST_STUDY: list[optuna.Study] = []  # the last driver run's study (for inspection)
STRATEGIES = ("autotune", "driver+random", "grid+prune", "grid", "random")


def _portable(value: Any) -> Any:
    """``value`` with every path inside this checkout written relative to it (``studies/models/x``
    rather than ``/home/me/autotune/studies/models/x``), in nested dicts and lists too."""
    if isinstance(value, dict):
        return {k: _portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_portable(v) for v in value]
    if isinstance(value, str) and value.startswith(_ROOT_PREFIX):
        return value[len(_ROOT_PREFIX):]
    return value


_ROOT_PREFIX = str(ROOT) + "/"


def _config_key(config: dict[str, Any]) -> str:
    """A launch configuration's key: the cache's entry and the seed of its measurement noise.

    Independent of where the checkout lies (the model paths are relative to it): keyed on the
    absolute path, every checkout drew different noise, so the same code, study and seeds gave
    other figures in another directory (an earlier table reproduced only in the directory it was taken in)."""
    d = {k: v for k, v in config.items() if k not in ("port", "host")}
    return json.dumps(_portable(d), sort_keys=True, default=str)


def _fingerprint(spec_path: Path) -> str:
    h = hashlib.sha256(CACHE_VERSION.encode())
    h.update(spec_path.read_bytes())
    for sub in _FINGERPRINT_DIRS:
        for f in sorted((ROOT / sub).rglob("*.py")):
            h.update(str(f.relative_to(ROOT)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def header(spec_path: Path) -> dict[str, str]:
    """``# key: value`` lines of the study file's leading comment block (``hard``, ``noise_pct``)."""
    out: dict[str, str] = {}
    for line in spec_path.read_text().splitlines():
        if not line.startswith("#"):
            break
        m = re.match(r"#\s*([a-z_]+):\s*(.+)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def _request(spec: StudySpec, config: dict[str, Any]) -> TrialRequest:
    """The offline evaluation of one launch. Its weights are read warm (from the node's page cache):
    the evaluator's own "first launch of a study reads cold" would charge whichever configuration
    this process happens to evaluate first, so a cache filled in another order (an interrupted
    run, a new seed set) would hold other costs."""
    return TrialRequest(env={"AUTOTUNE_SIM_PAGE_CACHE": "warm"},
        study_name=spec.name, trial_number=0, config=ServerConfig.from_dict(config), backend="sim",
        sglang_version=spec.server.sglang_version, gpu=spec.hardware.gpu, num_gpus=spec.hardware.num_gpus,
        interconnect=spec.hardware.interconnect, workload=spec.workload, objective=spec.objective.as_objective(),
        artifact_dir="", run_dir="", startup_timeout_s=spec.server.startup_timeout_s, sim=spec.server.sim,
    )


@dataclass
class Table:
    """Every evaluated candidate (grid and any other the driver asks for), noise-free, by config key."""

    spec: StudySpec
    path: Path
    fingerprint: str
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    dirty: bool = False

    @classmethod
    def load(cls, spec: StudySpec, spec_path: Path, out: Path) -> Table:
        path = out / f"search_efficiency_{spec.name}.json"
        fp = _fingerprint(spec_path)
        table = cls(spec, path, fp)
        if path.exists():
            data = json.loads(path.read_text())
            if data.get("fingerprint") == fp:
                table.results = data["results"]
            else:
                log.info("cache %s is stale (study, simulator or benchmark changed): re-evaluating", path)
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

    def truth(self, config: dict[str, Any]) -> float | None:
        """The noise-free objective of a launch; None when it fails or misses the SLO."""
        r = self.result(config)
        if r.state != "complete" or r.value is None:
            return None
        if r.slo_violation is not None and r.slo_violation > 0:
            return None
        return float(r.value)


class Noise:
    """Measurement noise of one strategy run (module docstring, point 2)."""

    def __init__(self, sigma: float, seed: int) -> None:
        self.sigma, self.seed = sigma, seed
        self.count: dict[str, int] = {}

    def measure(self, table: Table, config: dict[str, Any]) -> TrialResult:
        res = table.result(config)
        if res.value is None or self.sigma <= 0:
            return res
        key = _config_key(config)
        k = self.count.get(key, 0)
        self.count[key] = k + 1
        digest = hashlib.sha256(f"{self.seed}|{key}|{k}".encode()).digest()
        eps = np.random.default_rng(int.from_bytes(digest[:8], "little")).normal(0.0, self.sigma)
        res.value = float(res.value) * (1.0 + eps)
        return res


@dataclass
class Run:
    """One strategy, one seed: the pick's noise-free value after each launch, and the spend."""

    events: list[tuple[float, float | None]] = field(default_factory=list)  # (cumulative GPU-s, pick truth)
    gpu_s: float = 0.0
    launches: int = 0
    failed_gpu_s: float = 0.0
    final: float | None = None

    def launch(self, result: TrialResult) -> None:
        self.launches += 1
        self.gpu_s += result.gpu_seconds
        if result.state != "complete":
            self.failed_gpu_s += result.gpu_seconds

    def to_target(self, target: float, sign: float) -> float:
        """GPU-s at the launch after which the pick stays on target; inf if it ends off target."""
        at = math.inf
        for spent, truth in reversed(self.events):
            if truth is None or sign * truth < sign * target:
                break
            at = spent
        return at

    def regret_pct(self, best: float, sign: float) -> float:
        if self.final is None:
            return 100.0
        return max(0.0, sign * (best - self.final) / abs(best) * 100)


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
        key = _config_key(cfg)
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


def run_driver(table: Table, budget: int, noise: Noise, sign: float, *, sampler: dict[str, Any],
               search: dict[str, Any] | None = None) -> Run:
    """The real study driver with offline trial bodies; the timeline rebuilt from its storage."""
    from autotune.results.summary import best_trial
    from autotune.study.driver import run_study
    from autotune.study.offline_executor import OfflineExecutor

    run = Run()
    truth_of: dict[int, float | None] = {}

    def evaluate(request: TrialRequest) -> TrialResult:
        config = request.config.to_dict()
        truth_of[request.trial_number] = table.truth(config)
        return noise.measure(table, config)

    def on_result(_number: int, _request: TrialRequest, result: TrialResult) -> None:
        run.launch(result)

    with tempfile.TemporaryDirectory(prefix="autotune-search-") as tmp, _in_memory_storage() as opened:
        spec = table.spec.model_copy(update={
            "storage": f"sqlite:///{tmp}/study.db", "run_dir": f"{tmp}/runs", "n_trials": budget,
            "sampler": table.spec.sampler.model_copy(update=sampler),
            "search": table.spec.search.model_copy(update=search or {}),
            "budget": table.spec.budget.model_copy(update={"wall_time_s": None}),
        })
        run_study(spec, executor=OfflineExecutor(evaluate=evaluate, on_result=on_result))
        study = opened[-1]
        LAST_STUDY[:] = [study]
        run.events = pick_timeline(study, truth_of)
        final = best_trial(study)
        run.final = truth_of.get(_launched(study, final.number)) if final is not None else None
        if run.events:
            run.events[-1] = (run.events[-1][0], run.final)
    return run


def _launched(study: optuna.Study, number: int) -> int:
    """The trial whose launch measured trial ``number`` (itself, or the one whose result it reused)."""
    return int(study.trials[number].user_attrs.get("reused_from", number))


def pick_timeline(study: optuna.Study, truth_of: dict[int, float | None]) -> list[tuple[float, float | None]]:
    """(cumulative GPU-s, noise-free value of the pick) after each launch of a driver run.

    The pick is what ``autotune best`` hands over if the user stops there: ``best_trial`` on
    the trials finished so far (by the noise-aware estimate once re-runs measured the noise,
    else the best single search run). The confirmation medians exist only once the run ends;
    the caller sets the last event from the finished study."""
    from autotune.results.summary import best_trial

    view = optuna.create_study(direction=study.direction)  # in memory, filled trial by trial
    numbers: list[int] = []  # the study's number of each trial of the view
    events: list[tuple[float, float | None]] = []
    spent = 0.0
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        if not t.state.is_finished():
            continue
        view.add_trial(t)
        numbers.append(t.number)
        if t.number not in truth_of:
            continue  # pruned before launch, or a reused result: no GPU time of its own
        spent += t.user_attrs.get("gpu_seconds") or 0.0
        pick = best_trial(view)
        events.append((spent, truth_of.get(_launched(study, numbers[pick.number])) if pick else None))
    return events


@contextlib.contextmanager
def _in_memory_storage() -> Iterator[list[optuna.Study]]:
    """The driver's study in optuna's in-memory storage instead of SQLite: the same driver
    code path (ask/tell, user attributes, enqueued trials), without ~25 SQLite commits per
    trial, which made the harness, not the search, the slow part. Yields the studies opened."""
    from autotune.study import driver

    opened: list[optuna.Study] = []
    names = vars(driver)  # the driver's own references to storage.open_storage / open_study
    saved_storage, saved_study = names["open_storage"], names["open_study"]

    def open_in_memory(spec: StudySpec) -> optuna.storages.BaseStorage:
        return optuna.storages.InMemoryStorage()

    def open_and_keep(spec: StudySpec, **kw: Any) -> optuna.Study:
        study: optuna.Study = saved_study(spec, **kw)
        opened.append(study)
        return study

    names["open_storage"], names["open_study"] = open_in_memory, open_and_keep
    try:
        yield opened
    finally:
        names["open_storage"], names["open_study"] = saved_storage, saved_study


@dataclass
class Scenario:
    path: Path
    spec: StudySpec
    hard: str
    noise_pct: float


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
    res: dict[str, Any] = {"hard": sc.hard, "grid_size": len(grid), "feasible": len(feasible),
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
    spec = load_study_spec(path)
    h = header(path)
    return Scenario(path, spec, h.get("hard", ""), float(h.get("noise_pct", noise_pct)))


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
