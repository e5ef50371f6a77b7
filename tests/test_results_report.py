"""`autotune report`: one self-contained HTML file with the plots and the top table."""

from __future__ import annotations

import re

import optuna
import pytest
from support.browser import artifacts_dir, chromium, console_errors, needs_chromium
from support.finished_study import MIN_VIABLE_F, make_finished_study

from autotune.cli import main
from autotune.results import report_plots
from autotune.results.report import build_report


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    spec = make_finished_study(tmp)
    out = tmp / "report.html"
    assert main(["report", spec.source_path, "-o", str(out)]) == 0
    return spec, out, out.read_text()


def test_self_contained_with_every_plot_title(report):
    _, _, text = report
    assert not re.search(r"<script[^>]+src\s*=\s*['\"]?(https?:)?//", text), "a script loads from the network"
    assert not re.search(r"<link[^>]+href\s*=\s*['\"]?https?://", text)
    assert text.count("Plotly.newPlot") == len(report_plots.TITLES)
    # plotly.js inlined exactly once
    assert text.count("* plotly.js v") == 1
    for title in report_plots.TITLES.values():
        assert title in text, title


def test_top_table_has_gain_and_sglang_commands(report):
    spec, _, text = report
    table = text[text.index("<table class='top'>"):]
    table = table[:table.index("</table>")]
    assert "baseline (SGLang defaults)" in table
    assert re.search(r"[+-]\d+\.\d\d %", table)
    assert "sglang.launch_server" in table and "--mem-fraction-static" in table
    assert "autotune.sim" not in table  # the command a person runs, not the simulated one
    from autotune.results.summary import baseline_trial, best_trial
    from autotune.study.storage.opening import open_study

    study = open_study(spec, create=False)
    best, base = best_trial(study), baseline_trial(study)
    first = table.split("<tr>")[2]  # [0] is empty, [1] the header
    assert f">{best.number}<" in first and f"{best.value:.2f}" in first
    assert f"{(best.value - base.value) / base.value * 100:+.2f} %" in first


def test_memory_plot_draws_outcomes_and_predicted_boundary(finished_spec):
    from autotune.study.storage.opening import open_study

    fig = report_plots.memory(open_study(finished_spec, create=False))
    names = {tr.name for tr in fig.data}
    assert {"complete", "predicted_oom", "kv_oom", "graph_capture_oom"} <= names
    xs = [s["x0"] for s in fig.layout.shapes]
    assert any(abs(x - MIN_VIABLE_F) < 1e-9 for x in xs)


def test_pareto_front_is_non_dominated():
    pts = [(100, 10), (200, 30), (150, 5), (300, 25), (250, 40), (120, 12)]
    front = report_plots.pareto_front(pts)
    assert front == [(100, 10), (120, 12), (200, 30), (250, 40)]
    for x, y in front:
        assert not any(ox <= x and oy >= y and (ox, oy) != (x, y) for ox, oy in pts)


def test_small_study_still_renders(tmp_path):
    """One completed trial: importance and slices say why they are empty instead of raising."""
    spec = make_finished_study(tmp_path, n_complete=1)
    text = build_report(spec)
    assert "needs at least 3 completed trials" in text
    for title in report_plots.TITLES.values():
        assert title in text


def test_bad_top_is_exit_2(finished_spec, tmp_path):
    assert main(["report", finished_spec.source_path, "-o", str(tmp_path / "r.html"), "--top", "0"]) == 2


@pytest.mark.browser
@needs_chromium
def test_report_renders_in_chromium_without_script_errors(report, tmp_path):
    _, path, _ = report
    shot = artifacts_dir(tmp_path) / "report.png"
    res = chromium(path.as_uri(), tmp_path, dump_dom=True, window="1280,4000")
    assert res.returncode == 0, res.stderr[-2000:]
    assert console_errors(res.stderr) == []
    dom = res.stdout
    assert dom.count('class="plot-container') >= len(report_plots.TITLES), "plots did not render"
    assert "main-svg" in dom
    res = chromium(path.as_uri(), tmp_path, screenshot=shot, window="1280,4000")
    assert shot.is_file() and shot.stat().st_size > 10_000
    print(f"report screenshot kept at {shot}")


def test_report_shows_the_gain_and_the_command_best_shows(tmp_path, capsys):
    """A confirmed study (medians differ from first runs) with an env var: `report`'s top row carries
    `best`'s gain and `best`'s runnable line, env prefix included."""
    import html

    from autotune.results.summary import baseline_trial, best
    from autotune.spec import load_study_spec
    from autotune.study import attrs
    from autotune.study.phases import ranked

    spec = make_finished_study(tmp_path)
    path = tmp_path / "study.yaml"
    path.write_text(path.read_text().replace("tp_size: 8}", "tp_size: 8, env: {SGLANG_ENABLE_TORCH_COMPILE: '1'}}"))
    spec = load_study_spec(path)
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    top, base = ranked(study)[0], baseline_trial(study)
    study.set_user_attr(attrs.CONFIRMATION, {
        str(t.number): {"values": [t.value, t.value * k], "median": t.value * k, "min": t.value, "max": t.value * k,
                        "spread_pct": round((k - 1) * 100, 2)}
        for t, k in ((top, 1.03), (base, 1.01))})
    shown = best(spec)
    assert shown["number"] == top.number and shown["gain_pct"] is not None
    first_run_gain = (top.value - base.value) / base.value * 100
    assert f"{shown['gain_pct']:+.2f}" != f"{first_run_gain:+.2f}"  # the two figures differ here

    out = tmp_path / "r.html"
    assert main(["report", str(path), "-o", str(out)]) == 0
    text = out.read_text()
    first = text[text.index("<table class='top'>"):].split("<tr>")[2]
    assert f">{top.number}<" in first
    assert f"{shown['gain_pct']:+.2f} %" in first and f"{shown['value']:.2f}" in first
    assert shown["shell"].startswith("SGLANG_ENABLE_TORCH_COMPILE=1 ")
    assert html.escape(shown["shell"]) in first

    assert main(["best", str(path)]) == 0
    said = capsys.readouterr().out
    assert f"gain {shown['gain_pct']:+.2f} %" in said and f"  {shown['shell']}\n" in said


def test_report_shows_the_trial_best_recommends_first(tmp_path):
    """The confirmation re-runs put another trial ahead of the best single run: `report`'s first row is
    the trial `best` recommends, not the luckiest first run."""
    from autotune.results.summary import best
    from autotune.study import attrs
    from autotune.study.phases import ranked

    spec = make_finished_study(tmp_path)
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    lucky, second = ranked(study)[:2]
    study.set_user_attr(attrs.CONFIRMATION, {
        str(lucky.number): {"values": [lucky.value, lucky.value * 0.8], "median": lucky.value * 0.8,
                            "min": lucky.value * 0.8, "max": lucky.value, "spread_pct": 25.0},
        str(second.number): {"values": [second.value, second.value], "median": second.value, "min": second.value,
                             "max": second.value, "spread_pct": 0.0}})
    shown = best(spec)
    assert shown["number"] != lucky.number  # the luckiest first run is not the pick
    out = tmp_path / "r.html"
    assert main(["report", spec.source_path, "-o", str(out)]) == 0
    text = out.read_text()
    rows = text[text.index("<table class='top'>"):].split("<tr>")
    assert f"<td class='num'>{shown['number']}</td>" in rows[2] and "#1" in rows[2]
    assert f"<td class='num'>{lucky.number}</td>" in rows[3]  # then by value: the lucky run second
