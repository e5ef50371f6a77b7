"""Finished optuna trials as flat rows: the one reading of a study that export, report
and dashboard share.

The results layer reads only what docs/ARCHITECTURE.md says a finished trial
carries (params, user_attrs, artifacts). Everything here is read-only: it never
writes to the study.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.redact import redact_text
from autotune.study import attrs

# Keys of user_attrs[attrs.PREDICTION] exported as pred_<key>, in this order.
PREDICTION_KEYS = (
    "verdict", "reason", "kv_tokens", "kv_gib", "p_gib", "a_gib", "f", "slack_gib",
    "min_viable_mem_fraction", "cuda_graph_max_bs", "uncertain",
)
# Keys of user_attrs[attrs.OBSERVED] exported as obs_<key>, in this order.
OBSERVED_KEYS = ("p_gib", "a_gib", "kv_tokens", "graph_gib", "max_running_requests")

# The columns every export has, whatever the study (documented in dashboards/README.md).
FIXED_COLUMNS = (
    "number", "state", "outcome", "failure_kind", "reason", "baseline", "value", "best_point",
    *(f"pred_{k}" for k in PREDICTION_KEYS),
    *(f"obs_{k}" for k in OBSERVED_KEYS),
    "kv_tokens_error_pct", "gpu_seconds", "duration_s", "startup_s", "load_s", "teardown_s",
    "datetime_start", "datetime_complete",
    "note", "shell",
)


def outcome(t: FrozenTrial) -> str:
    """One label per trial: ``complete``, ``running``, ``pruned`` / a failure kind.

    Pruned and failed trials are labelled by their failure kind (``predicted_oom``,
    ``kv_oom``, ...) because that is what a person acts on; a trial with no kind
    falls back to its optuna state in lower case.
    """
    if t.state == TrialState.COMPLETE:
        return "complete"
    if t.state in (TrialState.RUNNING, TrialState.WAITING):
        return t.state.name.lower()
    kind = t.user_attrs.get(attrs.FAILURE_KIND)
    return str(kind) if kind else t.state.name.lower()


def finished(study: optuna.Study) -> list[FrozenTrial]:
    """Trials in a final state (COMPLETE, PRUNED, FAIL), in trial-number order."""
    states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return sorted(study.get_trials(deepcopy=False, states=states), key=lambda t: t.number)


def is_maximize(study: optuna.Study) -> bool:
    return study.direction == optuna.study.StudyDirection.MAXIMIZE


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def _duration_s(t: FrozenTrial) -> float | None:
    if t.datetime_start is None or t.datetime_complete is None:
        return None
    return (t.datetime_complete - t.datetime_start).total_seconds()


def metric_points(t: FrozenTrial) -> dict[str, dict[str, Any]]:
    """``user_attrs[attrs.METRICS]`` as {point: {key: scalar}} (non-scalars such as
    percentile lists are left out of the flat views)."""
    raw = t.user_attrs.get(attrs.METRICS) or {}
    if not isinstance(raw, dict):
        return {}
    return {str(p): {k: v for k, v in m.items() if _scalar(v)} for p, m in raw.items() if isinstance(m, dict)}


def row(t: FrozenTrial) -> dict[str, Any]:
    """One flat dict for one trial: the fixed columns, then param_<name>, then <point>_<metric>."""
    ua = t.user_attrs
    pred = ua.get(attrs.PREDICTION) or {}
    obs = ua.get(attrs.OBSERVED) or {}
    out: dict[str, Any] = {
        "number": t.number,
        "state": t.state.name,
        "outcome": outcome(t),
        "failure_kind": ua.get(attrs.FAILURE_KIND),
        "reason": ua.get(attrs.REASON),
        "baseline": bool(ua.get(attrs.BASELINE, False)),
        "value": t.value if t.state == TrialState.COMPLETE else None,
        "best_point": ua.get(attrs.BEST_POINT),
    }
    for k in PREDICTION_KEYS:
        out[f"pred_{k}"] = pred.get(k) if _scalar(pred.get(k)) else str(pred.get(k))
    for k in OBSERVED_KEYS:
        out[f"obs_{k}"] = obs.get(k)
    out["kv_tokens_error_pct"] = ua.get(attrs.KV_TOKENS_ERROR_PCT)
    out["gpu_seconds"] = ua.get(attrs.GPU_SECONDS)
    out["duration_s"] = _duration_s(t)
    timings = ua.get(attrs.TIMINGS) or {}
    for k in ("startup_s", "load_s", "teardown_s"):
        out[k] = timings.get(k) if isinstance(timings, dict) else None
    out["datetime_start"] = t.datetime_start
    out["datetime_complete"] = t.datetime_complete
    # Text a study recorded before its writes were redacted still shows no secret.
    for key in ("reason", "pred_reason"):
        if isinstance(out[key], str):
            out[key] = redact_text(out[key])
    out["note"] = _shown(ua.get(attrs.NOTE))
    out["shell"] = _shown(ua.get(attrs.SHELL))
    for name, value in sorted(ran_params(t).items()):
        out[f"param_{name}"] = value
    for point, metrics in sorted(metric_points(t).items(), key=lambda kv: point_order(kv[0])):
        for key, value in metrics.items():
            out[f"{point}_{key}"] = value
    return out


def _shown(text: Any) -> Any:
    return redact_text(text) if isinstance(text, str) else text


def ran_params(t: FrozenTrial) -> dict[str, Any]:
    """The trial's params for people: optuna's stepped floats without binary noise (0.93, not
    0.9299999999999999), as the launch passed them (:func:`autotune.study.attrs.as_launched`: None
    on the baseline for a knob SGLang chose where autotune could not predict it)."""
    params = attrs.as_launched(t.params, t.user_attrs)
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in params.items()}


def point_order(point: str) -> tuple[int, str]:
    """Load points by concurrency (c64 before c256), anything else after them by name."""
    digits = point[1:] if point[:1] == "c" else ""
    return (int(digits), point) if digits.isdigit() else (1 << 30, point)


def rows(trials: Iterable[FrozenTrial]) -> list[dict[str, Any]]:
    return [row(t) for t in trials]


def columns(all_rows: list[dict[str, Any]]) -> list[str]:
    """Column order: the fixed ones, then params, then metrics, in first-seen order."""
    seen: dict[str, None] = dict.fromkeys(FIXED_COLUMNS)
    params: dict[str, None] = {}
    metrics: dict[str, None] = {}
    for r in all_rows:
        for key in r:
            if key in seen:
                continue
            (params if key.startswith("param_") else metrics)[key] = None
    return [*seen, *sorted(params), *sorted(metrics, key=_metric_col_order)]


def _metric_col_order(col: str) -> tuple[int, str, str]:
    point, _, key = col.partition("_")
    order, _ = point_order(point)
    return (order, point, key)


def fmt_time(ts: _dt.datetime | None) -> str:
    return "" if ts is None else ts.strftime("%Y-%m-%d %H:%M:%S")
