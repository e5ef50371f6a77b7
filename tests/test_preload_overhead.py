"""The memory lost before the weights load (CUDA context + NCCL), by GPU kind, fabric and TP size (issue 36):
each figure reproduces the public log it was read from, and the simulator and the predictor agree on it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autotune.sglang import _slack as S
from autotune.sglang.gpus import get_gpu

LOGS = Path(__file__).resolve().parent / "data" / "public_logs"
# the GPU, TP size and fabric of each log a figure is fitted on (the manifest's own fields)
FITTED_ON = {"sglang-pr4826-gemma3-4b-h200": "sm90", "kvcached-198-gptoss20b-b200": "sm100",
             "sglang-7227-qwen3-8b-fp8-5090": "sm120", "sglang-18262-qwen3-30b-a3b-5layers-mi355x": "gfx950",
             "sglang-pr11716-llama33-70b-h200-tp8": "sm90", "sglang-pr9162-dsr1-fp4-b200-tp4": "sm100",
             "sglang-7691-dsr1-rocm-dp8": "rocm"}


def _logged_p(entry: dict) -> float:
    """P as the log shows it: 'Load weight begin. avail mem' (min over ranks), else A + W."""
    lg = entry["logged"]
    return float(lg["avail_before_load_gib"] if lg["avail_before_load_gib"] is not None
                 else lg["avail_after_load_gib"] + lg["weight_gib_per_gpu"])


@pytest.mark.parametrize("log_id", sorted(FITTED_ON))
def test_each_figure_reproduces_the_log_it_names(log_id: str) -> None:
    entry = next(e for e in json.loads((LOGS / "manifest.json").read_text()) if e["id"] == log_id)
    gpu = get_gpu({"rtx5090": "rtx-5090"}.get(entry["gpu"], entry["gpu"]))
    tp = int(entry["tp"])
    interconnect = "nvlink" if tp > 1 and gpu.has_nvlink else "pcie"
    cited = [src for table in (S.CONTEXT_GIB, S.NVLINK_COMM_GIB) for _, src in table.values()]
    assert any(log_id in src for src in cited), f"no figure names {log_id}"
    overhead = S.base_overhead_gib(gpu, tp, interconnect)
    assert gpu.memory_gib - overhead == pytest.approx(_logged_p(entry), abs=0.01)


def test_the_seed_launch_keeps_its_measured_p() -> None:
    """RTX PRO 6000, TP 8 over PCIe: P = 94.00 GiB of 97,887 MiB, as the seed's log showed."""
    g = get_gpu("rtx-pro-6000")
    assert g.memory_gib - S.base_overhead_gib(g, 8, "pcie") == pytest.approx(94.00, abs=0.005)


def test_fabric_and_tp_size_move_the_overhead() -> None:
    h100 = get_gpu("h100")
    assert S.base_overhead_gib(h100, 1, "nvlink") == S.CONTEXT_GIB["sm90"][0]  # no NCCL buffers at TP 1
    nv4, nv8 = (S.base_overhead_gib(h100, tp, "nvlink") for tp in (4, 8))
    assert nv4 == nv8 > 2.5  # NVLink: the channels, not the ranks, set NCCL's buffers
    pcie2, pcie8 = (S.base_overhead_gib(get_gpu("l40s"), tp, "pcie") for tp in (2, 8))
    assert pcie8 - pcie2 == pytest.approx(6 * S.PCIE_COMM_PER_RANK_GIB["other"][0])
    # an NVLink-capable part on a PCIe-only machine gets the PCIe figure
    assert S.base_overhead_gib(h100, 8, "pcie") < nv8


def test_every_source_says_fitted_or_modelled() -> None:
    for table in (S.CONTEXT_GIB, S.NVLINK_COMM_GIB, S.PCIE_COMM_PER_RANK_GIB):
        for gib, src in table.values():
            assert 0 < gib < 4 and re.match(r"(fitted on|modelled)", src), src


@pytest.mark.parametrize("gpu,tp,interconnect", [("h200", 8, "nvlink"), ("h100", 4, "nvlink"), ("b200", 4, "nvlink"),
                                                 ("rtx-pro-6000", 8, "pcie"), ("mi355x", 1, "pcie"),
                                                 ("mi300x", 8, "nvlink"), ("l40s", 2, "pcie")])
def test_simulator_and_predictor_agree_on_p(tmp_path: Path, gpu: str, tp: int, interconnect: str) -> None:
    """The simulated node's P (its memory truth) is the predictor's cold P, custom allreduce included."""
    from autotune.sglang.config import ServerConfig
    from autotune.sglang.memory import predict
    from autotune.sglang.models import load_model_profile
    from autotune.sim.args import parse_args
    from autotune.sim.hardware import plan_memory

    (tmp_path / "config.json").write_text(json.dumps(
        {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 36, "intermediate_size": 12288,
         "vocab_size": 151936, "max_position_embeddings": 40960}))
    model = load_model_profile(tmp_path)
    launch, sim = parse_args(f"--model-path {tmp_path} --tp-size {tp} --mem-fraction-static 0.85 --sim-gpu {gpu} "
                             f"--sim-interconnect {interconnect} --sim-sglang-version 0.5.23".split())
    plan = plan_memory(launch, model, None, sim.gpu, version=sim.version, interconnect=sim.interconnect)
    pred = predict(model, gpu, ServerConfig(model_path=str(tmp_path), tp_size=tp, mem_fraction_static=0.85),
                   version="0.5.23", interconnect=interconnect)
    assert pred.p_gib == pytest.approx(plan.p_gib, abs=1e-3)
