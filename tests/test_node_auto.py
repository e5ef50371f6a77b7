"""hardware: auto through NVML (a fake module) and recorded nvidia-smi topo -m outputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.fake_nvml import node_of

from autotune.errors import ConfigError
from autotune.node import auto
from autotune.node.nvml import read_node
from autotune.node.study_file import load_study, study_from_data
from autotune.node.topology import parse_topo
from autotune.sglang.hardware.gpus import get_gpu
from autotune.spec import parse_study

FIX = Path(__file__).parent / "fixtures" / "nvidia_smi"
DEMO = Path(__file__).resolve().parents[1] / "studies" / "demo.yaml"
RTX = ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, (12, 0))


def _patch_node(monkeypatch: pytest.MonkeyPatch, nvml: object, topo_file: str | None) -> None:
    monkeypatch.setattr(auto, "read_node", lambda: read_node(nvml))
    text = (FIX / topo_file).read_text() if topo_file else None
    monkeypatch.setattr(auto, "read_topology", lambda: parse_topo(text) if text else None)


def test_topology_parses_pcie_and_nvlink_fixtures() -> None:
    pcie = parse_topo((FIX / "topo_8x_rtx_pro_6000_pcie.txt").read_text())
    assert pcie.gpus == tuple(f"GPU{i}" for i in range(8))
    assert pcie.links[(0, 1)] == "PIX" and pcie.links[(0, 4)] == "SYS" and pcie.links[(0, 2)] == "NODE"
    assert pcie.interconnect == "pcie"
    nv = parse_topo((FIX / "topo_8x_h100_sxm_nvlink.txt").read_text())
    assert len(nv.links) == 56 and set(nv.links.values()) == {"NV18"}
    assert nv.interconnect == "nvlink"


def test_auto_on_the_recorded_seed_node_resolves_to_the_demo_hardware(monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    _patch_node(monkeypatch, node_of(*RTX), "topo_8x_rtx_pro_6000_pcie.txt")
    data = yaml.safe_load(DEMO.read_text())
    want = data["hardware"]
    data["hardware"] = "auto"
    spec = study_from_data(data, source_path=str(DEMO))
    assert spec.hardware.model_dump() == want == {"gpu": "rtx-pro-6000", "num_gpus": 8, "interconnect": "pcie"}
    assert "catalogue 'rtx-pro-6000'" in caplog.text


def test_the_commands_load_a_study_file_of_hardware_auto_from_the_node(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    _patch_node(monkeypatch, node_of("NVIDIA H100 80GB HBM3", 81559, (9, 0)), "topo_8x_h100_sxm_nvlink.txt")
    data = yaml.safe_load(DEMO.read_text())
    data["hardware"] = {"gpu": "auto"}
    data["server"]["model_path"] = str(DEMO.parent / data["server"]["model_path"])
    path = tmp_path / "auto.yaml"
    path.write_text(yaml.safe_dump(data))
    spec = load_study(path)
    assert spec.hardware.model_dump() == {"gpu": "h100", "num_gpus": 8, "interconnect": "nvlink"}


def test_the_study_model_reads_no_node_and_says_where_auto_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_node() -> None:
        raise AssertionError("the study model read the node")

    monkeypatch.setattr(auto, "read_node", no_node)
    data = yaml.safe_load(DEMO.read_text())
    for hw in ("auto", {"gpu": "auto", "num_gpus": 2}, {"num_gpus": 2}):
        with pytest.raises(ConfigError, match=r"demo.yaml: hardware.gpu: 'auto' is read from the node .*load_study"):
            parse_study({**data, "hardware": hw}, source_path=str(DEMO))


def test_auto_keeps_what_the_study_states(monkeypatch: pytest.MonkeyPatch) -> None:
    _patch_node(monkeypatch, node_of("NVIDIA H100 80GB HBM3", 81559, (9, 0)), "topo_8x_h100_sxm_nvlink.txt")
    hw, _ = auto.resolve_hardware({"gpu": "auto", "num_gpus": 4})
    assert hw == {"gpu": "h100", "num_gpus": 4, "interconnect": "nvlink"}


@pytest.mark.parametrize("name,mem,cc", [
    ("NVIDIA L4", 23034, (8, 9)),
    ("NVIDIA H100 PCIe", 81559, (9, 0)),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 97887, (12, 0)),
    ("NVIDIA A10", 23028, (8, 6)),  # (B300 joined the catalogue: test_gpus_2026)
])
def test_auto_on_a_gpu_outside_the_catalogue_says_what_it_used(monkeypatch: pytest.MonkeyPatch, name: str,
                                                              mem: int, cc: tuple[int, int]) -> None:
    _patch_node(monkeypatch, node_of(name, mem, cc, n=2), None)
    hw, notes = auto.resolve_hardware({"gpu": "auto"})
    kind = get_gpu(hw["gpu"])
    assert kind.memory_mib == mem and kind.sm == cc[0] * 10 + cc[1]
    assert hw["num_gpus"] == 2 and hw["interconnect"] == "pcie"
    text = "\n".join(notes)
    assert "not in the catalogue" in text and "unknown: hbm_tb_s, bf16_tflops" in text
    assert "interconnect taken as pcie" in text


def test_a_gpu_described_in_the_study_uses_its_figures() -> None:
    hw, notes = auto.resolve_hardware({"gpu": "l4", "memory_mib": 23034, "hbm_tb_s": 0.3, "bf16_tflops": 121,
                                       "sm": 89, "num_gpus": 1, "interconnect": "pcie"})
    kind = get_gpu(hw["gpu"])
    assert (kind.memory_mib, kind.hbm_tb_s, kind.bf16_tflops, kind.sm) == (23034, 0.3, 121.0, 89)
    assert kind.unknown == () and "use its figures" in notes[0]


def test_memory_only_description_names_the_unknowns() -> None:
    hw, notes = auto.resolve_hardware({"gpu": "mystery", "memory_mib": 49152})
    assert get_gpu(hw["gpu"]).unknown == ("hbm_tb_s", "bf16_tflops", "sm")
    assert "unknown: hbm_tb_s, bf16_tflops, sm" in notes[0]


def test_description_without_memory_is_one_line_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^hardware.memory_mib: required"):
        auto.resolve_hardware({"gpu": "mystery", "hbm_tb_s": 1.0})


def test_auto_without_a_driver_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _patch_node(monkeypatch, node_of(*RTX, fail_init=True), None)
    with pytest.raises(ConfigError, match="NVML cannot start"):
        auto.resolve_hardware({"gpu": "auto"})


def test_mixed_gpu_kinds_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from support.fake_nvml import FakeNvml

    nv = FakeNvml([("NVIDIA H100 80GB HBM3", 81559, (9, 0), []), ("NVIDIA L4", 23034, (8, 9), [])])
    _patch_node(monkeypatch, nv, None)
    with pytest.raises(ConfigError, match="mixes GPU kinds"):
        auto.resolve_hardware({"gpu": "auto"})


def test_catalogue_names_from_nvml() -> None:
    assert auto.catalogue_name("NVIDIA H200", 143771) == "h200"
    assert auto.catalogue_name("NVIDIA A100-SXM4-80GB", 81920) == "a100-80"
    assert auto.catalogue_name("NVIDIA A100-SXM4-40GB", 40960) == "a100-40"
    assert auto.catalogue_name("NVIDIA GeForce RTX 4090", 24564) == "rtx-4090"
    assert auto.catalogue_name("NVIDIA H100 80GB HBM3", 95000) is None  # H100 NVL-sized memory: another card


def test_a_described_gpu_loads_through_the_study_file() -> None:
    data = yaml.safe_load(DEMO.read_text())
    data["hardware"] = {"gpu": "l4", "memory_mib": 23034, "hbm_tb_s": 0.3, "bf16_tflops": 121, "num_gpus": 8,
                        "interconnect": "pcie"}
    spec = study_from_data(data, source_path=str(DEMO))
    assert get_gpu(spec.hardware.gpu).memory_mib == 23034 and spec.hardware.num_gpus == 8
