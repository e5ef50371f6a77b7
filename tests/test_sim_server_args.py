"""Command line of the simulated server: SGLang's dialect per version, --sim-* flags and env defaults."""

from __future__ import annotations

import pytest

from autotune.errors import ConfigError
from autotune.sim.args import parse_args

BASE = ["--model-path", "studies/models/kimi-k2-class", "--tp-size", "8"]


def test_env_vars_give_sim_defaults_and_flags_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_SIM_GPU", "rtx-pro-6000")
    monkeypatch.setenv("AUTOTUNE_SIM_TIME_SCALE", "25")
    monkeypatch.setenv("AUTOTUNE_SIM_FAULT", "hang_startup,crash_after:3")
    monkeypatch.setenv("AUTOTUNE_SIM_SGLANG_VERSION", "0.5.23")
    launch, sim = parse_args([*BASE, "--cuda-graph-max-bs-decode", "64"])
    assert sim.gpu.name == "rtx-pro-6000" and sim.time_scale == 25.0 and str(sim.version) == "0.5.23"
    assert sim.faults.hang_startup and sim.faults.crash_after == 3
    assert sim.interconnect == "pcie" and sim.num_gpus == 8  # no NVLink on that card; tp x dp GPUs
    assert launch.cuda_graph_max_bs == 64
    _, sim = parse_args([*BASE, "--sim-gpu", "h100", "--sim-time-scale", "2", "--sim-sglang-version", "0.5.9"])
    assert sim.gpu.name == "h100" and sim.time_scale == 2.0 and sim.interconnect == "nvlink"


def test_classic_knobs_are_read() -> None:
    launch, _ = parse_args([*BASE, "--mem-fraction-static", "0.8", "--cuda-graph-max-bs", "128",
                            "--disable-custom-all-reduce", "--enable-flashinfer-allreduce-fusion",
                            "--sim-sglang-version", "0.5.9"])
    assert launch.mem_fraction_static == 0.8 and launch.cuda_graph_max_bs == 128
    assert launch.disable_custom_all_reduce and launch.flashinfer_allreduce_fusion is True
    assert launch.host == "127.0.0.1" and launch.page_size == 1


def test_bad_sim_values() -> None:
    with pytest.raises(ConfigError, match="no NVLink"):
        parse_args([*BASE, "--sim-gpu", "rtx-pro-6000", "--sim-interconnect", "nvlink"])
    with pytest.raises(ConfigError, match="gpu"):
        parse_args([*BASE, "--sim-gpu", "tpu-v9"])
    with pytest.raises(ConfigError, match="time-scale"):
        parse_args([*BASE, "--sim-time-scale", "0"])
    with pytest.raises(SystemExit) as exc:
        parse_args([*BASE, "--sim-interconnect", "infiniband"])
    assert exc.value.code == 2
