"""The noise-aware estimate (autotune.results.estimate): runs pooled with the knobs' effects."""

from __future__ import annotations

import statistics

import optuna
from optuna.distributions import CategoricalDistribution

from autotune.results.estimate import estimates, key_of
from autotune.results.summary import best_trial

DIST = {"a": CategoricalDistribution(["a1", "a2"]), "b": CategoricalDistribution(["b1", "b2", "b3", "b4"])}
# Runs per configuration (first: the search trial; the rest: confirmation re-runs). The truth is
# value = 100 x A x B with A: a1 1.00, a2 0.97 and B: b1 1.00, b2 0.98, b3 0.90, b4 0.95, with
# ~2 % noise; (a2, b1) drew lucky runs, so its mean and median beat (a1, b1)'s, the truly best
# configuration, while the three other pairs measure a2 about 3 % below a1.
RUNS = {("a1", "b1"): [99.0, 97.0, 100.0], ("a1", "b2"): [98.5, 97.0], ("a1", "b3"): [90.5, 89.0],
        ("a1", "b4"): [95.5, 94.0], ("a2", "b1"): [104.0, 96.0, 101.0], ("a2", "b2"): [94.0, 95.5],
        ("a2", "b3"): [87.0, 88.0], ("a2", "b4"): [92.0, 91.5]}


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
    assert est.runs == 3 and 1.5 < est.noise_pct < 5.0  # measured from the re-run configurations
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


def test_a_knob_whose_values_do_not_matter_cannot_carry_a_lucky_configuration():
    """Six values of ``f`` that do not move the value, ``m`` that does (m1 1.00, m2 0.97, m3 0.93).
    The one configuration at f6 drew two lucky runs (+5 and +4 % on a 3 % noise): a plain ridge lends two thirds of that
    luck to f6's coefficient and so to its own model prediction; the random-effects fit sees f's
    values agree everywhere else and predicts it as any m2 configuration."""
    dist = {"f": CategoricalDistribution([f"f{i}" for i in range(1, 7)]),
            "m": CategoricalDistribution(["m1", "m2", "m3"])}
    truth = {"m1": 100.0, "m2": 97.0, "m3": 93.0}
    wobble = [3.0, -2.4, 1.5, -0.9, 2.7, -3.0, 0.6, -1.8, 2.1, -1.2]  # per cent, the other runs' noise
    runs: list[tuple[str, str, list[float]]] = []
    i = 0
    for f in range(1, 6):
        for m in ("m1", "m2", "m3"):
            n = 2 if (f + len(m)) % 2 else 1
            runs.append((f"f{f}", m, [truth[m] * (1 + wobble[(i + j) % len(wobble)] / 100) for j in range(n)]))
            i += n
    runs.append(("f6", "m2", [101.9, 100.9]))  # truth 97: lucky twice
    study = optuna.create_study(direction="maximize")
    for f, m, values in runs:
        first = len(study.trials)
        for j, v in enumerate(values):
            study.add_trial(optuna.trial.create_trial(params={"f": f, "m": m}, distributions=dist, value=v,
                                                      user_attrs={"confirm_of": first} if j else {}))
    pooled = estimates(study)
    assert pooled is not None
    lucky = next(t for t in study.trials if t.params == {"f": "f6", "m": "m2"})
    assert pooled[key_of(lucky)].model < 98.5  # about m2's 97, not lifted by its own luck
    best = best_trial(study)
    assert best is not None and best.params["m"] == "m1"


def test_best_says_the_bound_it_ranked_by():
    """``autotune best`` explains a noisy pick: the estimate, its spread and the bound it was ranked at."""
    from autotune.results.summary import estimate_reason

    study = _study(RUNS)
    pooled = estimates(study)
    assert pooled is not None
    top = best_trial(study)
    assert top is not None
    est = pooled[key_of(top)]
    text = estimate_reason(top.number, est, 1)
    assert f"give {est.value:.2f} +/- {est.sd * 100:.2f} %" in text
    assert f"ranked at its lower bound {est.bound(1):.2f}" in text and est.bound(1) < est.value
    assert "upper bound" in estimate_reason(top.number, est, -1) and est.bound(-1) > est.value
