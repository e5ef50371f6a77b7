"""The noise-aware estimate (autotune.results.estimate): runs pooled with the knobs' effects."""

from __future__ import annotations

import statistics

import optuna
from optuna.distributions import CategoricalDistribution

from autotune.results.estimate import estimates, key_of
from autotune.results.summary import best_trial

DIST = {"a": CategoricalDistribution(["a1", "a2"]), "b": CategoricalDistribution(["b1", "b2", "b3"])}
# Runs per configuration (first: the search trial; the rest: confirmation re-runs). The truth is
# value = 100 x A x B with A: a1 1.00, a2 0.97 and B: b1 1.00, b2 0.98, b3 0.90, with ~3 % noise;
# (a2, b1) drew lucky runs, so its median beats (a1, b1)'s, the truly best configuration.
RUNS = {("a1", "b1"): [99.0, 97.0, 100.0], ("a1", "b2"): [98.5], ("a1", "b3"): [90.5],
        ("a2", "b1"): [104.0, 96.0, 101.0], ("a2", "b2"): [94.0], ("a2", "b3"): [87.0]}


def _study(runs: dict[tuple[str, str], list[float]]) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    numbers: dict[tuple[str, str], int] = {}
    for (a, b), values in runs.items():
        numbers[(a, b)] = len(study.trials)
        study.add_trial(optuna.trial.create_trial(params={"a": a, "b": b}, distributions=DIST, value=values[0]))
    for (a, b), values in runs.items():
        for v in values[1:]:
            study.add_trial(optuna.trial.create_trial(params={"a": a, "b": b}, distributions=DIST, value=v,
                                                      user_attrs={"confirm_of": numbers[(a, b)]}))
    study.set_user_attr("confirmation", {
        str(numbers[c]): {"values": v, "median": statistics.median(v)} for c, v in runs.items() if len(v) > 1})
    return study


def test_the_knobs_effects_outvote_a_lucky_median():
    study = _study(RUNS)
    pooled = estimates(study)
    assert pooled is not None
    best = best_trial(study)
    assert best is not None and best.params == {"a": "a1", "b": "b1"}
    est = pooled[key_of(best)]
    assert est.runs == 3 and 2.0 < est.noise_pct < 5.0  # measured from the two re-run configurations
    lucky = next(t for t in study.trials if t.params == {"a": "a2", "b": "b1"})
    assert pooled[key_of(lucky)].mean > est.mean  # its own runs say otherwise...
    assert pooled[key_of(lucky)].value < est.value  # ...the other configurations outvote them


def test_without_a_repeated_configuration_nothing_is_estimated_and_the_best_run_wins():
    study = _study({c: v[:1] for c, v in RUNS.items()})
    assert estimates(study) is None
    best = best_trial(study)
    assert best is not None and best.params == {"a": "a2", "b": "b1"}  # the single best run


def test_quiet_repeats_keep_each_configuration_its_own_mean():
    """Where the noise is small against the model's misfit, the estimate is the measurement."""
    quiet = {("a1", "b1"): [100.0, 100.1], ("a1", "b2"): [90.0], ("a1", "b3"): [99.0],
             ("a2", "b1"): [97.0], ("a2", "b2"): [99.5, 99.4], ("a2", "b3"): [80.0]}
    pooled = estimates(_study(quiet))
    assert pooled is not None
    for (a, b), values in quiet.items():
        est = next(e for k, e in pooled.items() if f'"{a}"' in k and f'"{b}"' in k)
        assert abs(est.value / statistics.fmean(values) - 1) < 0.005
