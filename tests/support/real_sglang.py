"""Real SGLang on CPU for the tests: its venv, the session's shared server, argv and environment.

The venv is the one ``autotune sglang-env install --version V --device cpu`` builds
(``AUTOTUNE_SGLANG_CPU_PYTHON`` names another). When it is missing or broken a test
that needs it is skipped with the command that builds it, except under ``CI=true``,
where it FAILS: CI builds the venv first (.ci/run), so a missing one is a broken CI.
"""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from autotune.sglang.hardware.cpu import CPU_ENV, cpu_flags
from autotune.sglang_env.install import SglangEnv, check, default_prefix
from autotune.testing.real_cpu_study import TINY_LLAMA
from support.ci import in_ci
from support.leak_guard import held_by

if TYPE_CHECKING:
    from autotune.launch import ServerProcess


@functools.cache
def find_venv(version: str) -> tuple[SglangEnv | None, str]:
    explicit = os.environ.get(f"AUTOTUNE_SGLANG_CPU_PYTHON_{version.replace('.', '_')}")
    prefix = Path(explicit).parent.parent if explicit else default_prefix(version, "cpu")
    env = SglangEnv(prefix, version, "cpu")
    why = check(env)
    return (env, "") if why is None else (None, why)


def need_real_sglang(version: str = "0.5.23") -> SglangEnv:
    """The CPU venv of ``version``; fails under CI=true, skips otherwise, when it does not work."""
    env, why = find_venv(version)
    if env is not None:
        return env
    msg = (f"real SGLang {version} on CPU is not usable ({why}); build it with: "
           f"autotune sglang-env install --version {version} --device cpu")
    if in_ci():
        pytest.fail(msg)
    pytest.skip(msg)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_argv(env: SglangEnv, model: Path, port: int, *extra: str) -> list[str]:
    return [str(env.python), "-m", "sglang.launch_server", "--model-path", str(model), "--host", "127.0.0.1",
            "--port", str(port), *cpu_flags(env.version), "--attention-backend", "torch_native",
            "--max-total-tokens", "8192", "--load-format", "dummy", *extra]


def launch_env(env: SglangEnv) -> dict[str, str]:
    return {**os.environ, **CPU_ENV, **env.env}


class SharedRealServer:
    """The session's one real server, started again (same argv, port and log) when a test stopped it.

    Its teardown test stops it on purpose; in the default order that test is the last to use it,
    in any other order (``pytest-randomly``, ``-k``, a file named first) the next user gets a
    fresh one instead of a dead one. The restart runs under the leak guard's ``held_by``, so the
    guard counts it (launcher, its tree and its watchdog) as the fixture's, not the test's leftover."""

    def __init__(self, env: SglangEnv, log_path: Path) -> None:
        self.env = env
        self.port = free_port()
        self.log_path = log_path
        self.server: ServerProcess | None = None

    def running(self) -> ServerProcess:
        from autotune.launch import ServerProcess

        if self.server is None or self.server.returncode is not None:
            if self.server is not None:
                self.server.stop()  # a dead launcher's scheduler and detokenizer go with it
            self.server = ServerProcess(server_argv(self.env, TINY_LLAMA, self.port, "--enable-cache-report"),
                                        env=dict(CPU_ENV), log_path=self.log_path, host="127.0.0.1",
                                        port=self.port, startup_timeout_s=300)
            with held_by("shared_real_server"):  # a restart is the fixture's server, not the test's leftover
                self.server.start()
                self.server.wait_ready()
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


@pytest.fixture(scope="session")
def shared_real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedRealServer]:
    """One real SGLang 0.5.23 server on CPU (the tiny Llama, cache report on) for every module that only
    loads it: a real startup costs most of a minute on two cores. Started here, stopped at the end of
    the session (or by tests/test_real_sglang_server.py's teardown test: then started again for the
    next test that asks for it)."""
    holder = SharedRealServer(need_real_sglang("0.5.23"), tmp_path_factory.mktemp("real-server") / "server.log")
    try:
        holder.running()
        yield holder
    finally:
        holder.stop()


@pytest.fixture
def real_server(shared_real_server: SharedRealServer) -> ServerProcess:
    """The shared real server, up: whatever order the tests run in."""
    return shared_real_server.running()


def sglang_pids() -> list[str]:
    """Command lines of SGLang processes on this machine (launcher, scheduler, detokenizer)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines()
            if ("sglang.launch_server" in line or "sglang::" in line) and "ps -eo" not in line]


def wait_until(pred: object, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return False
