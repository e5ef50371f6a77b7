"""What a study holds, as plain dicts: status, the best trial and its launch command."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, cast

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import space
from autotune.redact import redact_argv, redact_text, redact_value
from autotune.results import pareto
from autotune.results.estimate import (
    CONFIDENCE_Z,
    Estimate,
    beyond_noise,
    by_estimate,
    dominated,
    estimates,
    handed_over,
    key_of,
)
from autotune.results.trials import ran_params
from autotune.spec import StudySpec
from autotune.study import attrs, phases
from autotune.study.observer import budget_used, count_states
from autotune.study.storage.opening import open_study


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    """The best search trial; with an SLO, the best that meets it (when any does). Once re-runs
    have measured the noise, by each configuration's noise-aware estimate (its runs pooled with
    an additive model of the knobs: :mod:`autotune.results.estimate`); else, when the winner
    was confirmed by re-runs, by each confirmed trial's median."""
    ranked = phases.ranked(study)
    if not ranked:
        return None
    pooled = estimates(study)
    if pooled:  # the run-to-run noise is measured: the incumbent by the noise-aware estimate (results/estimate.py)
        first = handed_over(ranked, pooled, study.direction)[0]
        if key_of(first) in pooled:
            return first
    conf = study.user_attrs.get(attrs.CONFIRMATION) or {}
    if conf:
        sign = 1 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1
        confirmed = [t for t in ranked if str(t.number) in conf]
        if confirmed:
            return max(confirmed, key=lambda t: sign * conf[str(t.number)]["median"])
    return ranked[0]


def estimate_reason(number: int, estimate: Estimate, sign: int) -> str:
    """Why a configuration was handed over on a noisy node: its runs, the model, the estimate and
    the pessimistic bound it was ranked by (``autotune.study.search.estimate``)."""
    side = "lower" if sign > 0 else "upper"
    return (f"ranked by the noise-aware estimate (run-to-run noise {estimate.noise_pct:.2f} %, measured by "
            f"re-runs): trial {number}'s {estimate.runs} run(s), mean {estimate.mean:.2f}, pooled with the knobs' "
            f"effects over every run (model {estimate.model:.2f}) give {estimate.value:.2f} "
            f"+/- {estimate.sd * 100:.2f} %, ranked at its {side} bound {estimate.bound(sign):.2f} "
            f"({CONFIDENCE_Z:g} standard errors: what its runs show, not what one lucky run might)")


def _passed_over(ranked: list[FrozenTrial], pooled: dict[str, Estimate], top: FrozenTrial, sign: int) -> str:
    """When a configuration with a better bound than ``top``'s was passed over because another's runs
    beat it beyond the noise (``autotune.study.search.estimate.dominated``): which, and why; else nothing."""
    behind = dominated(pooled, sign)
    mine = pooled[key_of(top)].bound(sign)
    over = [t for t in ranked if key_of(t) in behind and sign * (pooled[key_of(t)].bound(sign) - mine) > 0]
    if not over:
        return ""
    t = over[0]
    return (f"; trial {t.number}'s bound {pooled[key_of(t)].bound(sign):.2f} is better, but the study's runs show it "
            f"{'below' if sign > 0 else 'above'} another configuration's by more than the measured noise explains "
            f"among {len(pooled)} configurations ({beyond_noise(len(pooled)):.2f} standard errors)")


def _kept_over(ranked: list[FrozenTrial], pooled: dict[str, Estimate], top: FrozenTrial,
               direction: optuna.study.StudyDirection) -> str:
    """When the best-ranked configuration is not ``top`` (the incumbent, launched first and run more
    often, whose estimate reaches its bound: ``autotune.study.search.estimate.handed_over``): which,
    and why; else nothing."""
    lead = by_estimate(ranked, pooled, direction)[0]
    if key_of(lead) == key_of(top):
        return ""
    e = pooled[key_of(lead)]
    lead_max = direction == optuna.study.StudyDirection.MAXIMIZE
    return (f"; trial {lead.number} ranks higher (estimate {e.value:.2f}, bound {e.bound(1 if lead_max else -1):.2f}) "
            f"on {e.runs} run(s); trial {top.number}, launched first and run more often, reaches that bound: a "
            f"challenger takes the pick once its runs match the incumbent's or rank it beyond its reach")


def baseline_trial(study: optuna.Study) -> FrozenTrial | None:
    """The completed run of SGLang's defaults (trial 0, or its re-run after an interruption)."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.user_attrs.get(attrs.BASELINE) and not phases.is_extra(t):
            return t
    return None


def _gain(value: float, over: float | None, sign: int) -> float | None:
    """The gain of ``value`` over ``over`` in per cent (sign: +1 maximising, -1 minimising); None without a base."""
    if not over or math.isclose(over, 0.0):
        return None
    return round(sign * (value - over) / abs(over) * 100, 2)


def shown_value(study: optuna.Study, t: FrozenTrial) -> float:
    """A trial's value for comparisons, as ``best`` and ``report`` show it: its confirmed median when it was re-run."""
    conf = (study.user_attrs.get(attrs.CONFIRMATION) or {}).get(str(t.number))
    return float(conf["median"]) if conf else cast(float, t.value)  # ranked trials are COMPLETE


def gain_over_baseline(study: optuna.Study, t: FrozenTrial, base: FrozenTrial | None) -> float | None:
    """``t``'s gain over the baseline trial in per cent, as ``best`` and ``report`` show it: each side
    its confirmed median where it was re-run, rounded to two places; None without a baseline."""
    if base is None:
        return None
    sign = 1 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1
    return _gain(shown_value(study, t), shown_value(study, base), sign)


def lineage(study: optuna.Study) -> list[dict[str, Any]]:
    """The earlier studies this one started from (``warm_start``), what each carried, and the
    studies those built on in turn."""
    return list(study.user_attrs.get(attrs.WARM_START) or [])


def lineage_lines(lin: list[dict[str, Any]]) -> list[str]:
    """One line per earlier study: its name, release, what it carried and what it built on."""
    out = []
    for s in lin:
        carried = ", ".join(s.get("carried") or []) or "nothing (unrelated)"
        on = f"; it built on {', '.join(s['built_on'])}" if s.get("built_on") else ""
        out.append(f"{s['study']} (SGLang {s.get('sglang_version')}, {s.get('file')}): carried {carried}{on}")
    return out


def status(spec: StudySpec) -> dict[str, Any]:
    """Trial counts, the best so far and the calibration, as shown (secrets hidden: :mod:`autotune.redact`)."""
    study = open_study(spec, create=False, same_file=True)
    states = {name: 0 for name in ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")}
    states.update(count_states(study))
    best = best_trial(study)
    failure_kinds: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED, TrialState.FAIL)):
        k = t.user_attrs.get(attrs.FAILURE_KIND, "unknown")
        failure_kinds[k] = failure_kinds.get(k, 0) + 1
    return redact_value({
        "study": spec.name,
        "storage": spec.storage_url,
        "n_trials": spec.n_trials,
        "budget_used": budget_used(study),
        "states": states,
        "failure_kinds": failure_kinds,
        "best": None if best is None else {"number": best.number, "params": ran_params(best),
                                           "value": best.value},
        "calibration": study.user_attrs.get(attrs.CALIBRATION),
    })


def sglang_command(spec: StudySpec, trial: FrozenTrial, *, python: str = "python3") -> list[str]:
    """The plain ``python -m sglang.launch_server ...`` argv for this trial's settings, as shown:
    the value of a secret flag (``--api-key``) hidden; the study file holds it."""
    from autotune.sglang.flags.argv import render_argv

    cfg = space.to_config(spec, dict(trial.params), baseline=bool(trial.user_attrs.get(attrs.BASELINE)))
    return redact_argv(render_argv(cfg, spec.server.sglang_version, python=python, module="sglang.launch_server"))


def launch(spec: StudySpec, trial: FrozenTrial) -> tuple[list[str], dict[str, str]]:
    """The argv and environment that start this trial's settings as shown: the study's env and its
    searched env vars (``search_space.env``); on CPU the venv's python and SGLANG_USE_CPU_ENGINE=1."""
    from autotune.sglang_env.resolve import launch_env, launch_python

    cpu = spec.server.backend == "sglang" and spec.server.device == "cpu"
    env = launch_env(spec) if spec.server.backend == "sglang" else dict(spec.server.env)
    searched = space.to_config(spec, dict(trial.params), baseline=bool(trial.user_attrs.get(attrs.BASELINE))).env
    cmd = sglang_command(spec, trial, python=launch_python(spec)) if cpu else sglang_command(spec, trial)
    return cmd, {**env, **dict(searched)}


def launch_shell(spec: StudySpec, trial: FrozenTrial) -> str:
    """:func:`launch` as one runnable shell line (``NAME=value ... python -m sglang.launch_server ...``),
    every secret hidden; what ``best`` and ``report`` print."""
    from autotune.launch.artifacts import shell_command

    return redact_text(shell_command(*launch(spec, trial)))


# per-workload figures ``best`` shows for a mix (from the workload's picked point)
MIX_FIGURES = ("output_throughput", "request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
               "p99_itl_ms", "cache_hit_rate", "goodput")


def mix_figures(spec: StudySpec, trial: FrozenTrial) -> list[dict[str, Any]] | None:
    """Each workload of a mix: weight, its picked point, its value, its SLO and whether it held,
    and the main figures of that point; None for a study with one workload."""
    mix = trial.user_attrs.get(attrs.MIX)
    if not mix or not spec.workloads:
        return None
    metrics = trial.user_attrs.get(attrs.METRICS, {})
    out = []
    for wl in spec.workloads:
        part = mix.get(wl.name) or {}
        m = metrics.get(part.get("point"), {})
        slo = dict(wl.slo) or dict(spec.objective.slo)
        violation = part.get("violation")
        out.append({"name": wl.name, "weight": wl.weight, "point": part.get("point"), "value": part.get("value"),
                    "slo": slo or None, "slo_met": None if violation is None else violation <= 0,
                    "figures": {k: m.get(k) for k in MIX_FIGURES if m.get(k) is not None}})
    return out


def best(spec: StudySpec, *, runners_up: int = 3) -> dict[str, Any]:
    """The winner, its launch command and its gain, as shown: every secret hidden
    (:mod:`autotune.redact`; a secret environment variable as ``NAME="$NAME"`` in the shell line)."""
    return redact_value(_best(spec, runners_up=runners_up))


def _best(spec: StudySpec, *, runners_up: int) -> dict[str, Any]:
    study = open_study(spec, create=False, same_file=True)
    picked = _recommended(spec, study)
    if picked is None:
        from autotune.errors import AutotuneError

        raise AutotuneError(f"study {spec.name!r} has no completed trial yet")
    top, others, choice = picked
    base = baseline_trial(study)
    base_value = shown_value(study, base) if base is not None else None
    top_value = shown_value(study, top)
    gain = gain_over_baseline(study, top, base)
    conf = study.user_attrs.get(attrs.CONFIRMATION) or {}
    sign = 1 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1
    pooled = estimates(study)
    estimate = pooled.get(key_of(top)) if pooled else None
    if estimate is not None and pooled:
        note = (estimate_reason(top.number, estimate, sign) + _passed_over(phases.ranked(study), pooled, top, sign)
                + _kept_over(phases.ranked(study), pooled, top, study.direction))
        choice["reason"] = note + (f"; {choice['reason']}" if choice.get("reason") else "")
    cmd, env = launch(spec, top)
    return {
        "study": spec.name,
        "number": top.number,
        "params": ran_params(top),
        "value": top_value,
        "first_value": top.value,
        "metric": spec.objective.metric,
        "slo": spec.objective.slo or None,
        "slo_met": top.user_attrs.get(attrs.SLO_MET),
        "metrics": top.user_attrs.get(attrs.METRICS, {}),
        "workloads": mix_figures(spec, top),
        "command": cmd,
        "env": env,
        "shell": launch_shell(spec, top),
        "launched_command": top.user_attrs.get(attrs.COMMAND),
        "baseline_number": base.number if base is not None else None,
        "baseline_value": base_value,
        "gain_pct": gain,
        "confirmation": conf.get(str(top.number)),
        "lineage": lineage(study),
        "warm_from": top.user_attrs.get(attrs.WARM_FROM),
        "choice": choice,
        "estimate": None if estimate is None else dataclasses.asdict(estimate),
        "baseline_confirmation": conf.get(str(base.number)) if base is not None else None,
        "references": _references(study, top_value, sign),
        # The trade-off, over every load point of the completed search trials (with an SLO,
        # objective.slo picks along it; these lists show what it costs).
        "pareto": {lat: pareto.trial_front(phases.ranked(study, feasible_only=False), lat)
                   for lat in ("p99_ttft_ms", "p99_itl_ms")},
        "runners_up": [
            {"number": t.number, "params": ran_params(t), "value": shown_value(study, t),
             "gain_pct": gain_over_baseline(study, t, base)}
            for t in others[:runners_up]
        ],
    }


def _recommended(spec: StudySpec, study: optuna.Study) -> tuple[FrozenTrial, list[FrozenTrial], dict[str, Any]] | None:
    """The trial ``best`` recommends (:func:`best_trial`, then a tie within the noise settled by headroom and
    fewer flags: :func:`_choice`), the other configurations ranked, and the choice's explanation."""
    top = best_trial(study)
    if top is None:
        return None
    conf = study.user_attrs.get(attrs.CONFIRMATION) or {}
    others = _other_configurations(phases.ranked(study), top)
    choice = _choice(spec, study, top, others, conf)
    if choice["recommended"] != top.number:  # a tie with more headroom / fewer flags
        top = next(t for t in others if t.number == choice["recommended"])
        others = _other_configurations(phases.ranked(study), top)
    return top, others, choice


def recommended_trial(spec: StudySpec, study: optuna.Study) -> FrozenTrial | None:
    """The trial ``autotune best`` recommends: what ``report`` shows first, so the two never disagree."""
    picked = _recommended(spec, study)
    return picked[0] if picked else None


def _references(study: optuna.Study, top_value: float, sign: int) -> list[dict[str, Any]]:
    """The ``search.references`` launch points (named configurations run after the baseline): each one's
    value and the winner's gain over it; one that did not complete says why (its state and note; a launch
    the search had already made reuses that launch's result, early-stopped included)."""
    out = []
    for t in study.get_trials(deepcopy=False):
        name = t.user_attrs.get(attrs.REFERENCE)
        if not name or phases.is_extra(t) or t.user_attrs.get(attrs.RETRIED):
            continue
        value = shown_value(study, t) if t.state == TrialState.COMPLETE and t.value is not None else None
        gain = None if value is None else _gain(top_value, value, sign)
        why = None if value is not None else (t.user_attrs.get(attrs.NOTE) or t.user_attrs.get(attrs.REASON)
                                              or t.state.name.lower())
        out.append({"name": str(name), "number": t.number, "value": value, "gain_pct": gain,
                    "state": t.state.name, "reused_from": t.user_attrs.get(attrs.REUSED_FROM), "why": why})
    return out


def _other_configurations(ranked: list[FrozenTrial], top: FrozenTrial) -> list[FrozenTrial]:
    """The other configurations, best first, one trial each: another trial of the winner's own
    parameters (a retry, a repeat) is not a runner-up or a tie of it."""
    seen = {key_of(top)}
    out = []
    for t in ranked:
        key = key_of(t)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def _choice(spec: StudySpec, study: optuna.Study, top: FrozenTrial, others: list[FrozenTrial],
            conf: dict[str, Any]) -> dict[str, Any]:
    """What the winner's value rests on, ties within the measured noise, the recommendation
    among them (autotune.results.choice)."""
    from autotune.results.choice import explain
    from autotune.sglang.hardware.gpus import get_gpu

    def flags_of(t: FrozenTrial) -> int:
        return sum(1 for a in sglang_command(spec, t) if a.startswith("--"))

    return explain(top, others[:20], lambda t: shown_value(study, t), conf,
                   maximize=study.direction == optuna.study.StudyDirection.MAXIMIZE,
                   gpu_gib=get_gpu(spec.hardware.gpu).memory_gib, flags_of=flags_of)

