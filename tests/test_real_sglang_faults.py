"""Faults on real SGLang's process tree on CPU: one ``autotune run`` that takes two.

The study (studies/real-cpu-tiny.yaml made small: 2 trials, a 20 s between-tokens limit)
runs as a subprocess; the test walks the run's own process tree (psutil; never the
machine's) and injects, as trials come under load: the first real server's
``sglang::scheduler`` is SIGKILLed, then the next real server's whole tree is stopped
(SIGSTOP, a hung server). Each failure must carry its real kind and evidence: ``crashed``
with SGLang's own "Subprocess scheduler_0 (pid=N) crashed with exit code -9", verbatim from
the trial's server.log (the trial runs once more: the study goes on), ``load_failed`` with
the stall; the run ends by itself (exit 0, budget reached) and no process of any tree is
left, by title or by the registry. A launch that fails at startup (``kv_oom``) is
tests/test_real_sglang_failures.py's; the driver's kill -9 with a plain re-run is
tests/test_real_sglang_study.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from support.real_sglang import need_real_sglang

from autotune.cli import main
from autotune.launch import ProcessRegistry
from autotune.launch.tree import command_line, is_sglang
from autotune.spec import load_study_spec
from autotune.study.storage.opening import open_study
from autotune.testing.real_cpu_study import small_study

pytestmark = [pytest.mark.real_sglang, pytest.mark.slow, pytest.mark.timeout(1800)]

STALL_S = 20


def _alive(procs: dict[int, psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs.values():
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def test_real_tree_faults_are_classified_and_leave_nothing(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    env = need_real_sglang("0.5.23")
    study = small_study(tmp_path, str(env.python), name="real-faults", stall_s=STALL_S)
    out = (tmp_path / "run.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "run", str(study), "--no-progress"],
                            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen: dict[int, psutil.Process] = {}  # every SGLang process of this run, as walked from the driver
    done: dict[str, int] = {}  # fault -> trial number it hit
    try:
        deadline = time.monotonic() + 1700
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                tree = [p for p in psutil.Process(proc.pid).children(recursive=True) if is_sglang(p)]
            except psutil.Error:
                tree = []
            seen.update((p.pid, p) for p in tree)
            for d in sorted((tmp_path / "run" / "trials").glob("0*")):
                n = int(d.name)
                log = d / "server.log"
                text = log.read_text(errors="replace") if log.exists() else ""
                if n in done.values() or "Decode batch" not in text.partition("fired up")[2]:
                    continue
                if "scheduler" not in done:
                    victims = [p for p in tree if command_line(p).startswith("sglang::scheduler")]
                    assert victims, [command_line(p) for p in tree]
                    for p in victims:
                        p.kill()
                    done["scheduler"] = n
                elif "sigstop" not in done:
                    for p in tree:
                        p.suspend()
                    done["sigstop"] = n
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.wait(timeout=60) == 0, (tmp_path / "run.log").read_text()[-4000:]
    assert set(done) == {"scheduler", "sigstop"}, done
    _, alive = psutil.wait_procs(list(seen.values()), timeout=30)
    assert not _alive({p.pid: p for p in alive}), [command_line(p) for p in alive]
    assert not [p for p in ProcessRegistry(tmp_path / "run").alive_processes() if is_sglang(p)]

    assert main(["status", str(study), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["budget_used"] >= 2, status
    stored = open_study(load_study_spec(study), create=False).get_trials(deepcopy=False)
    trials = {t.number: {**t.user_attrs, "state": t.state.name} for t in stored}

    def log_of(n: int) -> str:
        return (tmp_path / "run" / "trials" / f"{n:05d}" / "server.log").read_text(errors="replace")

    assert sum(t["state"] == "COMPLETE" for t in trials.values()) >= 1, trials
    sched = trials[done["scheduler"]]
    assert sched["failure_kind"] == "crashed", sched
    assert "Subprocess scheduler_0" in sched["evidence"] and "exit code -9" in sched["evidence"], sched
    assert sched["evidence"] in log_of(done["scheduler"])  # the real log's own line
    hung = trials[done["sigstop"]]
    assert hung["failure_kind"] == "load_failed", hung  # the stall, in the load point or its warm-up
    assert "server stalled" in hung["evidence"] or f"no token for {STALL_S} s" in hung["evidence"], hung
    if sched.get("retry_of") is None:  # a node's fault: the candidate runs once more, and the study goes on
        assert any(t.get("retry_of") == done["scheduler"] for t in trials.values()), trials
    else:  # already that once more (its first launch met a fault of its own, a port taken): not a third time
        assert max(trials) > done["scheduler"], trials

