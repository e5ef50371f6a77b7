"""The search benchmarks' shared harness (benchmarks/search_efficiency.py, benchmarks/warm_start.py):
every launch evaluated offline once and cached (``Table``), modelled measurement noise keyed on
(seed, configuration, repeat) (``Noise``), one strategy run's timeline (``Run``), and the real
study driver on offline trial bodies (``run_driver``). search_efficiency.py's docstring says
what each figure means.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from autotune.outcome import FailureKind
from autotune.sglang.knobs.config import ServerConfig
from autotune.spec import StudySpec
from autotune.trial import offline
from autotune.trial.contract import TrialRequest, TrialResult, TrialState

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("search_efficiency")  # its level is set by the benchmark running
OUT = ROOT / "benchmarks" / "out"
#: Sources whose change invalidates the cached exhaustive evaluation.
_FINGERPRINT_DIRS = ("autotune/sim", "autotune/sglang", "autotune/load", "autotune/trial")
#: Bumped when what a cache entry holds changes.
CACHE_VERSION = "3"
LAST_STUDY: list[optuna.Study] = []  # the last driver run's study (for inspection)


def _portable(value: Any) -> Any:
    """``value`` with every path inside this checkout written relative to it (``studies/models/x``
    rather than the checkout's absolute path in front of it), in nested dicts and lists too."""
    if isinstance(value, dict):
        return {k: _portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_portable(v) for v in value]
    if isinstance(value, str) and value.startswith(_ROOT_PREFIX):
        return value[len(_ROOT_PREFIX):]
    return value


_ROOT_PREFIX = str(ROOT) + "/"


def config_key(config: dict[str, Any]) -> str:
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
        key = config_key(config)
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
        key = config_key(config)
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


def run_driver(table: Table, budget: int, noise: Noise, sign: float, *, sampler: dict[str, Any],
               search: dict[str, Any] | None = None) -> Run:
    """The real study driver with offline trial bodies; the timeline rebuilt from its storage."""
    from autotune.results.summary import best_trial
    from autotune.study.driver import run_study
    from autotune.study.execution.offline import OfflineExecutor

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
