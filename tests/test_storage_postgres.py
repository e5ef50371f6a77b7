"""autotune on a real PostgreSQL server (started by the suite: tests/pg_server.py).

A study run, resumed after kill -9, shown in the dashboard; two studies driven at once
on one database; the database restarted mid-study (the driver rides it out: no trial
lost or duplicated); the database gone for good (a clean stop, no server left).
Skipped with the reason when PostgreSQL is not installed, except under CI=true.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import optuna
import psutil
import pytest
import yaml

from autotune.spec import load_study_spec
from autotune.study.driver import run_study
from autotune.study.execution.offline import OfflineExecutor
from autotune.study.observer import budget_used
from autotune.study.storage.retry import StorageUnavailable
from autotune.testing.pg_server import PgServer

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "studies" / "models"


def _study(tmp_path: Path, url: str, name: str = "pg", **over: object) -> Path:
    data: dict = {
        "name": name,
        "storage": url,
        "n_trials": 8,
        "sampler": {"kind": "tpe", "seed": 0, "n_startup_trials": 4},
        "executor": {"kind": "inline"},
        "server": {"backend": "sim", "sglang_version": "0.5.9", "model_path": str(MODELS / "kimi-k2-class"),
                   "tp_size": 8, "startup_timeout_s": 60, "sim": {"time_scale": 50, "seed": 0}},
        "hardware": {"gpu": "rtx-pro-6000", "num_gpus": 8, "interconnect": "pcie"},
        "search_space": {"mem_fraction_static": {"low": 0.55, "high": 0.90, "step": 0.05},
                         "cuda_graph_max_bs": {"choices": [64, 128, 256]}},
        "workload": {"input_len": 128, "output_len": 32, "num_prompts": 48, "concurrency": [16],
                     "warmup_requests": 2},
        "objective": {"metric": "output_throughput"},
        "search": {"confirm_top": 0},
        **over,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _no_duplicates(study: optuna.Study) -> None:
    """Every trial number once; no parameters run twice unless a retry or confirmation says so."""
    numbers = [t.number for t in study.trials]
    assert numbers == list(range(len(numbers)))
    firsts = Counter(json.dumps(t.params, sort_keys=True) for t in study.trials
                     if t.state.name == "COMPLETE" and t.user_attrs.get("retry_of") is None)
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert sum(firsts.values()) == len([t for t in study.trials if t.state.name == "COMPLETE"
                                        and t.user_attrs.get("retry_of") is None])


def _servers(root: int) -> list[psutil.Process]:
    out = []
    for p in psutil.Process(root).children(recursive=True):
        try:
            if "autotune.sim" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            continue
    return out


def _all_sim_servers(run_dir: Path) -> list[psutil.Process]:
    """Simulated servers anywhere on the machine whose command line names this run's files."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info.get("cmdline") or [])
        if "autotune.sim" in cmd and str(run_dir) in cmd:
            out.append(p)
    return out


def test_offline_study_on_postgres_then_status_best_dashboard(pg: PgServer, tmp_path: Path) -> None:
    url = pg.createdb("offline")
    spec = load_study_spec(_study(tmp_path, url, n_trials=10))
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name="pg", storage=url)
    assert budget_used(study) == 10
    _no_duplicates(study)

    from autotune.cli import main

    assert main(["status", str(spec.source_path), "--json"]) == 0
    assert main(["best", str(spec.source_path), "--json"]) == 0

    from autotune.results.dashboard import serve_in_thread, url_of

    httpd, thread = serve_in_thread(spec, "127.0.0.1", 0)
    try:
        base = url_of(httpd).removesuffix("/dashboard/")
        with urllib.request.urlopen(base + "/api/studies", timeout=30) as r:
            summaries = json.loads(r.read())["study_summaries"]
        sid = next(s["study_id"] for s in summaries if s["study_name"] == "pg")
        with urllib.request.urlopen(f"{base}/api/studies/{sid}", timeout=30) as r:
            detail = json.loads(r.read())
        assert len(detail["trials"]) == len(study.trials)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def test_two_studies_at_once_on_one_database(pg: PgServer, tmp_path: Path) -> None:
    url = pg.createdb("shared")
    paths = [_study(tmp_path, url, name=f"twin{i}", n_trials=3) for i in range(2)]
    logs = [(tmp_path / f"twin{i}.log").open("w") for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-m", "autotune", "run", str(p), "--no-progress"],
                              stdout=log, stderr=log) for p, log in zip(paths, logs, strict=True)]
    try:
        for p in procs:
            assert p.wait(timeout=240) == 0, [(tmp_path / f"twin{i}.log").read_text()[-1500:] for i in range(2)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for i in range(2):
        study = optuna.load_study(study_name=f"twin{i}", storage=url)
        assert budget_used(study) == 3
        _no_duplicates(study)


def test_kill_9_then_resume_on_postgres(pg: PgServer, tmp_path: Path) -> None:
    url = pg.createdb("resume")
    path = _study(tmp_path, url, n_trials=4,
                  workload={"input_len": 128, "output_len": 256, "num_prompts": 400, "concurrency": [8],
                            "warmup_requests": 1})
    log = (tmp_path / "run.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "run", str(path), "--no-progress"],
                            stdout=log, stderr=log)
    trials_dir = tmp_path / "runs" / "pg" / "trials"
    victims: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            victims = _servers(proc.pid)
            later = [d for d in trials_dir.glob("0*") if d.name != "00000" and (d / "server.log").exists()]
            if later and victims:
                break
            time.sleep(0.2)
        assert victims, (tmp_path / "run.log").read_text()[-2000:]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    _, alive = psutil.wait_procs(victims, timeout=15)
    assert not alive
    done = subprocess.run([sys.executable, "-m", "autotune", "run", str(path), "--no-progress"],
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    study = optuna.load_study(study_name="pg", storage=url)
    assert budget_used(study) == 4
    interrupted = [t for t in study.trials if t.user_attrs.get("failure_kind") == "interrupted"]
    assert len(interrupted) == 1
    assert [t.params for t in study.trials if t.user_attrs.get("retry_of") == interrupted[0].number] == \
        [interrupted[0].params]
    _no_duplicates(study)


def test_database_restarted_mid_study_loses_and_repeats_nothing(pg: PgServer, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    url = pg.createdb("restart")
    spec = load_study_spec(_study(tmp_path, url, n_trials=10))
    from autotune.trial.offline import evaluate

    outage = threading.Event()
    calls = []

    def evaluate_with_outage(req):  # type: ignore[no-untyped-def]
        result = evaluate(req)
        calls.append(req.trial_number)
        if len(calls) == 3 and not outage.is_set():
            outage.set()
            pg.stop("fast")  # the driver's next write finds the database gone
            threading.Timer(3.0, pg.start).start()
        return result

    run_study(spec, executor=OfflineExecutor(evaluate_with_outage))
    assert outage.is_set() and pg.running()
    assert "storage unreachable" in caplog.text  # the driver did meet the outage, and rode it out
    study = optuna.load_study(study_name="pg", storage=url)
    assert budget_used(study) == 10
    assert all(t.state.name != "FAIL" for t in study.trials)  # nothing lost to the outage
    _no_duplicates(study)


def test_database_gone_for_good_stops_cleanly(pg: PgServer, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    url = pg.createdb("gone")
    spec = load_study_spec(_study(tmp_path, url, n_trials=10))
    monkeypatch.setenv("AUTOTUNE_STORAGE_RETRY_S", "2")
    from autotune.trial.offline import evaluate

    calls = []

    def evaluate_then_outage(req):  # type: ignore[no-untyped-def]
        result = evaluate(req)
        calls.append(req.trial_number)
        if len(calls) == 3:
            pg.stop("fast")
        return result

    try:
        with pytest.raises(StorageUnavailable, match="unreachable for"):
            run_study(spec, executor=OfflineExecutor(evaluate_then_outage))
    finally:
        pg.start()
    study = optuna.load_study(study_name="pg", storage=url)
    # Trials told before the outage are kept; the one in hand is RUNNING and re-runs on resume.
    in_hand = study.trials[calls[-1]]
    assert in_hand.state.name == "RUNNING"
    assert budget_used(study) == in_hand.number
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name="pg", storage=url)
    assert budget_used(study) == 10
    _no_duplicates(study)


def test_database_gone_for_good_under_a_live_server_tears_it_down(pg: PgServer, tmp_path: Path) -> None:
    """The real CLI with a simulated server in flight: storage stops, the run exits 1 with one
    line, and no server of this run is left."""
    url = pg.createdb("teardown")
    path = _study(tmp_path, url, n_trials=3,
                  workload={"input_len": 128, "output_len": 256, "num_prompts": 400, "concurrency": [8],
                            "warmup_requests": 1})
    log = (tmp_path / "run.log").open("w")
    env = {**os.environ, "AUTOTUNE_STORAGE_RETRY_S": "3"}
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "run", str(path), "--no-progress"],
                            stdout=log, stderr=log, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _servers(proc.pid):
            time.sleep(0.2)
        assert _servers(proc.pid), (tmp_path / "run.log").read_text()[-2000:]
        pg.stop("fast")
        rc = proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
        pg.start()
    text = (tmp_path / "run.log").read_text()
    assert rc == 1, text[-2000:]
    assert "error: storage: unreachable for" in text
    assert not _all_sim_servers(tmp_path / "runs"), text[-1000:]


def test_a_second_driver_of_one_study_is_refused_whatever_its_run_directory(pg: PgServer, tmp_path: Path) -> None:
    """Two study files naming one study on one database, in two directories (two nodes sharing the
    database, or a copy of the study file): the second run must not start. Its resume would mark the
    first run's live trials interrupted and queue them again."""
    url = pg.createdb("twodrivers")
    here, there = tmp_path / "a", tmp_path / "b"
    here.mkdir()
    there.mkdir()
    slow = {"input_len": 128, "output_len": 256, "num_prompts": 400, "concurrency": [8], "warmup_requests": 1}
    first_path = _study(here, url, n_trials=2, workload=slow)
    second_path = _study(there, url, n_trials=2, workload=slow)
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen([sys.executable, "-m", "autotune", "run", str(first_path), "--no-progress"],
                             stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _servers(first.pid):
            time.sleep(0.2)
        assert _servers(first.pid), (tmp_path / "first.log").read_text()[-2000:]
        second = subprocess.run([sys.executable, "-m", "autotune", "run", str(second_path), "--no-progress"],
                                capture_output=True, text=True, timeout=120, check=False)
        assert second.returncode == 2, second.stderr[-2000:]
        lines = [ln for ln in second.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "already being run" in lines[0] and "'pg'" in lines[0], second.stderr
        assert "Traceback" not in second.stderr
        assert not (there / "runs").exists()  # refused before it created anything
        assert first.wait(timeout=240) == 0, (tmp_path / "first.log").read_text()[-2000:]
    finally:
        if first.poll() is None:
            first.kill()
    study = optuna.load_study(study_name="pg", storage=url)
    assert not [t for t in study.trials if t.user_attrs.get("failure_kind") == "interrupted"]
    assert budget_used(study) == 2
    _no_duplicates(study)
    # the first run's lock went with it: the study resumes at once from the other directory
    again = subprocess.run([sys.executable, "-m", "autotune", "run", str(second_path), "--no-progress"],
                           capture_output=True, text=True, timeout=240, check=False)
    assert again.returncode == 0, again.stderr[-2000:]


def test_the_study_lock_is_per_study_and_taken_again_after_the_database_restarts(pg: PgServer) -> None:
    from autotune.errors import ConfigError
    from autotune.study.storage.lock import AdvisoryLock, study_lock

    url = pg.createdb("locks")
    assert isinstance(study_lock(url, "s"), AdvisoryLock)
    with AdvisoryLock(url, "s", check_s=0.2) as held:
        with pytest.raises(ConfigError, match=r"study 's' is already being run by another driver \(autotune driver "):
            AdvisoryLock(url, "s").__enter__()
        with AdvisoryLock(url, "t"):  # another study on the same database
            pass
        pg.restart()  # the session and its lock end with the server
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with AdvisoryLock(url, "s"):
                    pass
            except ConfigError:  # taken again by the watcher
                break
            time.sleep(0.2)
        else:
            pytest.fail("the lock was not taken again after the restart")
        assert held._conn is not None
    with AdvisoryLock(url, "s"):  # released on exit
        pass
