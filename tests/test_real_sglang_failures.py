"""Real SGLang 0.5.23 failures on CPU, classified from the real output, each with its real log line.

A flag SGLang's parser accepts and its server refuses (``--context-length`` over the model's:
``invalid_args`` with SGLang's own line), a flag the version lacks (``invalid_args``, SGLang's
own argparse message; and the real parser refuses it before any launch while accepting every CPU flag, such as
``--sleep-on-idle``, that autotune's own table once refused), a model path without
a config (``crashed`` with the evidence), a port held by another process, a
startup past its timeout, and a server killed under load (the trial fails as
``load_failed`` or ``crashed`` and returns; it does not raise). The refused flag and the kill
under load run on 0.5.9 too: it has no subprocess watchdog and logs nothing when its scheduler
dies, so there the trial must be ``crashed`` with the tree watch's own line.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import psutil
import pytest
from support.real_sglang import free_port, need_real_sglang, server_argv

from autotune.errors import LaunchError
from autotune.launch import ServerProcess
from autotune.launch.tree import is_sglang
from autotune.objective import Objective
from autotune.sglang.flags.argv import render_argv
from autotune.sglang.flags.installed import probe
from autotune.sglang.hardware.cpu import CPU_ENV, on_cpu
from autotune.sglang.knobs.config import ServerConfig
from autotune.spec import WorkloadSpec
from autotune.testing.real_cpu_study import TINY_LLAMA
from autotune.trial import TrialRequest
from autotune.trial.live import run_trial_body

pytestmark = [pytest.mark.real_sglang, pytest.mark.timeout(600)]


def _launch_error(argv: list[str], port: int, log: Path, timeout_s: float = 300) -> LaunchError:
    server = ServerProcess(argv, env=dict(CPU_ENV), log_path=log, host="127.0.0.1", port=port,
                           startup_timeout_s=timeout_s)
    server.start()
    try:
        with pytest.raises(LaunchError) as info:
            server.wait_ready()
    finally:
        server.stop()
    return info.value


def test_real_parser_accepts_the_cpu_flags_and_refuses_an_unknown_one() -> None:
    env = need_real_sglang("0.5.23")
    installed = probe(str(env.python))
    assert installed is not None and installed.version == "0.5.23"
    cpu = on_cpu(ServerConfig(model_path=str(TINY_LLAMA), load_format="dummy"), "0.5.23")
    argv = render_argv(cpu, "0.5.23")[3:]  # autotune's own table accepts it first (it refused --sleep-on-idle)
    assert "--sleep-on-idle" in argv and "--device" in argv
    bad = [*argv, "--no-such-flag"]
    ok, refused = installed.refusals([argv, bad])
    assert ok is None
    assert refused is not None and "unrecognized arguments: --no-such-flag" in refused


def test_unknown_flag_is_invalid_args_with_sglangs_message(tmp_path: Path) -> None:
    env = need_real_sglang("0.5.23")
    port = free_port()
    err = _launch_error(server_argv(env, TINY_LLAMA, port, "--no-such-flag"), port, tmp_path / "s.log")
    assert err.kind == "invalid_args", (err.kind, err.evidence)
    assert "unrecognized arguments: --no-such-flag" in err.evidence


def test_model_without_config_crashes_with_the_evidence(tmp_path: Path) -> None:
    env = need_real_sglang("0.5.23")
    empty = tmp_path / "no-config"
    empty.mkdir()
    port = free_port()
    err = _launch_error(server_argv(env, empty, port), port, tmp_path / "s.log")
    assert err.kind == "crashed", (err.kind, err.evidence)
    assert "config" in err.evidence.lower() or str(empty) in err.evidence, err.evidence


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_flag_the_parser_accepts_and_the_server_refuses_is_invalid_args_with_sglangs_line(tmp_path: Path,
                                                                                         version: str) -> None:
    env = need_real_sglang(version)
    port = free_port()
    log = tmp_path / "s.log"
    before = {p.pid for p in psutil.Process().children(recursive=True)}  # the session's shared server, if up
    err = _launch_error(server_argv(env, TINY_LLAMA, port, "--context-length", "4096"), port, log)
    assert err.kind == "invalid_args", (err.kind, err.evidence)
    assert "context_length (4096) is greater than the derived context_length (2048)" in err.evidence
    assert err.evidence in log.read_text(errors="replace")  # the real log's line, verbatim
    assert not [p for p in psutil.Process().children(recursive=True) if p.pid not in before and is_sglang(p)]


def test_port_taken_by_another_process(tmp_path: Path) -> None:
    env = need_real_sglang("0.5.23")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = int(holder.getsockname()[1])
        err = _launch_error(server_argv(env, TINY_LLAMA, port), port, tmp_path / "s.log")
    assert err.kind == "port_in_use", (err.kind, err.evidence)
    assert str(port) in err.evidence or "in use" in err.evidence.lower(), err.evidence


def test_startup_past_its_timeout(tmp_path: Path) -> None:
    env = need_real_sglang("0.5.23")
    port = free_port()
    err = _launch_error(server_argv(env, TINY_LLAMA, port), port, tmp_path / "s.log", timeout_s=3)
    assert err.kind == "startup_timeout", (err.kind, err.evidence)
    assert err.evidence


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_server_killed_under_load_fails_the_trial_without_raising(tmp_path: Path, version: str) -> None:
    env = need_real_sglang(version)
    cfg = on_cpu(ServerConfig(model_path=str(TINY_LLAMA), load_format="dummy"), version)
    req = TrialRequest(
        study_name="real-kill", trial_number=0, config=cfg, backend="sglang", sglang_version=version,
        gpu="cpu", num_gpus=1, interconnect="pcie",
        workload=WorkloadSpec(backend="sglang", input_len=32, output_len=512, range_ratio=1.0, num_prompts=64,
                              concurrency=[8], warmup_requests=1, flush_cache=False, seed=0),
        objective=Objective(metric="output_throughput"),
        artifact_dir=str(tmp_path / "trial"), run_dir=str(tmp_path / "run"), startup_timeout_s=300,
        env=dict(CPU_ENV), python=str(env.python),
    )
    killed: list[int] = []

    def kill_scheduler_once_loaded() -> None:
        log = tmp_path / "trial" / "server.log"
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace") if log.exists() else ""
            if "Decode batch" in text:  # the measured load is streaming
                for p in psutil.Process().children(recursive=True):  # this test's own server tree only
                    try:
                        if "sglang::scheduler" in " ".join(p.cmdline()) + p.name():
                            p.kill()
                            killed.append(p.pid)
                    except psutil.NoSuchProcess:
                        continue
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_scheduler_once_loaded, daemon=True)
    killer.start()
    result = run_trial_body(req)
    killer.join(timeout=30)
    assert killed, "the scheduler was never seen under load"
    assert result.state == "failed"
    assert result.failure_kind in ("load_failed", "crashed"), (result.failure_kind, result.evidence)
    assert result.evidence
    if version == "0.5.9":  # no subprocess watchdog, no log line: the tree watch ends the tree and says why
        assert result.failure_kind == "crashed", (result.failure_kind, result.evidence)
        assert f"(pid {killed[0]}) killed by SIGKILL while its launcher" in result.evidence, result.evidence
