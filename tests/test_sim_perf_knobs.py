"""The catalogue's knobs in the simulated server: parsed from flags and environment, and moving speed."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.sglang.hardware.gpus import get_gpu
from autotune.sglang.knobs.config import ServerConfig
from autotune.sglang.memory.predictor import predict
from autotune.sglang.models.profile import load_model_profile
from autotune.sglang.versions import parse_version
from autotune.sim.args import parse_args
from autotune.sim.perf.knobs import KnobSpeed, knob_speed
from autotune.sim.perf.model import PerfInputs, PerfModel

ROOT = Path(__file__).resolve().parents[1]
KIMI = load_model_profile(ROOT / "studies" / "models" / "kimi-k2-class")
PRO = get_gpu("rtx-pro-6000")


def _step(knobs: KnobSpeed, batch: int, context: int) -> float:
    perf = PerfModel(PerfInputs(model=KIMI, gpu=PRO, tp_size=8, interconnect="pcie", cuda_graph_max_bs=512,
                                knobs=knobs))
    return perf.decode_step_time_s(batch, context)


def test_the_server_reads_its_environment_and_flags() -> None:
    argv = ["--model-path", str(ROOT / "studies" / "models" / "kimi-k2-class"), "--tp-size", "8",
            "--enable-dp-attention", "--dp-size", "8", "--disable-overlap-schedule", "--sim-sglang-version", "0.5.9",
            "--sim-gpu", "rtx-pro-6000"]
    launch, sim = parse_args(argv, {"NCCL_ALGO": "Tree", "HOME": "/root", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"})
    assert (launch.tp_size, launch.dp_size, launch.attn_dp_size) == (8, 1, 8)  # DP attention, not 8 replicas
    assert sim.env == {"NCCL_ALGO": "Tree", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}
    k = knob_speed(launch.raw, sim.env, version=sim.version, interconnect="pcie", tp_size=8, attn_dp=8)
    assert k.nccl_tree and not k.overlap and k.attn_dp == 8
    assert not k.pcie_ipc  # 0.5.9 has no PCIe-IPC allreduce: the variable does nothing there
    assert k.schedule_conservativeness == 0.3  # 0.5.9 scales it under DP attention
    k23 = knob_speed({}, {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}, version=parse_version("0.5.23"),
                     interconnect="pcie", tp_size=8, attn_dp=1)
    assert k23.pcie_ipc
    assert not knob_speed({}, {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}, version=parse_version("0.5.23"),
                          interconnect="nvlink", tp_size=8, attn_dp=1).pcie_ipc


def test_ipc_allreduce_speeds_up_decode_steps() -> None:
    base, ipc = KnobSpeed(), KnobSpeed(pcie_ipc=True)
    small = _step(ipc, 1, 8192) / _step(base, 1, 8192)
    large = _step(ipc, 256, 256 * 768) / _step(base, 256, 256 * 768)
    assert 0.55 < small < 0.80  # the docstring: 21.14 -> 13.62 ms (x0.64)
    assert large < 1.0  # and no captured-graph NCCL penalty on big decode batches
    # prefill chunks are wider than the decode workspace: they stay on NCCL
    perf = PerfModel(PerfInputs(model=KIMI, gpu=PRO, tp_size=8, interconnect="pcie", cuda_graph_max_bs=512))
    perf_ipc = PerfModel(PerfInputs(model=KIMI, gpu=PRO, tp_size=8, interconnect="pcie", cuda_graph_max_bs=512,
                                    knobs=ipc))
    assert perf_ipc.prefill_time_s(8192, 16) == perf.prefill_time_s(8192, 16)


def test_dp_attention_reads_less_kv_and_more_attention_weights() -> None:
    from autotune.sglang.models.dp_attention import attn_tp_weight_bytes

    base, dp = KnobSpeed(), KnobSpeed(attn_dp=8)

    def fwd(k: KnobSpeed) -> object:
        return PerfModel(PerfInputs(model=KIMI, gpu=PRO, tp_size=8, interconnect="pcie", knobs=k)).target

    plain, dpa = fwd(base), fwd(dp)
    assert dpa.dense_bytes - plain.dense_bytes == pytest.approx(attn_tp_weight_bytes(KIMI) * 7 / 8)
    assert dpa.kv_token_bytes == pytest.approx(plain.kv_token_bytes / 8)  # each rank reads its own requests' KV
    assert _step(dp, 256, 256 * 4096) < 0.7 * _step(base, 256, 256 * 4096)  # one allreduce a layer, 1/8 the KV
    assert _step(KnobSpeed(overlap=False), 64, 64 * 1024) > _step(base, 64, 64 * 1024)
    assert _step(KnobSpeed(torch_compile_max_bs=32), 16, 16 * 1024) < _step(base, 16, 16 * 1024)
    assert _step(KnobSpeed(torch_compile_max_bs=32), 64, 64 * 1024) == _step(base, 64, 64 * 1024)
    assert _step(KnobSpeed(nccl_no_p2p=True), 64, 64 * 1024) > _step(base, 64, 64 * 1024)


def test_dp_attention_capacity_in_the_memory_model() -> None:
    def pred(**kw: object) -> object:
        return predict(KIMI, PRO, ServerConfig(model_path="k", tp_size=8, **kw), version="0.5.23", num_gpus=8,
                       interconnect="pcie")

    plain = pred()
    at_defaults = pred(attn_dp_size=8)
    tuned = pred(attn_dp_size=8, mem_fraction_static=0.95, cuda_graph_max_bs=64)
    assert at_defaults.verdict == "kv_oom"  # SGLang's DP reserve + 11.97 GiB of replicated attention weights
    assert tuned.server_kv_tokens == 8 * tuned.kv_tokens
    assert tuned.server_kv_tokens >= 4 * plain.server_kv_tokens
    assert plain.server_kv_tokens == plain.kv_tokens
