"""Progress observers: plain lines off a terminal, a rich live view on one."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

from support.finished_study import replay_progress

from autotune.results.progress import Tracker, fmt_duration, make_progress
from autotune.study.storage.opening import open_study


def test_plain_lines_carry_counts_best_and_eta(finished_spec, caplog):
    study = open_study(finished_spec, create=False)
    n = len(study.trials)
    best = max(t.value for t in study.trials if t.value is not None)
    caplog.set_level(logging.INFO, logger="autotune.progress")
    replay_progress(make_progress(False), study, n + 4)
    lines = [r.getMessage() for r in caplog.records if r.name == "autotune.progress"]
    ends = [line for line in lines if " | " in line and line.startswith("trial ")]
    assert len(ends) == n
    assert any("predicted_oom" in line for line in ends) and any("graph_capture_oom" in line for line in ends)
    last = ends[-1]
    assert f"{n}/{n + 4} finished" in last and f"best {best:.2f}" in last
    assert "running 0" in last and "ETA ?" not in last  # the study's trial durations give an ETA


def test_enabled_without_a_terminal_is_plain(finished_spec, caplog):
    # pytest captures stderr: not a terminal, so the same plain lines
    caplog.set_level(logging.INFO, logger="autotune.progress")
    study = open_study(finished_spec, create=False)
    replay_progress(make_progress(True), study, len(study.trials))
    assert any("finished" in r.getMessage() for r in caplog.records if r.name == "autotune.progress")


def test_live_view_renders_counts_and_best(finished_spec):
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=140, color_system=None)
    study = open_study(finished_spec, create=False)
    n = len(study.trials)
    replay_progress(make_progress(True, console=console), study, n)  # the last trial ends the view
    text = buf.getvalue()
    assert f"{n}/{n} finished" in text
    assert "complete" in text and "pruned 1" in text and "failed 2" in text and "best" in text


def test_eta_scales_with_what_is_left(finished_spec):
    study = open_study(finished_spec, create=False)
    n = len(study.trials)
    near, far = Tracker(), Tracker()
    near.start(study, n + 1)
    far.start(study, n + 10)
    assert 0 < near.snapshot()["eta_s"] < far.snapshot()["eta_s"]
    done = Tracker()
    done.start(study, n)
    assert done.snapshot()["eta_s"] == 0.0
    assert fmt_duration(3725) == "1h02m" and fmt_duration(None) == "?"


def test_stdout_and_stderr_pipes_do_not_break(finished_spec):
    """CI: both streams are pipes; enabled progress falls back to plain lines and exits 0."""
    script = textwrap.dedent(f"""
        import logging, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        logging.basicConfig(level=logging.INFO)
        from autotune.spec import load_study_spec
        from autotune.study.storage.opening import open_study
        from autotune.results.progress import make_progress
        from support.finished_study import replay_progress
        study = open_study(load_study_spec({finished_spec.source_path!r}), create=False)
        replay_progress(make_progress(True), study, len(study.trials))
        print("ok")
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "ok"
    assert "finished" in res.stderr and "\x1b[" not in res.stderr
