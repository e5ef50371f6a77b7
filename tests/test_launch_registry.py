"""ProcessRegistry: launches are recorded, leftovers are reaped, recycled pids are never touched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from support.launch_fakes import alive, fake_argv, grandchild_pids, kill_quietly, wait_all_gone

from autotune.launch import ProcessRegistry, ServerProcess, free_port

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _orphan_entry(reg: ProcessRegistry, pid: int) -> None:
    """Make the entry of ``pid`` look launched by a process that has since died."""
    data = json.loads(reg.path.read_text())
    for e in data["entries"]:
        if e["pid"] == pid:
            e["owner_pid"] = _dead_pid()
    reg.path.write_text(json.dumps(data))


@pytest.fixture
def sleeper() -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(SLEEPER, start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def test_record_and_forget(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    reg = ProcessRegistry(tmp_path, "s1")
    entry = reg.record(sleeper.pid, argv=["python", "--api-key", "sk-123"], trial=4)
    assert entry["pgid"] == sleeper.pid
    assert entry["create_time"] == psutil.Process(sleeper.pid).create_time()
    stored = reg.entries()
    assert [e["pid"] for e in stored] == [sleeper.pid]
    assert stored[0]["trial"] == 4 and stored[0]["study"] == "s1"
    assert "sk-123" not in reg.path.read_text()
    reg.forget(sleeper.pid)
    assert reg.entries() == []


def test_reap_ends_leftovers_of_dead_owner(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    reg = ProcessRegistry(tmp_path, "s1")
    reg.record(sleeper.pid, argv=SLEEPER)
    assert reg.reap_leftovers(grace_s=1) == []  # the owner (this test) is alive: not a leftover
    assert alive(sleeper.pid)
    _orphan_entry(reg, sleeper.pid)
    assert reg.reap_leftovers(grace_s=1) == [sleeper.pid]
    sleeper.wait(timeout=5)
    assert reg.entries() == []


def test_reap_ignores_other_studies(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    ProcessRegistry(tmp_path, "other").record(sleeper.pid, argv=SLEEPER)
    reg = ProcessRegistry(tmp_path, "s1")
    assert reg.reap_leftovers(grace_s=1, include_live_owners=True) == []
    assert alive(sleeper.pid)


def test_reap_never_kills_a_recycled_pid(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    reg = ProcessRegistry(tmp_path, "s1")
    reg.record(sleeper.pid, argv=SLEEPER)
    data = json.loads(reg.path.read_text())
    data["entries"][0]["create_time"] -= 3600.0  # as if the recorded process was older: pid reused since
    reg.path.write_text(json.dumps(data))
    assert reg.reap_leftovers(grace_s=1, include_live_owners=True) == []
    assert alive(sleeper.pid)
    assert reg.entries() == []  # the stale entry is dropped


def test_reap_ends_server_group_with_grandchildren(tmp_path: Path) -> None:
    port = free_port()
    reg = ProcessRegistry(tmp_path, "s1")
    server = ServerProcess(fake_argv(port, grandchildren=[{}, {"escape": True}], ignore_term=True), log_path=tmp_path / "s.log", port=port, registry=reg, tags={"trial": 7}, watchdog=False, poll_interval_s=0.1)
    pids: list[int] = []
    try:
        server.start()
        server.wait_ready()
        pids = [server.pid, *grandchild_pids(server.log_lines())]  # type: ignore[list-item]
        assert reg.entries()[0]["trial"] == 7
        ended = reg.reap_leftovers(grace_s=0.5, include_live_owners=True)
        assert set(pids) <= set(ended)
        assert wait_all_gone(pids, 5) == []
    finally:
        server.stop(grace_s=0)
        kill_quietly(pids)
    assert reg.entries() == []


def test_clean_stop_forgets_the_entry(tmp_path: Path) -> None:
    port = free_port()
    reg = ProcessRegistry(tmp_path, "s1")
    with ServerProcess(fake_argv(port), log_path=tmp_path / "s.log", port=port, registry=reg, poll_interval_s=0.1) as server:
        server.wait_ready()
        assert [e["pid"] for e in reg.entries()] == [server.pid]
    assert reg.entries() == []


def test_unreadable_registry_starts_fresh(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    (tmp_path / "processes.json").write_text("{not json")
    reg = ProcessRegistry(tmp_path, "s1")
    reg.record(sleeper.pid, argv=SLEEPER)
    assert [e["pid"] for e in reg.entries()] == [sleeper.pid]


@pytest.mark.parametrize("value", ["abc", "-1", "0", "1e3", " "])
def test_an_orchestrator_pid_that_is_not_a_pid_is_ignored_with_a_warning(
        tmp_path: Path, sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, value: str) -> None:
    """int('abc') raised ValueError while a launch was being recorded: exit 1, the trial left RUNNING."""
    import os

    monkeypatch.setenv("AUTOTUNE_ORCHESTRATOR_PID", value)
    entry = ProcessRegistry(tmp_path, "s1").record(sleeper.pid, argv=["python"], trial=1)
    assert entry["orchestrator_pid"] == os.getpid()
    assert value.strip() == "" or "AUTOTUNE_ORCHESTRATOR_PID" in caplog.text
    monkeypatch.setenv("AUTOTUNE_ORCHESTRATOR_PID", "4242")
    assert ProcessRegistry(tmp_path, "s1").record(sleeper.pid, argv=["python"])["orchestrator_pid"] == 4242
