"""ServerProcess against the simulated SGLang server (``python -m autotune.sim``) as a real process."""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

import pytest
import requests
from support.launch_fakes import kill_quietly, wait_all_gone

from autotune.errors import LaunchError, ServerNotReady
from autotune.launch import ServerProcess, free_port
from autotune.launch.groups import descendants
from autotune.outcome import FailureKind

MODEL = Path(__file__).resolve().parent.parent / "studies" / "models" / "qwen3-32b-class"

try:  # the simulator needs the memory model; skip until every piece it imports has landed
    importlib.import_module("autotune.sim.hardware")
    importlib.import_module("autotune.sim.startup")
    _SIM_ERROR = ""
except ImportError as exc:
    _SIM_ERROR = str(exc)

pytestmark = pytest.mark.skipif(bool(_SIM_ERROR) or not MODEL.is_dir(), reason=f"simulated server not runnable here: {_SIM_ERROR or MODEL}")


def _sim(tmp_path: Path, *extra: str, timeout: float = 60.0, version: str = "0.5.9") -> ServerProcess:
    port = free_port()
    argv = [
        sys.executable, "-m", "autotune.sim", "--model-path", str(MODEL), "--host", "127.0.0.1", "--port", str(port),
        "--sim-sglang-version", version, "--sim-gpu", "h100", "--sim-num-gpus", "1", "--sim-time-scale", "50", *extra,
    ]
    return ServerProcess(argv, log_path=tmp_path / "server.log", port=port, startup_timeout_s=timeout, poll_interval_s=0.1)


def test_sim_becomes_ready_and_leaves_nothing(tmp_path: Path) -> None:
    server = _sim(tmp_path)
    pids: list[int] = []
    try:
        server.start()
        server.wait_ready()
        pids = [server.pid, *(p.pid for p in descendants(server.pid))]  # type: ignore[arg-type]
        assert requests.get(server.url + "/health", timeout=5).status_code == 200
        assert any("fired up and ready to roll" in ln for ln in server.log_lines())
    finally:
        server.stop(grace_s=5)
        kill_quietly(pids)
    assert wait_all_gone(pids, 5) == []


@pytest.mark.parametrize(
    ("extra", "kind", "needle"),
    [
        (("--mem-fraction-static", "0.2"), FailureKind.KV_OOM, "memory"),
        (("--sim-fault", "memory_imbalance"), FailureKind.MEMORY_IMBALANCE, "The memory capacity is unbalanced"),
        (("--mem-fraction-statik", "0.5"), FailureKind.INVALID_ARGS, "unrecognized arguments"),  # a typo
    ],
)
def test_sim_failures_are_classified(tmp_path: Path, extra: tuple[str, ...], kind: FailureKind, needle: str) -> None:
    with _sim(tmp_path, *extra) as server:
        t0 = time.monotonic()
        with pytest.raises(LaunchError) as info:
            server.wait_ready()
        assert time.monotonic() - t0 < 45
    assert info.value.kind == kind, info.value.evidence
    assert needle in info.value.evidence


def test_sim_hang_is_a_startup_timeout(tmp_path: Path) -> None:
    with _sim(tmp_path, "--sim-fault", "hang_startup", timeout=4.0) as server, pytest.raises(ServerNotReady) as info:
        server.wait_ready()
    assert info.value.kind == FailureKind.STARTUP_TIMEOUT
