"""One self-contained HTML report of a study: plots, outcomes, the top configurations
against SGLang's defaults and the command that launches each.

Why one file: it is copied off a GPU node with scp and opened anywhere, offline.
plotly.js is inlined once (``include_plotlyjs=True`` on the first figure); nothing
is fetched from a CDN.
"""

from __future__ import annotations

import html
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.redact import redact_text
from autotune.results import report_plots as plots
from autotune.results import trials as _trials
from autotune.results.output import check_output_path, write_atomic
from autotune.results.summary import (
    baseline_trial,
    gain_over_baseline,
    launch_shell,
    lineage,
    lineage_lines,
    recommended_trial,
    shown_value,
)
from autotune.results.trials import ran_params
from autotune.spec import StudySpec
from autotune.study import attrs
from autotune.study.storage.opening import open_study

log = logging.getLogger(__name__)

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1200px;color:#222}
h1{margin-bottom:4px} .sub{color:#666;margin-top:0}
table{border-collapse:collapse;margin:12px 0;font-size:14px;width:100%}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4} td.num{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:12px;white-space:pre-wrap;word-break:break-all} .gain{font-weight:600;color:#2ca02c}
.neg{color:#d62728} .plot{margin:18px 0;border-top:1px solid #eee}
"""


def build_report(spec: StudySpec, *, top: int = 5) -> str:
    """The report's HTML text for the study in ``spec`` (which must exist)."""
    study = open_study(spec, create=False, same_file=True)
    metric = spec.objective.metric
    figures = [
        plots.history(study, metric),
        plots.importance(study),
        plots.memory(study),
        plots.pareto(study, "p99_ttft_ms"),
        plots.pareto(study, "p99_itl_ms"),
        plots.slices(study, metric),
    ]
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>autotune report: {_e(spec.name)}</title><style>{_CSS}</style></head><body>",
        f"<h1>autotune report: {_e(spec.name)}</h1>",
        f"<p class='sub'>{_e(metric)} ({_e(spec.objective.resolved_direction)}) · SGLang "
        f"{_e(spec.server.sglang_version)} · {spec.hardware.num_gpus} x {_e(spec.hardware.gpu)} "
        f"({_e(spec.hardware.interconnect)}) · generated {datetime.now(UTC):%Y-%m-%d %H:%M} UTC</p>",
        _outcomes_table(study),
        _lineage(study),
        "<h2>Top configurations against the baseline</h2>",
        _top_table(spec, study, top),
        _mix_table(spec, study),
    ]
    for i, fig in enumerate(figures):
        fig.update_layout(template="plotly_white", margin={"t": 60})
        title = fig.layout.title.text or ""
        parts.append(f"<div class='plot'><h2>{_e(title)}</h2>")
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0), config={"displaylogo": False},
                                 default_width="100%"))
        parts.append("</div>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(spec: StudySpec, path: str | Path, *, top: int = 5) -> Path:
    """Write the report to ``path`` atomically; return the path. The path is checked before the
    report is built (:func:`autotune.results.output.check_output_path`)."""
    out = check_output_path(spec, path)
    data = build_report(spec, top=top).encode("utf-8")
    write_atomic(out, lambda f: f.write(data))
    log.info("report written to %s (%.1f MiB)", out, len(data) / 2**20)
    return out


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _outcomes_table(study: optuna.Study) -> str:
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        label = _trials.outcome(t)
        counts[label] = counts.get(label, 0) + 1
    if not counts:
        return "<p>No trials yet.</p>"
    cells = "".join(
        f"<tr><td><span style='color:{plots.outcome_colour(k)}'>&#9679;</span> {_e(k)}</td>"
        f"<td class='num'>{v}</td></tr>"
        for k, v in sorted(counts.items(), key=lambda kv: (kv[0] != "complete", -kv[1]))
    )
    cal = study.user_attrs.get(attrs.CALIBRATION) or {}
    cal_line = ""
    if cal:
        cal_line = (f"<p>Memory calibration: P = {_e(cal.get('p_gib'))} GiB, A = {_e(cal.get('a_gib'))} GiB, "
                    f"KV tokens {_e(cal.get('kv_tokens'))} (from {_e(cal.get('source'))}).</p>")
    return f"<h2>Outcomes</h2><table><tr><th>outcome</th><th>trials</th></tr>{cells}</table>{cal_line}"


def _lineage(study: optuna.Study) -> str:
    """Warm start: the earlier studies this one built on, what each carried and why (empty for a cold study)."""
    lin = lineage(study)
    if not lin:
        return ""
    items = ""
    for s, line in zip(lin, lineage_lines(lin), strict=True):
        why = "".join(f"<li>{_e(d['what'])}: {'carried' if d['carried'] else 'not carried'} ({_e(d['reason'])})</li>"
                      for d in s.get("decisions") or [])
        notes = "".join(f"<li>{_e(n)}</li>" for n in s.get("notes") or [])
        items += f"<li>{_e(line)}<ul>{why}{notes}</ul></li>"
    carried = [t.number for t in study.get_trials(deepcopy=False) if t.user_attrs.get(attrs.WARM_FROM)]
    tail = f"<p>Trials {_e(', '.join(map(str, carried)))} ran configurations carried from them.</p>" if carried else ""
    return f"<h2>Built on (warm start)</h2><ul>{items}</ul>{tail}"


def _mix_table(spec: StudySpec, study: optuna.Study) -> str:
    """A workload mix: each workload's figures on the best trial (empty for one workload)."""
    from autotune.results.summary import MIX_FIGURES, best_trial, mix_figures

    top = best_trial(study)
    rows = mix_figures(spec, top) if top is not None else None
    if not rows:
        return ""
    head = "".join(f"<th>{_e(k)}</th>" for k in ("workload", "weight", "point", spec.objective.metric, "SLO",
                                                  *MIX_FIGURES))
    body = ""
    for w in rows:
        slo = "" if w["slo_met"] is None else ("met " if w["slo_met"] else "MISSED ") + _e(w["slo"])
        figs = "".join(f"<td class='num'>{_fmt(w['figures'].get(k))}</td>" for k in MIX_FIGURES)
        body += (f"<tr><td>{_e(w['name'])}</td><td class='num'>{w['weight']:g}</td><td>{_e(w['point'])}</td>"
                 f"<td class='num'>{w['value']:.4g}</td><td>{slo}</td>{figs}</tr>")
    return (f"<h2>Workload mix: each workload on the best trial ({top.number if top else ''})</h2>"
            f"<table><tr>{head}</tr>{body}</table>")


def _fmt(v: Any) -> str:
    return "" if v is None else _e(f"{v:.4g}")


def _launch_command(spec: StudySpec, t: FrozenTrial) -> str:
    """The runnable launch line for this trial's settings, its env prefix included, as ``best`` shows it;
    the launched line as a fallback."""
    try:
        return launch_shell(spec, t)
    except Exception as exc:  # noqa: BLE001 - the report must still render; say what was used
        log.info("trial %d: no SGLang command from its params (%s); using the launched one", t.number, exc)
        return redact_text(str(t.user_attrs.get(attrs.SHELL) or " ".join(t.user_attrs.get(attrs.COMMAND) or [])))


def _top_table(spec: StudySpec, study: optuna.Study, top: int) -> str:
    from autotune.study.phases import ranked

    # Search trials only (a confirmed one shows its re-runs' median, the value and gain `best` shows);
    # with an SLO, those that meet it first.
    done = ranked(study, feasible_only=False)
    if not done:
        return "<p>No completed trial yet.</p>"
    met = [t for t in done if t.user_attrs.get(attrs.SLO_MET) is not False]
    done = met + [t for t in done if t not in met]
    pick = recommended_trial(spec, study)  # `best`'s pick first (noise-aware, ties settled), then by value
    if pick is not None:
        done = sorted(done, key=lambda t: t.number != pick.number)  # stable: the rest keep their order
    base = baseline_trial(study)
    shown = done[:top]
    if base is not None and base not in shown:
        shown.append(base)
    shown += [t for t in done if t.user_attrs.get(attrs.REFERENCE) and t not in shown]
    rows = []
    for rank, t in enumerate(shown, 1):
        g = gain_over_baseline(study, t, base)  # confirmed medians where re-run: the figure `best` shows
        gain = "" if g is None else f"<span class='{'gain' if g >= 0 else 'neg'}'>{g:+.2f} %</span>"
        label = f"#{rank}" if rank <= top else ""
        if t.user_attrs.get(attrs.BASELINE):
            label = f"{label} baseline (SGLang defaults)".strip()
        if t.user_attrs.get(attrs.REFERENCE):
            label = f"{label} reference: {t.user_attrs[attrs.REFERENCE]}".strip()
        if t.user_attrs.get(attrs.WARM_FROM):
            label = f"{label} from {t.user_attrs[attrs.WARM_FROM]}".strip()
        p99 = t.user_attrs.get("p99_ttft_ms")
        rows.append(
            f"<tr><td>{_e(label)}</td><td class='num'>{t.number}</td><td class='num'>{shown_value(study, t):.2f}</td>"
            f"<td class='num'>{gain}</td><td class='num'>{'' if p99 is None else f'{p99:.1f}'}</td>"
            f"<td>{_e(', '.join(f'{k}={v}' for k, v in sorted(ran_params(t).items())))}</td>"
            f"<td><code>{_e(_launch_command(spec, t))}</code></td></tr>"
        )
    head = ("<tr><th></th><th>trial</th><th>value</th><th>gain vs baseline</th><th>p99 TTFT ms</th>"
            "<th>params</th><th>launch command</th></tr>")
    return f"<table class='top'>{head}{''.join(rows)}</table>"
