"""Noise-aware values: each configuration's runs pooled with what the other configurations say.

On a noisy node (run-to-run spread of a few per cent) the luckiest single run crowns the
wrong configuration, and three or four confirmation runs cannot separate configurations
1-2 % apart. But every run also says something about the knobs' effects: the 30 runs of a
study measure "max_running_requests 256 beats 384" many times over, under many settings of
the other knobs. The estimate uses that, the way empirical-Bayes shrinkage (and a Bayesian
optimiser's posterior mean) does:

1. the noise variance ``s2`` from the configurations run more than once (confirmation
   re-runs: pooled within-configuration variance of log(value));
2. an additive model of log(value) over the knobs (one coefficient per knob value) fitted to
   every run of every feasible configuration, the coefficients of each knob of three values
   or more shrunk by how much that knob is seen to matter (a random-effects fit,
   :func:`_fit`): a knob whose values the runs do not tell apart contributes nothing, so a
   lucky configuration cannot lend its luck to its own knob values and through them back
   to itself;
3. the model's misfit ``tau2``: the spread of the configurations' mean log-values around
   the model beyond what the noise explains;
4. each configuration's estimate: its mean and the model's prediction, weighted by their
   precisions (``n / s2`` and ``1 / (tau2 + the prediction's own variance)``), with the
   estimate's standard error ``sd``.

Configurations are ranked by a pessimistic bound, ``CONFIDENCE_Z`` standard errors below the
estimate (above it when minimising): what is handed over is what the runs show to be good,
not what one or two lucky runs and an uncertain model say might be. Where the noise is small
against the misfit (a deterministic simulator, a quiet node), the estimate is the
configuration's own mean and the bound is the estimate; where the noise dominates, it leans
on the model and on the configurations measured most. Without a configuration run twice the
noise is unknown and nothing is estimated (``estimates`` returns None; ranking stays by
measured value); with fewer configurations than the model needs, each estimate is the
configuration's own mean. What is handed over is the best-ranked configuration unless one
launched earlier and run more often could be as good (:func:`handed_over`).

Measured on ``benchmarks/scenarios/6-noisy-qwen32b-h200.yaml`` (4 % noise, 2 % target), with
each new leader re-run once during the search (``race.py``): the ridge model ranked by its
estimate (before 2026-12-02, third session) reached the target at a median 925 GPU-s on
seeds 0-39 and 1,187 on seeds 40-79, on target at the end in 35 and 34 of 40; this fit and
the bound 616 and 519 GPU-s, 36 and 31 of 40 (grid 770 and 694, 26 and 26; random 719 and
1,117, 25 and 29). benchmarks/HISTORY.md ("Search efficiency on six landscapes") has the table and what was tried.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.study import attrs, phases

#: Ridge penalty on the knob coefficients (log space; the intercept is not penalised), where
#: the random-effects fit starts; the importers of ``autotune.results.estimate`` know it.
RIDGE = 1.0
#: Rounds of the random-effects fit (:func:`_fit`); it settles in far fewer on the suite's studies.
EM_ROUNDS = 50
#: A knob's shrinkage is learnt from its own values only when it has at least this many: with
#: two, the variance of its effects would rest on one contrast (one degree of freedom), and an
#: on/off knob whose one comparison happens to fall within the noise would be dropped; it
#: keeps the plain ridge.
MIN_LEVELS = 3
#: Standard errors below the estimate at which configurations are ranked (two: about 98 %
#: one-sided under a normal posterior; 1.5 and 3 were tried, benchmarks/HISTORY.md).
CONFIDENCE_Z = 2.0
#: Fewer configurations than this: too little to fit the knobs' effects on (each estimate is then
#: the configuration's own mean).
MIN_CONFIGURATIONS = 6


@dataclass(frozen=True)
class Estimate:
    value: float  # the pooled estimate, in the objective's units
    runs: int  # runs of this configuration
    mean: float  # geometric mean of its runs
    model: float  # the additive model's prediction
    noise_pct: float  # the measured run-to-run noise (sigma of log value, %)
    misfit_pct: float  # the model's misfit beyond the noise (tau, %)
    sd: float = 0.0  # the estimate's standard error (log value)

    def bound(self, sign: int) -> float:
        """The pessimistic bound ranked by: CONFIDENCE_Z standard errors below the estimate when
        maximising (``sign`` 1), above it when minimising (-1)."""
        return self.value * math.exp(-sign * CONFIDENCE_Z * self.sd)


def key_of(t: FrozenTrial) -> str:
    """A trial's configuration: its params, floats without binary noise (an enqueued 0.93 and a
    suggested 0.9299999999999999 are the same configuration). Runs, runners-up and ties are
    grouped by it."""
    return json.dumps({k: round(v, 6) if isinstance(v, float) else v for k, v in t.params.items()},
                      sort_keys=True, default=str)


def _runs(study: optuna.Study) -> dict[str, tuple[dict, list[float]]]:
    """Independent runs per configuration: feasible completed trials, search and confirmation
    re-runs; a trial that reused an earlier launch's result is not a run of its own."""
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.value is not None and t.user_attrs.get(attrs.REUSED_FROM) is None]
    if any(phases.feasible(t) for t in done):
        done = [t for t in done if phases.feasible(t)]
    out: dict[str, tuple[dict, list[float]]] = {}
    for t in done:
        out.setdefault(key_of(t), (dict(t.params), []))[1].append(float(t.value))  # type: ignore[arg-type]
    return out


def beyond_noise(k: int) -> float:
    """Standard errors by which one configuration's runs must beat another's before a study of ``k``
    configurations takes it as measured, not luck: the one-sided level of :data:`CONFIDENCE_Z`
    (about 2.3 %) shared among the ``k - 1`` others a configuration is compared with (Bonferroni):
    2.8 standard errors among 10 configurations, 3.2 among 30, 3.5 among 120."""
    level = NormalDist().cdf(-CONFIDENCE_Z) / max(1, k - 1)
    return -NormalDist().inv_cdf(level)


def dominated(pooled: dict[str, Estimate], sign: int) -> set[str]:
    """Configurations whose own runs lose to another configuration's beyond the measured noise:
    the difference of their mean log values (``sign`` 1: maximising) exceeds :func:`beyond_noise`
    standard errors of that difference (``noise^2 x (1/n_a + 1/n_b)``).

    What the study measured overrules what the additive model predicts: a configuration whose runs
    are that far behind another's is never handed over, whatever its knobs' effects elsewhere say.
    The estimate alone can let it be, in a study of many configurations that the model fits well
    but for one real interaction (tests/test_results_estimate.py): the misfit ``tau2`` is one figure
    for every configuration, so one large residual, averaged with a hundred small ones, barely moves
    it, and that configuration's runs are pooled with a prediction that is wrong for it."""
    if not pooled:
        return set()
    z = beyond_noise(len(pooled))
    noise = next(iter(pooled.values())).noise_pct / 100
    logs = {k: (sign * math.log(e.mean), e.runs) for k, e in pooled.items()}
    out = set()
    for k, (mine, n) in logs.items():
        if any(other - mine > z * noise * math.sqrt(1 / m + 1 / n) for j, (other, m) in logs.items() if j != k):
            out.add(k)
    return out


def by_estimate(trials: list[FrozenTrial], pooled: dict[str, Estimate],
                direction: optuna.study.StudyDirection) -> list[FrozenTrial]:
    """``trials`` with an estimate first, best pessimistic bound first (ties: the earlier trial),
    then the rest in their given order: the one ranking ``best`` and the racing leader both use.
    A configuration that another one's runs beat beyond the noise (:func:`dominated`) comes after
    every one that none does, so it is never the pick."""
    sign = 1 if direction == optuna.study.StudyDirection.MAXIMIZE else -1
    behind = dominated(pooled, sign)

    def order(t: FrozenTrial) -> tuple[bool, bool, float, int]:  # a stable sort keeps the rest as given
        e = pooled.get(key_of(t))
        return (e is None, key_of(t) in behind, -sign * e.bound(sign) if e else 0.0, t.number if e else 0)

    return sorted(trials, key=order)


def handed_over(trials: list[FrozenTrial], pooled: dict[str, Estimate],
                direction: optuna.study.StudyDirection) -> list[FrozenTrial]:
    """:func:`by_estimate`'s order with the incumbent first: the best-ranked configuration, unless one
    launched before it and measured more often could be as good (its estimate reaches the best-ranked
    one's pessimistic bound, :meth:`Estimate.bound`) and no other's runs beat it beyond the noise
    (:func:`dominated`); then the first launched of those.

    A challenger measured fewer times than the incumbent does not take the pick within its own
    uncertainty: as in SMAC's intensification, where a challenger becomes the incumbent only once it
    is at least as good on as many runs (Hutter, Hoos and Leyton-Brown, "Sequential Model-Based
    Optimization for General Algorithm Configuration", LION 5, 2011,
    https://doi.org/10.1007/978-3-642-25566-3_40). On a noisy node the pick otherwise moves to
    whichever configuration drew the last lucky run; racing (:mod:`autotune.study.search.race`)
    re-runs the best-ranked challenger, so once its runs match the incumbent's the estimates decide.

    Measured with ``benchmarks/search_efficiency.py`` (GPU-seconds until the pick stays within 2 % of
    the optimum, median; benchmarks/HISTORY.md): scenario 6 (4 % noise, 20 seeds) 503 -> 63, its 8 %
    variant 662 -> 63 (40 seeds), scenario 2 at 4 % noise 3,527 -> 4,569 (the first launch there is
    2.8 % off the optimum and holds the pick until the better one is re-run); the 1 %-noise scenarios
    unchanged. Keeping the first-launched configuration whatever the run counts (tried) cost scenario 2
    at 4 % noise 7,844."""
    order = by_estimate(trials, pooled, direction)
    if not order or key_of(order[0]) not in pooled:
        return order
    sign = 1 if direction == optuna.study.StudyDirection.MAXIMIZE else -1
    top = pooled[key_of(order[0])]
    claim = top.bound(sign)
    behind = dominated(pooled, sign)
    first: dict[str, int] = {}
    for t in trials:
        first[key_of(t)] = min(first.get(key_of(t), t.number), t.number)

    def keeps(t: FrozenTrial) -> bool:  # t may keep the pick from the best-ranked configuration
        e = pooled.get(key_of(t))
        return (e is not None and key_of(t) not in behind and e.runs > top.runs
                and sign * e.value >= sign * claim)

    incumbent = min([order[0]] + [t for t in order if keeps(t)], key=lambda t: first[key_of(t)])
    return [incumbent] + [t for t in order if t is not incumbent]


def _fit(x: np.ndarray, y: np.ndarray, s2: float, knob_of: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The additive model's coefficients and their covariance: a random-effects fit by EM.

    Knob ``j``'s coefficients (columns with ``knob_of == j``; -1 is the intercept, unpenalised)
    have a prior variance ``v_j``, re-estimated each round as their posterior mean square
    (coefficient squared plus its posterior variance): a knob that moves the value keeps
    large coefficients, one whose values the runs do not tell apart is shrunk to nothing.
    It starts from the plain ridge (penalty ``RIDGE``: ``v_j = s2 / RIDGE``), where a knob
    with fewer than ``MIN_LEVELS`` values stays."""
    knobs = np.array(knob_of)
    v = {j: s2 / RIDGE for j in set(knob_of) if j >= 0}
    xtx, xty = x.T @ x, x.T @ y
    coef, cov = np.zeros(x.shape[1]), np.eye(x.shape[1])
    for _ in range(EM_ROUNDS):
        # floored: on a quiet node (noise a millionth of a knob's effect) the system stays well conditioned
        prior = np.array([0.0 if j < 0 else max(s2 / max(v[j], 1e-12), 1e-6) for j in knob_of])
        cov = np.linalg.inv(xtx + np.diag(prior)) * s2
        coef = cov @ xty / s2
        for j in v:
            sel = knobs == j
            if sel.sum() >= MIN_LEVELS:
                v[j] = float((coef[sel] ** 2 + np.diag(cov)[sel]).mean())
    return coef, cov


def estimates(study: optuna.Study) -> dict[str, Estimate] | None:
    """Per configuration (:func:`key_of`): its noise-aware estimate (its own mean while there are
    fewer than :data:`MIN_CONFIGURATIONS`), or None when no noise is measured yet or a value is
    not positive."""
    groups = _runs(study)
    if not groups or any(v <= 0 for _, vals in groups.values() for v in vals):
        return None
    keys = list(groups)
    logs = {k: np.log(np.array(groups[k][1])) for k in keys}
    repeated = [logs[k] for k in keys if len(logs[k]) > 1]
    dof = sum(len(y) - 1 for y in repeated)
    if dof == 0:
        return None
    s2 = float(sum(((y - y.mean()) ** 2).sum() for y in repeated)) / dof
    if s2 <= 1e-12:  # repeats agree exactly: nothing to pool
        return None
    if len(groups) < MIN_CONFIGURATIONS:
        # Too few configurations to fit the knobs' effects on, but the noise is measured: each
        # configuration's own mean, with its standard error (a racing study's first launches).
        return {k: Estimate(value=math.exp(float(y.mean())), runs=len(y), mean=math.exp(float(y.mean())),
                            model=math.exp(float(y.mean())), noise_pct=math.sqrt(s2) * 100, misfit_pct=0.0,
                            sd=math.sqrt(s2 / len(y))) for k, y in logs.items()}
    names = sorted({n for params, _ in groups.values() for n in params})
    levels = {n: sorted({json.dumps(groups[k][0].get(n), sort_keys=True) for k in keys}) for n in names}
    cols = [(n, lv) for n in names for lv in levels[n] if len(levels[n]) > 1]

    def row(params: dict) -> np.ndarray:
        return np.array([1.0] + [1.0 if json.dumps(params.get(n), sort_keys=True) == lv else 0.0 for n, lv in cols])

    rows = {k: row(groups[k][0]) for k in keys}
    x = np.array([rows[k] for k in keys for _ in logs[k]])
    y = np.concatenate([logs[k] for k in keys])
    coef, cov = _fit(x, y, s2, [-1] + [names.index(n) for n, _ in cols])
    pred = {k: float(rows[k] @ coef) for k in keys}
    pred_var = {k: float(rows[k] @ cov @ rows[k]) for k in keys}
    mean = {k: float(logs[k].mean()) for k in keys}
    resid = np.array([mean[k] - pred[k] for k in keys])
    inv_n = np.array([1.0 / len(logs[k]) for k in keys])
    tau2 = max(1e-12, float(np.mean(resid ** 2) - s2 * np.mean(inv_n)))
    out = {}
    for k in keys:
        a, b = len(logs[k]) / s2, 1.0 / (tau2 + pred_var[k])
        est = (a * mean[k] + b * pred[k]) / (a + b)
        out[k] = Estimate(value=math.exp(est), runs=len(logs[k]), mean=math.exp(mean[k]), model=math.exp(pred[k]),
                          noise_pct=math.sqrt(s2) * 100, misfit_pct=round(math.sqrt(tau2) * 100, 2),
                          sd=math.sqrt(1.0 / (a + b)))
    return out


__all__ = ["Estimate", "beyond_noise", "by_estimate", "dominated", "estimates", "handed_over", "key_of"]
