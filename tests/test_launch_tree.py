"""A scheduler that dies while its server serves: the launcher may live on (and answer /health), the
streams stall; the trial must fail at once as ``crashed`` with the evidence, and nothing of the tree stay.

The simulated server behaves like SGLang without its subprocess watchdog (its stand-in
scheduler is titled ``sglang::scheduler_TP0``; when it dies the HTTP front end lives on and
every stream goes silent), so these run without a real SGLang; tests/test_real_sglang_faults.py
runs the same faults on the real tree.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import requests
import urllib3

from autotune.launch import free_port
from autotune.launch.failures import classify
from autotune.launch.tree import tree_members, zombie_status
from autotune.objective import Objective
from autotune.outcome import FailureKind
from autotune.sglang.knobs.config import ServerConfig
from autotune.spec import SimSpec, WorkloadSpec
from autotune.study.rerun import run_once_more
from autotune.trial import TrialRequest
from autotune.trial.live import run_trial_body

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "studies" / "models" / "qwen3-32b-class"


def _scheduler_of(root: int) -> psutil.Process | None:
    for p in psutil.Process(root).children(recursive=True):  # this test's own tree only
        try:
            if p.cmdline()[:1] == ["sglang::scheduler_TP0"]:
                return p
        except psutil.Error:
            continue
    return None


def test_sim_front_end_outlives_its_scheduler_and_streams_stall(tmp_path: Path) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "autotune.sim", "--model-path", str(MODEL), "--sim-gpu", "h100", "--port",
            str(port), "--sim-time-scale", "50"]
    log = tmp_path / "sim.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while "fired up and ready to roll" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.05)
        members = tree_members(proc.pid)
        assert [m.title for m in members] == ["sglang::scheduler_TP0"]
        members[0].proc.kill()
        deadline = time.monotonic() + 10
        while zombie_status(members[0].proc.pid) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert zombie_status(members[0].proc.pid) == "killed by SIGKILL"  # left unreaped, as SGLang does
        url = f"http://127.0.0.1:{port}"
        time.sleep(0.5)  # the front end's poll (0.2 s) notices the death
        assert requests.get(url + "/health", timeout=5).status_code == 200  # the launcher lives on
        body = {"input_ids": [11, 12, 13], "sampling_params": {"max_new_tokens": 8}, "stream": True}
        with pytest.raises((requests.ReadTimeout, urllib3.exceptions.ReadTimeoutError)):  # no token ever comes
            requests.post(url + "/generate", json=body, timeout=(2, 2), stream=True).raw.read(1)
        assert proc.poll() is None
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _request(tmp_path: Path) -> TrialRequest:
    return TrialRequest(
        study_name="tree", trial_number=0, config=ServerConfig(model_path=str(MODEL)), backend="sim",
        sglang_version="0.5.9", gpu="h100", num_gpus=1, interconnect="pcie",
        workload=WorkloadSpec(input_len=64, output_len=2000, num_prompts=16, concurrency=[8], warmup_requests=1,
                              flush_cache=False),  # the default 60 s between-tokens limit: never reached here
        objective=Objective(metric="output_throughput"), artifact_dir=str(tmp_path / "trial"),
        run_dir=str(tmp_path / "run"), startup_timeout_s=60,
        # time scale 4: the startup's ~8 modelled s take 2 s (at 1 they took 8 of the test's 17 s); the warm-up
        # request's 2,000 tokens still stream for ~13 s, so the kill 3 s after "fired up" lands mid-stream as before
        sim=SimSpec(time_scale=4.0, seed=0),
    )


def test_a_dead_scheduler_under_load_fails_the_trial_as_crashed_and_leaves_nothing(tmp_path: Path) -> None:
    killed: list[psutil.Process] = []
    tree: list[psutil.Process] = []

    def kill_scheduler_under_load() -> None:
        log = tmp_path / "trial" / "server.log"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace") if log.exists() else ""
            if "fired up" in text:
                time.sleep(3.0)  # into the load point (the warm-up request streams for ~13 s, then the load's)
                sched = _scheduler_of(os.getpid())
                if sched is not None:
                    tree.extend(sched.parents()[:1] + [sched])
                    sched.kill()
                    killed.append(sched)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_scheduler_under_load, daemon=True)
    killer.start()
    result = run_trial_body(_request(tmp_path))
    killer.join(timeout=10)
    assert killed, "the scheduler was never seen under load"
    assert result.state == "failed"
    assert result.failure_kind == FailureKind.CRASHED, (result.failure_kind, result.evidence)
    assert "sglang::scheduler_TP0" in result.evidence and "killed by SIGKILL" in result.evidence, result.evidence
    assert "stalled" not in result.evidence  # the tree watch, not the load generator's timeout, ended it
    assert run_once_more(result.failure_kind, result.evidence, {})  # killed from outside: once more
    _, alive = psutil.wait_procs(tree, timeout=10)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def test_sglangs_own_watchdog_line_is_the_evidence() -> None:
    lines = [
        "[2026-12-01 22:30:01] Decode batch, #running-req: 8, #token: 512",
        "[2026-12-01 22:30:02] Subprocess scheduler_0 (pid=4242) crashed with exit code -9. "
        "Triggering SIGQUIT for cleanup...",
        "[2026-12-01 22:30:02] SIGQUIT received. signum=3, frame=None. It usually means one child failed.",
        "RuntimeError: something the teardown printed",
    ]
    kind, evidence = classify(lines, -9)
    assert kind is FailureKind.CRASHED
    assert evidence.startswith("[2026-12-01 22:30:02] Subprocess scheduler_0 (pid=4242) crashed with exit code -9")
    assert run_once_more(kind, evidence, {})
    assert not run_once_more(kind, "Subprocess detokenizer (pid=1) crashed with exit code 1.", {})


def test_zombie_status_reads_how_an_unreaped_child_ended() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.02)
        assert zombie_status(child.pid) == "killed by SIGKILL"
    finally:
        child.wait()
    assert zombie_status(child.pid) is None  # reaped: the status is gone
