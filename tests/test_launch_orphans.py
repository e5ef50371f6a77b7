"""Orphan safety: an orchestrator killed by Ctrl-C, SIGTERM or SIGKILL leaves no server behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.launch_fakes import kill_quietly, wait_all_gone

from autotune.launch import free_port

ORCHESTRATOR = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
from support.launch_fakes import fake_argv, grandchild_pids
from autotune.launch import ServerProcess, install_signal_handlers
opts = json.loads(sys.argv[3])
install_signal_handlers(grace_s=1.0)
s = ServerProcess(fake_argv(int(sys.argv[2]), **opts), log_path=sys.argv[4], port=int(sys.argv[2]), startup_timeout_s=60, poll_interval_s=0.1)
if opts.get("from_thread"):  # no PR_SET_PDEATHSIG off the main thread: only the watchdog guards
    import threading
    t = threading.Thread(target=lambda: (s.start(), s.wait_ready(), time.sleep(600)), daemon=True)
    t.start()
    while not s.ready:
        time.sleep(0.05)
elif opts.get("hang"):  # report at once, then block in wait_ready where the signal lands
    s.start()
    deadline = time.monotonic() + 10
    while len(grandchild_pids(s.log_lines())) < len(opts.get("grandchildren", [])) and time.monotonic() < deadline:
        time.sleep(0.05)
    print(json.dumps([s.pid, s._watchdog.pid, *grandchild_pids(s.log_lines())]), flush=True)
    s.wait_ready()
else:
    s.start()
    s.wait_ready()
deadline = time.monotonic() + 10
while len(grandchild_pids(s.log_lines())) < len(opts.get("grandchildren", [])) and time.monotonic() < deadline:
    time.sleep(0.05)
pids = [s.pid, s._watchdog.pid, *grandchild_pids(s.log_lines())]
print(json.dumps(pids), flush=True)
while True:
    time.sleep(0.1)
'''


def _orchestrator(tmp_path: Path, **opts: object) -> tuple[subprocess.Popen[str], list[int]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", ORCHESTRATOR, str(Path(__file__).parent), str(port), json.dumps(opts), str(tmp_path / "server.log")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if not line:
        proc.kill()
        pytest.fail(f"orchestrator did not report its server: {proc.stderr.read() if proc.stderr else ''}")
    return proc, json.loads(line)


@pytest.mark.parametrize(("sig", "opts"), [
    (signal.SIGINT, {"grandchildren": [{}, {"escape": True}]}),
    (signal.SIGTERM, {"ignore_term": True, "grandchildren": [{"ignore_term": True}]}),
    (signal.SIGINT, {"hang": True, "grandchildren": [{}]}),
])
def test_signal_to_orchestrator_tears_servers_down(tmp_path: Path, sig: int, opts: dict[str, object]) -> None:
    proc, pids = _orchestrator(tmp_path, **opts)
    try:
        assert len(pids) == 2 + len(opts["grandchildren"])  # type: ignore[arg-type]
        t0 = time.monotonic()
        proc.send_signal(sig)
        rc = proc.wait(timeout=30)
        assert wait_all_gone(pids, 5) == []
        assert time.monotonic() - t0 < 15  # 10 s promised; slack for a loaded machine
        assert rc != 0
    finally:
        proc.kill()
        proc.wait()
        kill_quietly(pids)


@pytest.mark.parametrize("from_thread", [False, True])
def test_sigkill_of_orchestrator_server_dies_via_watchdog(tmp_path: Path, from_thread: bool) -> None:
    proc, pids = _orchestrator(tmp_path, ignore_term=True, grandchildren=[{}, {"escape": True}, {"ignore_term": True}], from_thread=from_thread)
    try:
        server, watchdog, *grandchildren = pids
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert wait_all_gone([server, *grandchildren], 15) == []
        assert wait_all_gone([watchdog], 5) == []
        assert "launcher pid" in (tmp_path / "server.log").read_text()  # the watchdog did it
    finally:
        kill_quietly(pids)


def test_stop_all_shares_one_grace_between_servers(tmp_path: Path) -> None:
    from support.launch_fakes import fake_argv

    from autotune.launch import ServerProcess, live_servers, stop_all

    servers = []
    pids: list[int] = []
    try:
        for i in range(2):
            port = free_port()
            s = ServerProcess(fake_argv(port, ignore_term=True), log_path=tmp_path / f"s{i}.log", port=port, poll_interval_s=0.1)
            servers.append(s.start())
        for s in servers:
            s.wait_ready()
            pids += [s.pid, s._watchdog.pid]  # type: ignore[list-item,union-attr]
        t0 = time.monotonic()
        assert stop_all(grace_s=3.0) == 2
        elapsed = time.monotonic() - t0
        assert wait_all_gone(pids, 5) == []
        assert not set(servers) & set(live_servers())
        assert 3.0 <= elapsed < 5.5  # one shared grace (two would take 6 s or more)
        assert all(s.returncode == -signal.SIGKILL for s in servers)
    finally:
        for s in servers:
            s.stop(grace_s=0)
        kill_quietly(pids)


def test_watchdog_exits_when_its_server_ends_by_itself(tmp_path: Path) -> None:
    from support.launch_fakes import fake_argv

    from autotune.launch import ServerProcess

    port = free_port()
    server = ServerProcess(fake_argv(port, lines=["bye"], exit=0, exit_delay=0.3), log_path=tmp_path / "s.log", port=port)
    try:
        server.start()
        watchdog = server._watchdog
        assert watchdog is not None
        server._proc.wait(timeout=10)  # type: ignore[union-attr]
        watchdog.wait(timeout=10)  # gone without stop(): it noticed the empty group
        assert watchdog.returncode == 0
    finally:
        server.stop(grace_s=0)
