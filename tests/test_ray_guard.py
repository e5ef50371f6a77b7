"""The per-trial guard and the Ray connection settings, without starting Ray."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from autotune import ray_address
from autotune.errors import ConfigError
from autotune.study.execution.ray import cluster as ray_cluster
from autotune.study.execution.ray import guard as ray_guard

# A "worker" that starts a server tree in its own session (like ServerProcess) and then idles.
_WORKER = """
import os, subprocess, sys, time
tree = ("import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)")
server = subprocess.Popen([sys.executable, '-c', tree], start_new_session=True)
from autotune.study.execution.ray import guard as ray_guard
ray_guard.spawn(os.environ[ray_guard.MARKER_ENV], poll_s=0.2, grace_s=1.0)
print(server.pid, flush=True)
time.sleep(60)
"""


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def test_guard_ends_marked_processes_once_the_worker_is_killed() -> None:
    marker = uuid.uuid4().hex
    env = {**os.environ, ray_guard.MARKER_ENV: marker}
    worker = subprocess.Popen([sys.executable, "-c", _WORKER], env=env, stdout=subprocess.PIPE, text=True)
    tree: list[int] = []
    try:
        assert worker.stdout is not None
        server_pid = int(worker.stdout.readline())
        deadline = time.monotonic() + 10
        while len(tree) < 2 and time.monotonic() < deadline:
            tree = [server_pid] + [c.pid for c in psutil.Process(server_pid).children(recursive=True)]
            time.sleep(0.1)
        assert len(tree) == 2
        # the guard is detached: not a child of the worker
        assert all(ray_guard.MARKER_ENV not in " ".join(c.cmdline()) for c in psutil.Process(worker.pid).children())
        assert {p.pid for p in ray_guard.marked(marker)} >= set(tree)
        worker.kill()
        worker.wait()
        deadline = time.monotonic() + 15
        while _alive(tree) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _alive(tree) == []
    finally:
        worker.kill()
        worker.wait()
        for pid in _alive(tree):
            os.kill(pid, 9)


def test_sweep_leaves_unmarked_processes_alone() -> None:
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], env={**os.environ, ray_guard.MARKER_ENV: "someone-else"}
    )
    try:
        assert ray_guard.sweep(uuid.uuid4().hex, grace_s=0.5) == []
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_address_comes_from_the_spec_then_ray_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert ray_address.resolve_address("10.0.0.9:6379") == "10.0.0.9:6379"
    assert ray_address.resolve_address(None) == "10.0.0.5:6379"
    monkeypatch.setenv("RAY_ADDRESS", "local")
    assert ray_address.resolve_address(None) is None
    monkeypatch.delenv("RAY_ADDRESS")
    assert ray_address.resolve_address(None) is None


def test_token_is_found_in_env_or_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert not ray_cluster.token_available()
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t")
    assert ray_cluster.token_available()
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "missing"))
    assert not ray_cluster.token_available()
    monkeypatch.setenv("RAY_AUTH_TOKEN", "abc")
    assert ray_cluster.token_available()


def test_unreachable_cluster_is_a_config_error_naming_the_address(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")

    def refuse(**kwargs: object) -> None:
        raise ConnectionError("Could not find any running Ray instance. Please specify the one to connect to.")

    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")  # connect() sets it for the driver's whole life
    with pytest.raises(ConfigError, match=r"executor.address: cannot join the Ray cluster at 'auto': Could not find"):
        ray_cluster.connect("auto", num_cpus=None, num_gpus=0)


def test_explicit_address_turns_token_mode_on_when_a_token_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")
    seen: dict[str, object] = {}

    def fake_init(**kwargs: object) -> None:
        seen.update(kwargs, auth=os.environ.get("RAY_AUTH_MODE"))

    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setenv("RAY_AUTH_MODE", "placeholder")  # recorded, so the value set below is undone
    monkeypatch.delenv("RAY_AUTH_MODE")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "secret")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    assert ray_cluster.connect("10.1.2.3:6379", num_cpus=None, num_gpus=0) is False
    assert seen["address"] == "10.1.2.3:6379" and seen["auth"] == "token"


def test_artifacts_written_on_another_host_are_shipped_back(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from autotune.study.execution.ray.task import MAX_SHIPPED_BYTES, _ship_artifacts, write_shipped
    from autotune.trial.contract import TrialResult, TrialState

    log = tmp_path / "trial-3" / "server.log"
    log.parent.mkdir()
    log.write_bytes(b"line 1\nline 2\n")
    result = TrialResult(
        state=TrialState.COMPLETE, artifacts={"server.log": str(log), "gone": str(tmp_path / "missing")}
    )
    files = _ship_artifacts(result)
    assert set(files) == {str(log)}
    log.unlink()
    log.parent.rmdir()  # the driver's host has no such directory yet
    write_shipped(files)
    assert log.read_bytes() == b"line 1\nline 2\n"
    assert MAX_SHIPPED_BYTES >= 16 * 1024**2


def test_a_local_instance_gets_sigint_back_and_disconnect_undoes_what_connect_did(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver started in the background ignores SIGINT; Ray's workers must not inherit that (their soft
    cancel is a SIGINT). Shutting the instance down ends its guard and restores the environment."""
    import signal

    ray = pytest.importorskip("ray")
    seen: dict[str, str] = {}
    up = {"joined": False}

    def fake_init(**kwargs: object) -> None:  # what a process Ray starts would inherit, and what ray.init sets
        probe = "import signal; print(signal.getsignal(signal.SIGINT))"
        seen["child"] = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                       check=True).stdout.strip()
        os.environ["RAY_CLIENT_MODE"] = "0"
        up["joined"] = True

    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(ray, "is_initialized", lambda: up["joined"])
    monkeypatch.setattr(ray, "shutdown", lambda: up.update(joined=False))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    env = dict(os.environ)
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as under nohup or `autotune run &` in a script
    try:
        assert ray_cluster.connect(None, num_cpus=1, num_gpus=0) is True
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # the driver's own disposition is kept
        signal.signal(signal.SIGTERM, lambda *_: None)  # as ray.init does in the driver
        marker = os.environ[ray_guard.MARKER_ENV]
        guards = [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]
        assert len(guards) == 1  # the detached guard watching this driver
        ray_cluster.disconnect(True)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, old)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    assert seen["child"] == "<built-in function default_int_handler>"
    assert dict(os.environ) == env
    assert not guards[0].is_running()
