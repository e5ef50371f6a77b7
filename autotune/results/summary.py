"""What a study holds, as plain dicts: status, the best trial and its launch command."""

from __future__ import annotations

import math
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import space
from autotune.spec import StudySpec
from autotune.study.driver import budget_used, count_states
from autotune.study.storage import open_study


def clean_params(params: dict[str, Any]) -> dict[str, Any]:
    """Params for people: optuna's stepped floats without binary noise (0.93, not 0.9299999999999999)."""
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in params.items()}


def _completed(study: optuna.Study) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value is not None]


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    done = _completed(study)
    if not done:
        return None
    sign = 1 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1
    return max(done, key=lambda t: sign * t.value)


def baseline_trial(study: optuna.Study) -> FrozenTrial | None:
    """The completed run of SGLang's defaults (trial 0, or its re-run after an interruption)."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.user_attrs.get("baseline"):
            return t
    return None


def status(spec: StudySpec) -> dict[str, Any]:
    study = open_study(spec, create=False)
    states = {name: 0 for name in ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")}
    states.update(count_states(study))
    best = best_trial(study)
    failure_kinds: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED, TrialState.FAIL)):
        k = t.user_attrs.get("failure_kind", "unknown")
        failure_kinds[k] = failure_kinds.get(k, 0) + 1
    return {
        "study": spec.name,
        "storage": spec.storage_url,
        "n_trials": spec.n_trials,
        "budget_used": budget_used(study),
        "states": states,
        "failure_kinds": failure_kinds,
        "best": None if best is None else {"number": best.number, "params": clean_params(best.params),
                                           "value": best.value},
        "calibration": study.user_attrs.get("calibration"),
    }


def sglang_command(spec: StudySpec, trial: FrozenTrial, *, python: str = "python3") -> list[str]:
    """The plain ``python -m sglang.launch_server ...`` argv for this trial's settings."""
    from autotune.sglang.flags import render_argv

    cfg = space.to_config(spec, dict(trial.params), baseline=bool(trial.user_attrs.get("baseline")))
    return render_argv(cfg, spec.server.sglang_version, python=python, module="sglang.launch_server")


def best(spec: StudySpec, *, runners_up: int = 3) -> dict[str, Any]:
    study = open_study(spec, create=False)
    top = best_trial(study)
    if top is None:
        from autotune.errors import AutotuneError

        raise AutotuneError(f"study {spec.name!r} has no completed trial yet")
    base = baseline_trial(study)
    base_value = base.value if base is not None else None
    gain = None
    if base_value and top.value is not None and not math.isclose(base_value, 0.0):
        sign = 1 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1
        gain = round(sign * (top.value - base_value) / abs(base_value) * 100, 2)
    from autotune.sglang.flags import shell_line

    cmd = sglang_command(spec, top)
    sign = 1 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1
    others = sorted((t for t in _completed(study) if t.number != top.number), key=lambda t: -sign * t.value)
    return {
        "study": spec.name,
        "number": top.number,
        "params": clean_params(top.params),
        "value": top.value,
        "metric": spec.objective.metric,
        "metrics": top.user_attrs.get("metrics", {}),
        "command": cmd,
        "shell": shell_line(cmd),
        "launched_command": top.user_attrs.get("command"),
        "baseline_number": base.number if base is not None else None,
        "baseline_value": base_value,
        "gain_pct": gain,
        "confirmation": top.user_attrs.get("confirmation"),
        "runners_up": [
            {"number": t.number, "params": clean_params(t.params), "value": t.value,
             "gain_pct": None if not base_value else round(sign * (t.value - base_value) / abs(base_value) * 100, 2)}
            for t in others[:runners_up]
        ],
    }
