"""ServerProcess against real tiny processes: readiness, failure kinds, kill_now, teardown."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from support.launch_fakes import fake_argv, grandchild_pids, kill_quietly, wait_all_gone

from autotune.errors import ConfigError, LaunchError, ServerNotReady
from autotune.launch import ServerProcess, free_port, live_servers
from autotune.outcome import FailureKind


def _server(tmp_path: Path, port: int, *, timeout: float = 30.0, **opts: object) -> ServerProcess:
    return ServerProcess(fake_argv(port, **opts), log_path=tmp_path / "server.log", port=port, startup_timeout_s=timeout, poll_interval_s=0.1)


def _pids(server: ServerProcess) -> list[int]:
    pids = [server.pid] + grandchild_pids(server.log_lines())
    if server._watchdog is not None:
        pids.append(server._watchdog.pid)
    return [p for p in pids if p is not None]


def test_ready_then_stop_leaves_nothing(tmp_path: Path) -> None:
    port = free_port()
    seen: list[str] = []
    server = ServerProcess(
        fake_argv(port, lines=["Load weight end. avail mem=10.00 GB, mem usage=5.00 GB."], ready_after=0.3, grandchildren=[{}]),
        log_path=tmp_path / "s.log", port=port, startup_timeout_s=30, on_line=seen.append, poll_interval_s=0.1,
    )
    with server:
        server.wait_ready()
        assert server.ready and server.url == f"http://127.0.0.1:{port}"
        time.sleep(0.2)
        pids = _pids(server)
        assert len(pids) == 3  # leader, grandchild, watchdog
        assert server in live_servers()
    try:
        assert wait_all_gone(pids, 5) == []
        assert server not in live_servers()
        assert server.returncode is not None
        log = (tmp_path / "s.log").read_text()
        assert "Load weight end" in log and "fired up" in log
        assert any("Load weight end" in ln for ln in seen)
    finally:
        kill_quietly(pids)


def test_the_ready_line_is_probed_at_once_not_at_the_next_poll(tmp_path: Path) -> None:
    """A server that logs SGLang's "fired up and ready to roll" is probed when the line comes: with polls
    5 s apart, the first probe (before it listens) fails and the next one is not waited for."""
    port = free_port()
    server = ServerProcess(fake_argv(port), log_path=tmp_path / "s.log", port=port, startup_timeout_s=30,
                           poll_interval_s=5.0)
    with server:
        server.wait_ready()
        assert server.timings["startup_s"] < 4.0, server.timings  # the second poll would be at 5 s


def test_falls_back_to_health_when_health_generate_is_missing(tmp_path: Path) -> None:
    port = free_port()
    with _server(tmp_path, port, no_health_generate=True) as server:
        server.wait_ready()
        assert server.ready


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.5", FailureKind.KV_OOM),
        ("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB.", FailureKind.GRAPH_CAPTURE_OOM),
        ("RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes.", FailureKind.MEMORY_IMBALANCE),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", FailureKind.CUDA_OOM),
    ],
)
def test_crash_is_classified_without_burning_the_timeout(tmp_path: Path, line: str, kind: FailureKind) -> None:
    port = free_port()
    server = _server(tmp_path, port, timeout=120, lines=["Scheduler hit an exception: Traceback (most recent call last):", line, "Received sigquit from a child process. It usually means the child failed."], exit=1)
    with server:
        t0 = time.monotonic()
        with pytest.raises(LaunchError) as info:
            server.wait_ready()
        assert time.monotonic() - t0 < 30  # far below the 120 s timeout
    assert info.value.kind == kind
    assert info.value.evidence == line
    assert not isinstance(info.value, ServerNotReady)


def test_port_in_use_is_classified(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen()
        with _server(tmp_path, port) as server, pytest.raises(LaunchError) as info:
            server.wait_ready()
    assert info.value.kind == FailureKind.PORT_IN_USE
    assert "Address already in use" in info.value.evidence


def test_argparse_error_is_invalid_args(tmp_path: Path) -> None:
    port = free_port()
    with _server(tmp_path, port, argparse=["--cuda-graph-max-bs", "8"]) as server, pytest.raises(LaunchError) as info:
        server.wait_ready()
    assert info.value.kind == FailureKind.INVALID_ARGS
    assert "unrecognized arguments: --cuda-graph-max-bs 8" in info.value.evidence


def test_hang_raises_startup_timeout(tmp_path: Path) -> None:
    port = free_port()
    with _server(tmp_path, port, timeout=1.0, lines=["Capture cuda graph begin. This can take up to several minutes."], hang=True) as server:
        with pytest.raises(ServerNotReady) as info:
            server.wait_ready()
        assert server.returncode is None  # still alive: the caller decides to stop it
    assert info.value.kind == FailureKind.STARTUP_TIMEOUT
    assert "Capture cuda graph begin" in info.value.evidence
    assert server.returncode is not None


def test_kill_now_from_on_line(tmp_path: Path) -> None:
    port = free_port()
    doomed = "Load weight end. type=Llama, avail mem=0.50 GB, mem usage=75.00 GB."
    holder: dict[str, ServerProcess] = {}

    def on_line(line: str) -> None:
        if line.startswith("Load weight end"):
            holder["s"].kill_now(FailureKind.KV_OOM, line)

    server = ServerProcess(fake_argv(port, lines=[doomed], hang=True, grandchildren=[{}]), log_path=tmp_path / "s.log", port=port, startup_timeout_s=120, on_line=on_line, poll_interval_s=0.5)
    holder["s"] = server
    pids: list[int] = []
    with server:
        t0 = time.monotonic()
        with pytest.raises(LaunchError) as info:
            server.wait_ready()
        elapsed = time.monotonic() - t0
        pids = _pids(server)
        assert wait_all_gone(pids[:2], 5) == []  # killed by kill_now itself, before stop()
    try:
        assert info.value.kind == FailureKind.KV_OOM and info.value.evidence == doomed
        assert elapsed < 20
    finally:
        kill_quietly(pids)


def test_stop_kills_grandchildren_and_term_ignorers(tmp_path: Path) -> None:
    port = free_port()
    server = _server(tmp_path, port, ignore_term=True, grandchildren=[{"ignore_term": True}, {"escape": True}, {}])
    pids: list[int] = []
    try:
        server.start()
        server.wait_ready()
        time.sleep(0.2)
        pids = _pids(server)
        assert len(grandchild_pids(server.log_lines())) == 3
        t0 = time.monotonic()
        server.stop(grace_s=0.5)
        assert time.monotonic() - t0 < 15
        assert wait_all_gone(pids, 5) == []
        assert server.returncode == -9  # SIGTERM was ignored, so SIGKILL ended it
    finally:
        server.stop(grace_s=0)
        kill_quietly(pids)


def test_bad_arguments_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="argv"):
        ServerProcess("python -m x", log_path=tmp_path / "x.log", port=1234)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="port: expected 1..65535, got 0"):
        ServerProcess(["x"], log_path=tmp_path / "x.log", port=0)


def test_missing_executable_is_a_launch_error(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="cannot start") as info:
        ServerProcess([str(tmp_path / "nope")], log_path=tmp_path / "x.log", port=free_port()).start()
    assert info.value.kind == FailureKind.CRASHED


def test_env_reaches_the_server_and_no_secret_reaches_our_log(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    caplog.set_level("DEBUG", logger="autotune.launch")
    names = ["CUDA_VISIBLE_DEVICES", "HF_TOKEN", "AUTOTUNE_LAUNCH_ID", "SOME_URL"]
    # Secrets also in variables whose names are not secret (a URL's password, a key in a JSON text):
    # the line is redacted where it is logged, so a Ray worker's handler, which has no filter, gets
    # no secret either (caplog's handler has none).
    env = {"HF_TOKEN": "hf_secret_value", "SOME_URL": "https://bob:URLPWSECRET777@example.com",
           "SGLANG_CFG": '{"api_key": "JSONENVSECRET6"}'}
    server = ServerProcess(fake_argv(port, print_env=names), env=env, gpu_ids=[2, 3], log_path=tmp_path / "s.log", port=port, poll_interval_s=0.1)
    with server:
        server.wait_ready()
        lines = server.log_lines()
    assert "ENV CUDA_VISIBLE_DEVICES=2,3" in lines
    assert "ENV HF_TOKEN=hf_secret_value" in lines
    assert "ENV SOME_URL=https://bob:URLPWSECRET777@example.com" in lines  # the server gets it unchanged
    assert f"ENV AUTOTUNE_LAUNCH_ID={server.launch_id}" in lines
    for secret in ("hf_secret_value", "URLPWSECRET777", "JSONENVSECRET6"):
        assert secret not in caplog.text
    assert "launching on" in caplog.text
