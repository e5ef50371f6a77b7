"""The study's sampler (``make_sampler``, built by the driver) and its adaptations for an ask/tell driver."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import optuna
from optuna.samplers import BruteForceSampler

from autotune import space
from autotune.errors import ConfigError
from autotune.spec import BoolChoices, FloatRange, IntChoices, IntRange, StrChoices, StudySpec
from autotune.study.search import initial_design

log = logging.getLogger(__name__)


class GridSampler(BruteForceSampler):
    """Exhaustive grid (optuna's BruteForceSampler, conditional spaces and stepped floats
    included) that says when it is done instead of calling ``study.stop()``, which only
    works inside ``Study.optimize`` and would leave the told trial unfinished under ask/tell."""

    exhausted = False

    def after_trial(self, study: optuna.Study, trial: Any, state: Any, values: Any) -> None:
        try:
            super().after_trial(study, trial, state, values)
        except RuntimeError as exc:
            if "Study.stop" not in str(exc):
                raise
            self.exhausted = True


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
            return GridSampler(seed=s.seed), "grid: the whole space fits in n_trials"
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
    samplers: built again on resume). ``say``: log the choice of ``sampler.kind: auto`` and why."""
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
            return GridSampler(seed=s.seed)
    if s.kind == "gp":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise ConfigError("sampler.kind: 'gp' needs torch installed (pip install torch)") from None
        return optuna.samplers.GPSampler(seed=s.seed)
    raise ConfigError(f"sampler.kind: unknown {s.kind!r}")  # pragma: no cover - pydantic guards it
