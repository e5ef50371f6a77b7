"""The GPUs as AMD SMI reports them (ROCm's ``amdsmi`` Python module; a fake module in tests).

``hardware: auto`` on an AMD Instinct node, where NVML cannot start. The calls are the
ones AMD documents for the Python API (``amdsmi_get_gpu_asic_info``, ``amdsmi_get_gpu_memory_total``
with ``AmdSmiMemoryType.VRAM``: the bytes rocm-smi prints as "VRAM Total Memory") and the link
query SGLang itself makes to decide whether custom allreduce may run (``amdsmi_topo_get_link_type``,
type 2 = XGMI, one hop: ``custom_all_reduce_utils.is_full_nvlink`` in SGLang 0.5.23).
"""

from __future__ import annotations

import contextlib
from typing import Any

from autotune.errors import ConfigError
from autotune.node.nvml import NvmlGpu, NvmlNode
from autotune.node.topology import XGMI, Topology

__all__ = ["load_amdsmi", "read_amd_node"]

_XGMI_TYPE = 2  # AMDSMI_IOLINK_TYPE_XGMI


def load_amdsmi() -> Any:
    """The ``amdsmi`` module, or ConfigError saying it is missing."""
    try:
        import amdsmi
    except ImportError:
        raise ConfigError("hardware: auto on an AMD node needs ROCm's amdsmi Python module") from None
    return amdsmi


def _call(am: Any, name: str, *args: Any, default: Any = None) -> Any:
    """``am.name(*args)``, or ``default`` where this amdsmi release lacks the call or the board the query."""
    fn = getattr(am, name, None)
    if fn is None:
        return default
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - AmdSmiLibraryException on boards / VMs without the query
        return default


def read_amd_node(amdsmi: Any = None) -> tuple[NvmlNode, Topology]:
    """Every AMD GPU the driver sees, and how they are linked (XGMI one hop, else PCIe).

    A GPU's name is its market name with the gfx architecture in brackets ("AMD Instinct MI300X
    (gfx942)"); ``sm`` is 0 (no CUDA compute capability). Raises ConfigError when AMD SMI cannot start.
    """
    am = amdsmi if amdsmi is not None else load_amdsmi()
    try:
        am.amdsmi_init()
    except Exception as exc:  # noqa: BLE001 - AmdSmiLibraryException: no driver loaded
        raise ConfigError(f"hardware: auto but AMD SMI cannot start here ({exc}); name the GPU in the study") from None
    try:
        handles = list(am.amdsmi_get_processor_handles())
        gpus, driver = [], ""
        for i, h in enumerate(handles):
            asic = _call(am, "amdsmi_get_gpu_asic_info", h, default={}) or {}
            name = str(asic.get("market_name") or "AMD GPU").strip()
            gfx = str(asic.get("target_graphics_version") or "").strip()
            total = int(am.amdsmi_get_gpu_memory_total(h, am.AmdSmiMemoryType.VRAM))
            driver = driver or str((_call(am, "amdsmi_get_gpu_driver_info", h, default={}) or {}).get("driver_version", ""))
            procs = _call(am, "amdsmi_get_gpu_process_list", h, default=[]) or []
            gpus.append(NvmlGpu(index=i, name=f"{name} ({gfx})" if gfx else name, memory_mib=total // 2**20, sm=0,
                                uuid=str(_call(am, "amdsmi_get_gpu_device_uuid", h, default="") or ""),
                                processes=tuple(int(p["pid"]) for p in procs if isinstance(p, dict) and "pid" in p)))
        links = {}
        for i, a in enumerate(handles):
            for j, b in enumerate(handles):
                if i != j:
                    link = _call(am, "amdsmi_topo_get_link_type", a, b, default={}) or {}
                    one_hop_xgmi = link.get("hops") == 1 and link.get("type") == _XGMI_TYPE
                    links[(i, j)] = XGMI if one_hop_xgmi else "PCIE"
        topo = Topology(gpus=tuple(f"GPU{i}" for i in range(len(handles))), links=links)
        return NvmlNode(driver=f"amdgpu {driver}".strip(), gpus=tuple(gpus)), topo
    finally:
        with contextlib.suppress(Exception):
            am.amdsmi_shut_down()
