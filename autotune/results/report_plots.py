"""The report's plotly figures, built from finished trials (no optuna.visualization, so
every figure can show pruned and failed trials next to completed ones).

Each builder takes the study (and the flat rows of :mod:`autotune.results.trials`)
and returns a ``plotly.graph_objects.Figure`` whose layout title is the plot's
title (:data:`TITLES`), or a figure that says why there is nothing to draw.
"""

from __future__ import annotations

import logging
import math
import statistics
import warnings
from typing import Any

import optuna
import plotly.graph_objects as go
from optuna.trial import FrozenTrial, TrialState
from plotly.subplots import make_subplots

from autotune.results import trials as _trials
from autotune.study import attrs

log = logging.getLogger(__name__)

TITLES = {
    "history": "Optimization history",
    "importance": "Parameter importance",
    "memory": "Throughput vs mem_fraction_static",
    "pareto_ttft": "Throughput vs p99 TTFT (Pareto front)",
    "pareto_itl": "Throughput vs p99 ITL (Pareto front)",
    "slices": "Per-knob slices",
}
OUTCOME_COLOURS = {
    "complete": "#2ca02c",
    "predicted_oom": "#7f7f7f",
    "infeasible": "#bcbd22",
    "kv_oom": "#d62728",
    "graph_capture_oom": "#ff7f0e",
    "cuda_oom": "#8c564b",
    "runtime_oom": "#e377c2",
    "early_stopped": "#17becf",
}
_OTHER_COLOURS = ("#9467bd", "#1f77b4", "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5")


def outcome_colour(label: str, _seen: dict[str, str] = {}) -> str:  # noqa: B006 - a stable cache by design
    if label in OUTCOME_COLOURS:
        return OUTCOME_COLOURS[label]
    return _seen.setdefault(label, _OTHER_COLOURS[len(_seen) % len(_OTHER_COLOURS)])


def _empty(title: str, why: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, xaxis={"visible": False}, yaxis={"visible": False}, height=260)
    fig.add_annotation(text=why, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font={"size": 14})
    return fig


def _throughput(t: FrozenTrial) -> float | None:
    v = t.user_attrs.get("output_throughput")
    if isinstance(v, (int, float)):
        return float(v)
    return None


def history(study: optuna.Study, metric: str) -> go.Figure:
    """Objective per trial (completed), the best so far, and the baseline as a dashed line."""
    title = TITLES["history"]
    done = [t for t in _trials.finished(study) if t.state == TrialState.COMPLETE and t.value is not None]
    if not done:
        return _empty(title, "no completed trial yet")
    maximize = _trials.is_maximize(study)
    best: list[float] = []
    for t in done:
        v = float(t.value)  # type: ignore[arg-type]
        best.append(v if not best else (max if maximize else min)(best[-1], v))
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=[t.number for t in done], y=[t.value for t in done], mode="markers", name=metric,
        marker={"color": OUTCOME_COLOURS["complete"], "size": 9},
        text=[_hover(t) for t in done], hoverinfo="text",
    ))
    fig.add_trace(go.Scatter(x=[t.number for t in done], y=best, mode="lines", name="best so far",
                             line={"shape": "hv", "color": "#1f77b4"}))
    base = next((t for t in done if t.user_attrs.get(attrs.BASELINE)), None)
    if base is not None:
        fig.add_hline(y=base.value, line_dash="dash", line_color="#555",
                      annotation_text=f"baseline (SGLang defaults, trial {base.number})")
    fig.update_layout(title=title, xaxis_title="trial", yaxis_title=metric,
                      xaxis={"dtick": max(1, math.ceil((done[-1].number + 1) / 20))})
    return fig


def importance(study: optuna.Study) -> go.Figure:
    """optuna's parameter importances (guarded: they need a few completed trials that vary)."""
    title = TITLES["importance"]
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    if len(done) < 3:
        return _empty(title, f"needs at least 3 completed trials (have {len(done)})")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            imp = optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError, ZeroDivisionError) as exc:
        log.info("parameter importance not available: %s", exc)
        return _empty(title, f"not available: {str(exc).splitlines()[0][:120]}")
    if not imp:
        return _empty(title, "no parameter varies across completed trials")
    names = list(imp)[::-1]
    fig = go.Figure(go.Bar(x=[imp[n] for n in names], y=names, orientation="h", marker_color="#1f77b4"))
    fig.update_layout(title=title, xaxis_title="importance (share of the objective's variance)",
                      height=max(260, 60 + 40 * len(names)))
    return fig


def min_viable_band(study: optuna.Study) -> tuple[float, float] | None:
    """The predicted OOM boundary on mem_fraction_static: the range of the predictions'
    ``min_viable_mem_fraction`` (one value when they agree)."""
    vals = []
    for t in _trials.finished(study):
        v = (t.user_attrs.get(attrs.PREDICTION) or {}).get("min_viable_mem_fraction")
        if isinstance(v, (int, float)) and math.isfinite(v):
            vals.append(float(v))
    if not vals:
        return None
    return min(vals), max(vals)


def memory(study: optuna.Study) -> go.Figure:
    """Throughput against mem_fraction_static, one colour per outcome; trials that did not
    complete sit on the zero line; the predicted OOM boundary is a vertical line/band."""
    title = TITLES["memory"]
    trials = [t for t in _trials.finished(study) if "mem_fraction_static" in t.params]
    if not trials:
        return _empty(title, "mem_fraction_static is not a parameter of this study")
    fig = go.Figure()
    groups: dict[str, list[FrozenTrial]] = {}
    for t in trials:
        groups.setdefault(_trials.outcome(t), []).append(t)
    for label in sorted(groups, key=lambda s: (s != "complete", s)):
        ts = groups[label]
        fig.add_trace(go.Scatter(
            x=[t.params["mem_fraction_static"] for t in ts],
            y=[(_throughput(t) or 0.0) if label == "complete" else 0.0 for t in ts],
            mode="markers", name=label, text=[_hover(t) for t in ts], hoverinfo="text",
            marker={"color": outcome_colour(label), "size": 10,
                    "symbol": "circle" if label == "complete" else "x"},
        ))
    band = min_viable_band(study)
    if band is not None:
        lo, hi = band
        mid = statistics.median([lo, hi])
        if hi - lo > 0.005:
            fig.add_vrect(x0=lo, x1=hi, fillcolor="#d62728", opacity=0.12, line_width=0,
                          annotation_text=f"predicted OOM boundary {lo:.3f}–{hi:.3f}",
                          annotation_position="top left")
            fig.add_vline(x=mid, line_dash="dot", line_color="#d62728")
        else:
            fig.add_vline(x=mid, line_dash="dot", line_color="#d62728", annotation_position="top left",
                          annotation_text=f"predicted OOM boundary: min viable f ≈ {mid:.3f}")
    fig.update_layout(title=title, xaxis_title="mem_fraction_static", yaxis_title="output_throughput (tok/s)")
    return fig


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points not dominated when lower latency (x) and higher throughput (y) are better, by x."""
    from autotune.results.pareto import front

    return [(x, y) for x, y, _ in front([(x, y, None) for x, y in points])]


_LATENCY = {"p99_ttft_ms": ("pareto_ttft", "p99 TTFT"), "p99_itl_ms": ("pareto_itl", "p99 ITL")}


def pareto(study: optuna.Study, latency: str = "p99_ttft_ms") -> go.Figure:
    """Every completed trial at every load point: output throughput against a latency
    (``p99_ttft_ms`` or ``p99_itl_ms``), and the front of the trade-off across them."""
    key, label = _LATENCY[latency]
    title = TITLES[key]
    series: dict[str, list[tuple[float, float, str]]] = {}
    for t in _trials.finished(study):
        if t.state != TrialState.COMPLETE:
            continue
        for point, m in _trials.metric_points(t).items():
            x, y = m.get(latency), m.get("output_throughput")
            if isinstance(x, (int, float)) and isinstance(y, (int, float)):
                series.setdefault(point, []).append((float(x), float(y), f"trial {t.number} @ {point}<br>{_params(t)}"))
    if not series:
        return _empty(title, f"no completed trial with {latency} and output_throughput")
    fig = go.Figure()
    for point in sorted(series, key=lambda p: _trials.point_order(p)):
        pts = series[point]
        fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="markers",
                                 name=f"load point {point}", text=[p[2] for p in pts], hoverinfo="text",
                                 marker={"size": 9}))
    front = pareto_front([(x, y) for pts in series.values() for x, y, _ in pts])
    fig.add_trace(go.Scatter(x=[p[0] for p in front], y=[p[1] for p in front], mode="lines+markers",
                             name="Pareto front", line={"color": "#000", "dash": "dash", "shape": "hv"},
                             marker={"symbol": "diamond-open", "size": 13, "color": "#000"}))
    fig.update_layout(title=title, xaxis_title=f"{label} (ms, lower is better)",
                      yaxis_title="output_throughput (tok/s)")
    return fig


def slices(study: optuna.Study, metric: str) -> go.Figure:
    """One panel per knob: the objective of completed trials against that knob's value."""
    title = TITLES["slices"]
    done = [t for t in _trials.finished(study) if t.state == TrialState.COMPLETE and t.value is not None]
    names = sorted({n for t in done for n in t.params})
    if not done or not names:
        return _empty(title, "no completed trial with parameters yet")
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names, shared_yaxes=True)
    for i, name in enumerate(names):
        ts = [t for t in done if name in t.params]
        fig.add_trace(go.Scatter(
            x=[_axis_value(t, name) for t in ts], y=[t.value for t in ts], mode="markers", name=name,
            showlegend=False, text=[_hover(t) for t in ts], hoverinfo="text",
            marker={"color": [t.number for t in ts], "colorscale": "Blues", "size": 9,
                    "line": {"width": 1, "color": "#333"}},
        ), row=i // cols + 1, col=i % cols + 1)
        dist = ts[0].distributions.get(name) if ts else None
        if isinstance(dist, optuna.distributions.CategoricalDistribution):
            fig.update_xaxes(type="category", categoryorder="array", categoryarray=[str(c) for c in dist.choices],
                             row=i // cols + 1, col=i % cols + 1)
    fig.update_yaxes(title_text=metric, col=1)
    fig.update_layout(title=title, height=320 * rows)
    return fig


def _axis_value(t: FrozenTrial, name: str) -> Any:
    """Categorical choices (cuda_graph_max_bs, booleans) as labels, so the axis shows only them."""
    v = t.params[name]
    dist = t.distributions.get(name)
    if isinstance(v, bool) or isinstance(dist, optuna.distributions.CategoricalDistribution):
        return str(v)
    return v


def _params(t: FrozenTrial) -> str:
    from autotune.results.trials import ran_params

    return ", ".join(f"{k}={v}" for k, v in sorted(ran_params(t).items()))


def _hover(t: FrozenTrial) -> str:
    head = f"trial {t.number} ({_trials.outcome(t)})"
    if t.user_attrs.get(attrs.BASELINE):
        head += " baseline"
    val = f"<br>value {t.value:.2f}" if t.value is not None else ""
    reason = t.user_attrs.get(attrs.REASON)
    why = f"<br>{str(reason)[:120]}" if reason and t.state != TrialState.COMPLETE else ""
    return f"{head}{val}<br>{_params(t)}{why}"
