"""The study's sampler (``make_sampler``, built by the driver) and its adaptations for an ask/tell driver."""

from __future__ import annotations

import json
import logging
import random
import warnings
from typing import Any

import optuna
from optuna.samplers import BruteForceSampler
from optuna.trial import TrialState

from autotune import space
from autotune.errors import ConfigError
from autotune.spec import BoolChoices, FloatRange, IntChoices, IntRange, StrChoices, StudySpec
from autotune.study.search import initial_design

log = logging.getLogger(__name__)


class GridSampler(BruteForceSampler):
    """Exhaustive grid over the study file's own space (:func:`space.iter_grid` of the space after
    pruning), each point once, in an order shuffled by the seed, with the points a trial's fixed
    parameters (a stage's) allow. Optuna's BruteForceSampler enumerates the stored distributions,
    which the baseline widens with SGLang's automatic values (space.widen_for_baseline): it would
    launch ``max_running_requests 3327`` with every other knob of the grid, and count the grid as
    tried only once it had. Says when it is done (``exhausted``) instead of calling
    ``study.stop()``, which only works inside ``Study.optimize`` and would leave the told trial
    unfinished under ask/tell. A BruteForceSampler still, for the checks that ask "a grid?"."""

    exhausted = False

    def __init__(self, spec: StudySpec, seed: int | None = None) -> None:
        super().__init__(seed=seed)
        self.spec = spec
        self._seed = seed
        self._points: list[tuple[str, dict[str, Any]]] | None = None
        self._chosen: dict[int, dict[str, Any]] = {}

    def points(self) -> list[tuple[str, dict[str, Any]]]:
        """(key, params as the study asks them) of every point of the grid, in the order tried."""
        if self._points is None:
            pts = []
            for point in space.iter_grid(self.spec):
                asked = _Asked(point)
                space.suggest(asked, self.spec)  # type: ignore[arg-type]  # _Asked answers suggest's calls
                pts.append((_key(asked.asked), asked.asked))
            random.Random(self._seed).shuffle(pts)
            self._points = pts
        return self._points

    def _tried(self, study: optuna.Study, but: int | None = None) -> set[str]:
        states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.FAIL)
        return {_key(t.params) for t in study._storage.get_all_trials(study._study_id, deepcopy=False, states=states)
                if t.number != but}

    def _choose(self, study: optuna.Study, trial: Any) -> dict[str, Any]:
        fixed = {**(trial.system_attrs.get("fixed_params") or {}), **trial.params}
        tried = self._tried(study, but=trial.number)
        fits = [p for _, p in self.points() if all(p.get(k, v) == v for k, v in fixed.items())] \
            or [p for _, p in self.points()]
        fresh = [p for p in fits if _key(p) not in tried]
        return (fresh or fits)[0]

    def sample_independent(self, study: optuna.Study, trial: Any, param_name: str, param_distribution: Any) -> Any:
        point = self._chosen.get(trial.number)
        if point is None:
            point = self._chosen[trial.number] = self._choose(study, trial)
        if param_name in point:
            return point[param_name]
        return optuna.samplers.RandomSampler(seed=self._seed).sample_independent(
            study, trial, param_name, param_distribution)  # pragma: no cover - every asked name is a point's

    def after_trial(self, study: optuna.Study, trial: Any, state: Any, values: Any) -> None:
        self._chosen.pop(trial.number, None)
        tried = self._tried(study) | {_key(trial.params)}
        self.exhausted = all(k in tried for k, _ in self.points())


class _Asked:
    """Answers :func:`space.suggest` from a grid point and notes what was asked (the params a trial
    launching the point holds: a conditional knob the point does not use is never asked)."""

    def __init__(self, point: dict[str, Any]) -> None:
        self.point = point
        self.asked: dict[str, Any] = {}

    def _answer(self, name: str, first: Any) -> Any:
        self.asked[name] = self.point.get(name, first)
        return self.asked[name]

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> Any:
        return self._answer(name, low)

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> Any:
        return self._answer(name, low)

    def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
        return self._answer(name, choices[0])


def _key(params: dict[str, Any]) -> str:
    """One text per configuration (a float to 6 places, as trials launch it)."""
    norm = {k: round(v, 6) if isinstance(v, float) else v for k, v in params.items()}
    return json.dumps(sorted(norm.items(), key=lambda kv: kv[0]), default=str)


class InSpaceSampler(optuna.samplers.BaseSampler):
    """``inner`` (TPE, GP, random), its every draw kept inside the study file's space.

    The distributions optuna stores hold the baseline's automatic values too (a categorical's
    choices must be the same for every trial of a study: space.widen_for_baseline), so the inner
    sampler draws from them and can pick SGLang's ``max_running_requests 3327`` or an f below the
    file's range for a search trial. A value the file's space does not hold is replaced by its
    nearest value there (a number), or one of its choices picked by the seed (anything else), and
    recorded so: the trial's params are what it launches, and the stored distributions stay
    the study's (a resumed study sees the same ones). The alternative, drawing from the file's own
    distributions, would make the sampler read the baseline's trial through distributions that do
    not hold its values (optuna's TPE and GP convert every past value with the current choices)."""

    def __init__(self, inner: optuna.samplers.BaseSampler, spec: StudySpec) -> None:
        self.inner = inner
        self.spec = spec
        self._rng = random.Random(spec.sampler.seed)

    def _pick(self, choices: list[Any]) -> Any:
        return self._rng.choice(choices)

    def infer_relative_search_space(self, study: optuna.Study, trial: Any) -> dict[str, Any]:
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        return space.into_space(self.spec, self.inner.sample_relative(study, trial, search_space), self._pick)

    def sample_independent(self, study: optuna.Study, trial: Any, param_name: str, param_distribution: Any) -> Any:
        value = self.inner.sample_independent(study, trial, param_name, param_distribution)
        dom = space.domain_of(self.spec, param_name)
        return value if dom is None else space.into_domain(dom, value, self._pick)

    def before_trial(self, study: optuna.Study, trial: Any) -> None:
        self.inner.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: Any, state: Any, values: Any) -> None:
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()


# ---- the sampler ------------------------------------------------------------------
def _numeric_only(spec: StudySpec) -> bool:
    sp = spec.search_space
    if sp.speculative is not None and [a for a in sp.speculative.algorithm.choices if a != "none"]:
        return False
    for name in ("mem_fraction_static", "cuda_graph_max_bs", "custom_allreduce", *space._SIMPLE_KNOBS):
        dom = getattr(sp, name)
        if dom is None:
            continue
        if isinstance(dom, (BoolChoices, StrChoices)):
            return False
        if isinstance(dom, IntChoices) and len(dom.choices) < 3:
            return False
        if not isinstance(dom, (FloatRange, IntRange, IntChoices)):
            return False
    return True


def choose_sampler(spec: StudySpec) -> tuple[optuna.samplers.BaseSampler, str]:
    """The sampler for ``sampler.kind: auto``, and why.

    * Grid (with pruning) when the whole space fits in the trial budget: nothing can beat
      trying every candidate once, and predicted OOMs cost nothing.
    * GP (optuna's GPSampler) when torch is installed and every knob is numeric and ordered
      (f, graph sizes, chunk sizes, no conditional speculative parameters): throughput is
      smooth in these and a GP's kernel shares evidence between neighbours. Not measured by
      benchmarks/search_efficiency.py on a machine without torch.
    * Otherwise TPE, multivariate (f and the graph size trade the same slack, so they must be
      modelled jointly) with ``group`` (speculative parameters exist only when an algorithm
      is on: group splits the conditional space instead of ignoring it) and a constant liar
      (parallel trials). Its random start-up is replaced by the designed points.
    """
    s = spec.sampler
    if space.grid_size(spec) <= spec.n_trials:  # counted, never listed: a huge space is the sampler's
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return GridSampler(spec, seed=s.seed), "grid: the whole space fits in n_trials"
    if _numeric_only(spec):
        try:
            import torch  # noqa: F401

            return optuna.samplers.GPSampler(seed=s.seed), "gp: every knob is numeric and ordered"
        except ImportError:
            pass
    n_design = initial_design.design_size(spec.n_trials, spec.search.initial_design) \
        if spec.search.stages == "auto" else s.n_startup_trials
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sampler = optuna.samplers.TPESampler(seed=s.seed, multivariate=True, group=True, constant_liar=True,
                                             n_startup_trials=max(1, n_design + 1))
    return sampler, "tpe: categorical or conditional knobs (multivariate, grouped; designed start-up)"


def make_sampler(spec: StudySpec, *, say: bool = False) -> optuna.samplers.BaseSampler:
    """The study's sampler, built by the driver for the study it runs (optuna does not persist
    samplers: built again on resume). ``say``: log the choice of ``sampler.kind: auto`` and why.
    A grid enumerates the file's space itself; any other sampler is kept inside it (:class:`InSpaceSampler`)."""
    sampler = _sampler(spec, say)
    return sampler if isinstance(sampler, BruteForceSampler) else InSpaceSampler(sampler, spec)


def _sampler(spec: StudySpec, say: bool) -> optuna.samplers.BaseSampler:
    s = spec.sampler
    if s.kind == "auto":
        sampler, why = choose_sampler(spec)
        if say:
            log.info("sampler: %s", why)
        return sampler
    if s.kind == "tpe":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return optuna.samplers.TPESampler(
                seed=s.seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=s.n_startup_trials
            )
    if s.kind == "random":
        return optuna.samplers.RandomSampler(seed=s.seed)
    if s.kind == "grid":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return GridSampler(spec, seed=s.seed)
    if s.kind == "gp":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise ConfigError("sampler.kind: 'gp' needs torch installed (pip install torch)") from None
        return optuna.samplers.GPSampler(seed=s.seed)
    raise ConfigError(f"sampler.kind: unknown {s.kind!r}")  # pragma: no cover - pydantic guards it
