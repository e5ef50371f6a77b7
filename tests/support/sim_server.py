"""The simulated SGLang server as a real process for load-generator tests (one per module)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "studies" / "models" / "qwen3-32b-class"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def sim_server(log_dir: Path, *extra: str, gpu: str = "h100") -> Iterator[str]:
    """Start ``python -m autotune.sim`` on a free port; yield its URL; kill its group after."""
    port = free_port()
    log_path = log_dir / "sim.log"
    argv = [sys.executable, "-m", "autotune.sim", "--model-path", str(MODEL), "--sim-gpu", gpu,
            "--port", str(port), *extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_SIM_")}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while "The server is fired up and ready to roll!" not in log_path.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"simulated server did not start: {log_path.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
