"""The GPUs people serve on in 2026: AMD Instinct, Blackwell Ultra / Grace Blackwell, H20, L20, RTX 5090.

Their catalogue figures, ``hardware: auto`` naming, and the knob rules and memory effects that differ on ROCm.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.node.auto import catalogue_name
from autotune.sglang.config import ServerConfig
from autotune.sglang.gpus import get_gpu
from autotune.sglang.memory import predict
from autotune.sglang.models import load_model_profile
from autotune.sim.args import parse_args
from autotune.sim.hardware import GIB, MIB, load_draft, plan_memory, resolve_speculative
from autotune.space_prune import prune_space
from autotune.spec import parse_study

MODELS = Path(__file__).resolve().parents[1] / "studies" / "models"
KIMI, LLAMA = MODELS / "kimi-k2-class", MODELS / "llama-3.1-70b-class"


@pytest.mark.parametrize("name,mib,sm,vendor", [
    ("mi300x", 196592, 0, "amd"),  # rocm-smi 206141652992 B
    ("mi355x", 294896, 0, "amd"),  # rocm-smi 309220868096 B
    ("mi325x", 262128, 0, "amd"),
    ("b300", 275040, 103, "nvidia"), ("gb200", 189471, 100, "nvidia"), ("gb300", 283679, 103, "nvidia"),
    ("h20", 97871, 90, "nvidia"), ("l20", 46068, 89, "nvidia"), ("rtx-5090", 32607, 120, "nvidia"),
])
def test_new_gpus_carry_the_driver_totals(name: str, mib: int, sm: int, vendor: str) -> None:
    g = get_gpu(name)
    assert (g.memory_mib, g.sm, g.vendor) == (mib, sm, vendor)
    assert g.hbm_tb_s > 0 and g.bf16_tflops > 0


def test_driver_bytes_of_the_amd_logs_are_the_catalogue_mib() -> None:
    assert get_gpu("MI300X").memory_mib == 206141652992 // 2**20
    assert get_gpu("mi355x").memory_mib == 309220868096 // 2**20
    assert (get_gpu("mi300x").gfx, get_gpu("mi355x").gfx) == ("gfx942", "gfx950")
    assert get_gpu("mi355x").has_nvlink and not get_gpu("rtx-5090").has_nvlink  # xGMI counts as the GPU fabric
    assert get_gpu("b300").sm_family == 100 and get_gpu("rtx-pro-6000").sm_family == 120


def test_a_study_on_mi355x_is_accepted_and_xgmi_means_the_gpu_fabric() -> None:
    spec = parse_study({"name": "amd", "server": {"model_path": str(KIMI), "tp_size": 8},
                        "hardware": {"gpu": "mi355x", "num_gpus": 8, "interconnect": "xgmi"}})
    assert spec.hardware.gpu == "mi355x" and spec.hardware.interconnect == "nvlink"


@pytest.mark.parametrize("nvml_name,mib,expected", [
    ("NVIDIA B300 SXM6 AC", 275040, "b300"), ("NVIDIA GB200", 189471, "gb200"), ("NVIDIA GB300 NVL", 283500, "gb300"), ("NVIDIA B200", 183359, "b200"),
    ("NVIDIA GeForce RTX 5090", 32607, "rtx-5090"), ("NVIDIA L20", 46068, "l20"), ("NVIDIA H20", 97871, "h20"),
    ("NVIDIA H20", 143771, None),  # H20 141GB: another edition, not the catalogue's card
    ("AMD Instinct MI300X", 196592, "mi300x"), ("AMD Instinct MI355X", 294896, "mi355x"),
])
def test_device_names_map_to_the_catalogue(nvml_name: str, mib: int, expected: str | None) -> None:
    assert catalogue_name(nvml_name, mib) == expected


def _spec(gpu: str, interconnect: str, space: dict) -> object:
    return parse_study({"name": "k", "server": {"model_path": str(KIMI), "tp_size": 8, "sglang_version": "0.5.23"},
                        "hardware": {"gpu": gpu, "num_gpus": 8, "interconnect": interconnect},
                        "search_space": space})


SPACE = {"custom_allreduce": {"choices": [True, False]}, "flashinfer_allreduce_fusion": {"choices": [True, False]},
         "enable_torch_symm_mem": {"choices": [True, False]},
         "attention_backend": {"choices": ["aiter", "triton", "flashinfer", "fa3"]},
         "flags": {"--moe-runner-backend": {"choices": ["auto", "triton", "deep_gemm", "flashinfer_cutlass"]},
                   "--moe-a2a-backend": {"choices": ["none", "deepep", "mori"]}}}


def test_rocm_prunes_the_cuda_only_knobs_and_keeps_custom_allreduce_on_xgmi() -> None:
    model = load_model_profile(KIMI)
    pruned, removed = prune_space(_spec("mi300x", "xgmi", SPACE), model, get_gpu("mi300x"))
    lines = {r.line() for r in removed}
    assert any(x.startswith("removed flashinfer_allreduce_fusion: ROCm") and "add_norm.py" in x for x in lines)
    assert any(x.startswith("removed enable_torch_symm_mem: ROCm") for x in lines)
    assert any(x.startswith("removed attention_backend=flashinfer: ROCm") for x in lines)
    sp = pruned.search_space
    assert sp.custom_allreduce is not None  # xGMI is a full mesh: SGLang keeps it (is_full_nvlink via amdsmi)
    assert sp.attention_backend.choices == ["aiter", "triton"]
    assert sp.flags["--moe-runner-backend"].choices == ["auto", "triton"]
    assert sp.flags["--moe-a2a-backend"].choices == ["none", "mori"]


def test_cuda_prunes_aiter_and_b300_keeps_the_sm100_fusion() -> None:
    model = load_model_profile(KIMI)
    pruned, removed = prune_space(_spec("b300", "nvlink", SPACE), model, get_gpu("b300"))
    names = {(r.name, r.value) for r in removed}
    assert ("attention_backend", "aiter") in names and ("attention_backend", "fa3") in names  # fa3: SM80-90 only
    assert ("--moe-a2a-backend", "mori") in names and ("--moe-a2a-backend", "deepep") not in names
    assert pruned.search_space.flashinfer_allreduce_fusion is not None  # 10.3 is SGLang's SM100 family
    assert ("flashinfer_allreduce_fusion", None) not in names


@pytest.mark.parametrize("gpu,tp,expected", [  # SGLang 0.5.23 arg_groups/memory_hook.py:47-355's rule, worked by hand
    ("mi300x", 8, 0.862), ("mi355x", 8, 0.908), ("b300", 8, 0.899), ("b300", 1, 0.902), ("gb200", 8, 0.854),
    ("gb200", 1, 0.858), ("rtx-5090", 1, 0.777),
])
def test_sglangs_automatic_fraction_on_the_new_gpus(gpu: str, tp: int, expected: float) -> None:
    from autotune.sglang.defaults import auto_mem_fraction_static

    kind = get_gpu(gpu)  # ROCm: no prefill-graph term (prefill graphs are CUDA-only)
    f = auto_mem_fraction_static(kind.memory_mib, tp_size=tp, version="0.5.23", prefill_graph=False if kind.rocm else None)
    assert f == expected


def _plan(extra: str, gpu: str, model: Path = LLAMA) -> object:
    args = f"--model-path {model} --tp-size 8 --sim-gpu {gpu} --sim-sglang-version 0.5.23 {extra}"
    launch, sim = parse_args(args.split())
    prof = load_model_profile(launch.model_path)
    draft = load_draft(resolve_speculative(launch, prof, sim.version), prof)
    return plan_memory(launch, prof, draft, sim.gpu, version=sim.version, interconnect=sim.interconnect)


def test_rocm_custom_allreduce_buffer_and_no_prefill_graphs() -> None:
    on, off = _plan("", "mi300x"), _plan("--disable-custom-all-reduce", "mi300x")
    assert on.custom_ar_active and (off.p_gib - on.p_gib) * GIB == pytest.approx(40 * MIB)  # 16 MiB buffers
    assert not on.prefill_graphs_on and _plan("", "h200").prefill_graphs_on


def test_aiter_scales_f_by_085_above_8192_context_in_sim_and_model() -> None:
    # Llama-3.1-70B-class: 131072 context, MHA -> aiter by default on ROCm: f 0.9 becomes 0.765 (attention_hook.py)
    sim = _plan("--mem-fraction-static 0.9", "mi300x")
    assert sim.f == pytest.approx(0.765)
    short = _plan("--mem-fraction-static 0.9 --context-length 8192", "mi300x")
    assert short.f == pytest.approx(0.9)
    model = load_model_profile(LLAMA)
    cfg = ServerConfig(model_path=str(LLAMA), tp_size=8, mem_fraction_static=0.9)
    pred = predict(model, "mi300x", cfg, version="0.5.23", interconnect="nvlink")
    assert pred.f == pytest.approx(0.765) and any("aiter" in n for n in pred.notes)
    # the uncalibrated model lands within 2 % of the simulated server's KV pool
    assert abs(pred.kv_tokens - sim.kv_tokens) / sim.kv_tokens < 0.02
    honor = ServerConfig(model_path=str(LLAMA), tp_size=8, mem_fraction_static=0.9,
                         env=(("SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION", "1"),))
    assert predict(model, "mi300x", honor, version="0.5.23", interconnect="nvlink").f == pytest.approx(0.9)


class FakeAmdSmi:
    """The calls autotune.node.amd makes of ROCm's ``amdsmi`` module, over (market name, gfx, VRAM bytes)."""

    class AmdSmiMemoryType:
        VRAM = 0

    def __init__(self, gpus: list[tuple[str, str, int]], *, xgmi: bool) -> None:
        self.gpus, self.xgmi, self.open = gpus, xgmi, 0

    def amdsmi_init(self) -> None:
        self.open += 1

    def amdsmi_shut_down(self) -> None:
        self.open -= 1

    def amdsmi_get_processor_handles(self) -> list[int]:
        return list(range(len(self.gpus)))

    def amdsmi_get_gpu_asic_info(self, h: int) -> dict:
        return {"market_name": self.gpus[h][0], "target_graphics_version": self.gpus[h][1]}

    def amdsmi_get_gpu_memory_total(self, h: int, kind: int) -> int:
        assert kind == self.AmdSmiMemoryType.VRAM
        return self.gpus[h][2]

    def amdsmi_get_gpu_driver_info(self, h: int) -> dict:
        return {"driver_version": "6.10.5"}

    def amdsmi_topo_get_link_type(self, a: int, b: int) -> dict:
        return {"hops": 1, "type": 2} if self.xgmi else {"hops": 2, "type": 1}


def _amd_node(monkeypatch: pytest.MonkeyPatch, fake: FakeAmdSmi) -> None:
    from fake_nvml import node_of

    from autotune.node import auto
    from autotune.node.amd import read_amd_node
    from autotune.node.nvml import read_node

    monkeypatch.setattr(auto, "read_node", lambda: read_node(node_of("x", 1, (9, 0), fail_init=True)))
    monkeypatch.setattr(auto, "read_amd_node", lambda: read_amd_node(fake))
    monkeypatch.setattr(auto, "read_topology", lambda: None)


@pytest.mark.parametrize("market,gfx,total,expected", [
    ("AMD Instinct MI300X", "gfx942", 206141652992, "mi300x"),
    ("0x74a5", "gfx950", 309220868096, "mi355x"),  # a bare device id: gfx and memory decide
])
def test_auto_on_an_amd_node_reads_amd_smi(monkeypatch: pytest.MonkeyPatch, market: str, gfx: str, total: int,
                                           expected: str) -> None:
    from autotune.node import auto

    fake = FakeAmdSmi([(market, gfx, total)] * 8, xgmi=True)
    _amd_node(monkeypatch, fake)
    hw, notes = auto.resolve_hardware({"gpu": "auto"})
    assert hw == {"gpu": expected, "num_gpus": 8, "interconnect": "nvlink"} and fake.open == 0
    assert any("links XGMI" in n for n in notes)


def test_an_amd_card_outside_the_catalogue_keeps_the_rocm_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.node import auto

    _amd_node(monkeypatch, FakeAmdSmi([("AMD Instinct MI250X", "gfx90a", 68702699520)] * 4, xgmi=False))
    hw, notes = auto.resolve_hardware({"gpu": "auto"})
    kind = get_gpu(hw["gpu"])
    assert (kind.memory_mib, kind.vendor, kind.gfx, kind.sm) == (65520, "amd", "gfx90a", 0)
    assert hw["interconnect"] == "pcie" and "gfx90a: not in the catalogue" in notes[0]
    assert "sm" not in kind.unknown  # an AMD card has no compute capability to miss


@pytest.mark.parametrize("gpu,dtype", [("mi300x", "torch.float8_e4m3fnuz"), ("mi355x", "torch.float8_e4m3fn"),
                                       ("h200", "torch.float8_e4m3fn")])
def test_the_simulated_server_logs_mi300s_fp8_as_fnuz(gpu: str, dtype: str) -> None:
    import asyncio
    import io

    from autotune.sim.startup import LogWriter, boot

    args = (f"--model-path {LLAMA} --tp-size 8 --sim-gpu {gpu} --sim-sglang-version 0.5.23 --sim-time-scale 1000000 "
            "--kv-cache-dtype fp8_e4m3 --mem-fraction-static 0.9")
    launch, sim = parse_args(args.split())
    model = load_model_profile(launch.model_path)
    plan = plan_memory(launch, model, None, sim.gpu, version=sim.version, interconnect=sim.interconnect)
    out = io.StringIO()
    asyncio.run(boot(plan, launch, sim, model, LogWriter(sim, launch, stream=out)))
    assert f"KV Cache is allocated. dtype: {dtype}," in out.getvalue()
