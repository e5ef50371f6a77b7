"""``autotune run`` against real SGLang on CPU (studies/real-cpu-tiny.yaml, made smaller), with a kill -9.

The first run is SIGKILLed while trial 0's real server is up; the orphaned tree
(launcher, scheduler, detokenizer) must not outlive it, and a second run resumes
and reaches the budget: every trial COMPLETE or with a named failure kind.
``best --json`` gives a command (with the env it needs) that real SGLang's parser
accepts, and no SGLang process of the study is left. Under the 0.5.9 venv too,
when it is built (CI builds both when it can; the 0.5.9 case fails in CI only if
``AUTOTUNE_REAL_SGLANG_VERSIONS`` names it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from support.leak_guard import SESSION_ENV
from support.real_sglang import need_real_sglang

from autotune.cli import main
from autotune.sglang.flags.installed import probe

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.real_sglang, pytest.mark.slow, pytest.mark.timeout(1200),
              pytest.mark.usefixtures("cli_signal_handlers")]

_REQUIRED = os.environ.get("AUTOTUNE_REAL_SGLANG_VERSIONS", "0.5.23").split(",")


def _study(tmp_path: Path, version: str, python: str) -> Path:
    data = yaml.safe_load((REPO / "studies" / "real-cpu-tiny.yaml").read_text())
    data["n_trials"] = 2
    data["sampler"] = {"kind": "grid", "seed": 0}
    data["server"].update(sglang_version=version, python=python,
                          model_path=str(REPO / "studies" / "models" / "tiny-llama-cpu"), startup_timeout_s=400)
    data["search_space"] = {"max_running_requests": {"choices": [8]}, "max_total_tokens": {"choices": [4096]}}
    data["workload"].update(num_prompts=16, output_len=32, concurrency=[8], warmup_requests=1)
    data["search"] = {"confirm_top": 0, "early_stopping": {"enabled": False}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _sglang_tree(root: int) -> list[psutil.Process]:
    out = []
    for p in psutil.Process(root).children(recursive=True):
        try:
            cmd = " ".join(p.cmdline()) + " " + p.name()
        except psutil.Error:
            continue
        if "sglang" in cmd:
            out.append(p)
    return out


def _sglang_started_since(t0: float) -> list[psutil.Process]:
    """This session's SGLang processes started after ``t0``: other users of the machine run SGLang too,
    so only a process carrying the suite's marker (tests/leak_guard.py) in its environment is ours."""
    out = []
    mark = os.environ[SESSION_ENV]
    for p in psutil.process_iter():
        try:
            cmd = " ".join(p.cmdline()) + " " + p.name()
            mine = ("sglang.launch_server" in cmd or "sglang::" in cmd) and p.create_time() >= t0 - 1
            if mine and p.environ().get(SESSION_ENV) == mark and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_real_study_survives_kill_9_and_reaches_its_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            version: str) -> None:
    started = time.time()
    if version not in _REQUIRED:
        from support.real_sglang import find_venv

        if find_venv(version)[0] is None:
            pytest.skip(f"SGLang {version} CPU venv not built (autotune sglang-env install --version {version} "
                        f"--device cpu); AUTOTUNE_REAL_SGLANG_VERSIONS={','.join(_REQUIRED)}")
    env = need_real_sglang(version)
    study = _study(tmp_path, version, str(env.python))
    log = (tmp_path / "run1.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "run", str(study), "--no-progress"],
                            stdout=log, stderr=log, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    victims: list[psutil.Process] = []
    try:
        server_log = tmp_path / "runs" / "real-cpu-tiny" / "trials" / "00000" / "server.log"
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            text = server_log.read_text(errors="replace") if server_log.exists() else ""
            if "fired up and ready to roll" in text:
                victims = _sglang_tree(proc.pid)
                break
            time.sleep(0.5)
        assert victims, "no real server came up: " + (tmp_path / "run1.log").read_text()[-3000:]
        names = " ".join(" ".join(p.cmdline()) for p in victims)
        assert "sglang::scheduler" in names and "sglang::detokenizer" in names, names
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    # The orphaned tree goes (its watchdog, or the next run's reaper): nothing of it may stay.
    _, alive = psutil.wait_procs(victims, timeout=60)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], [p.pid for p in alive]

    assert main(["run", str(study), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["status", str(study), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["budget_used"] >= 2, status
    assert status["states"]["COMPLETE"] >= 1, status
    assert set(status["failure_kinds"]) <= {"interrupted"}, status  # only the killed trial, by name
    assert status["calibration"] is None  # "avail mem" on CPU is host RAM: nothing learned from it

    assert main(["best", str(study), "--json"]) == 0
    best = json.loads(capsys.readouterr().out)
    assert best["env"] == {"SGLANG_USE_CPU_ENGINE": "1"}
    assert best["shell"].startswith("SGLANG_USE_CPU_ENGINE=1 ")
    cmd = best["command"]
    assert cmd[1:3] == ["-m", "sglang.launch_server"] and "--sleep-on-idle" in cmd and "--device" in cmd
    installed = probe(str(env.python))
    assert installed is not None
    assert installed.refusals([cmd[3:]]) == [None]
    assert not _sglang_started_since(started)
