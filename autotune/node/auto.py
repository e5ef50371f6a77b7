"""``hardware: auto``: the study's hardware block filled in from the node itself.

NVML's device name is mapped to the GPU catalogue (:mod:`autotune.sglang.hardware.gpus`); a
name the catalogue does not hold becomes a custom GPU with NVML's memory and compute
capability, plus whatever the study says of its bandwidth and compute, and one line
saying what is then unknown.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from typing import Any

from autotune.errors import ConfigError
from autotune.limits import shown
from autotune.node.amd import read_amd_node
from autotune.node.nvml import NvmlNode, read_node
from autotune.node.topology import Topology, read_topology
from autotune.sglang.hardware.gpus import GPUS, custom_gpu_name, get_gpu, unknown_figures

log = logging.getLogger(__name__)

# NVML device names -> catalogue names. Order matters: the first match wins, so the
# variants that are NOT the catalogue's card (H100 PCIe / NVL, Max-Q editions) come first.
_NAME_RULES: tuple[tuple[str, str | None], ...] = (
    (r"h100.*(pcie|nvl)", None),  # lower clocks and bandwidth than the SXM part
    (r"max-?q", None),  # power-capped editions: same memory, less compute
    (r"h100", "h100"),
    (r"h200", "h200"),
    (r"\bh20\b", "h20"),
    (r"\bgb200\b", "gb200"),  # before b200: "NVIDIA GB200" contains it
    (r"\bgb300\b", "gb300"),
    (r"\bb200\b", "b200"),
    (r"\bb300\b", "b300"),  # "NVIDIA B300 SXM6 AC"
    (r"rtx pro 6000 blackwell (server|workstation)", "rtx-pro-6000"),
    (r"rtx 5090", "rtx-5090"),
    (r"\bl20\b", "l20"),
    (r"a100.*80\s*gb", "a100-80"),
    (r"a100.*40\s*gb|a100-(sxm|pcie)4?-40", "a100-40"),
    (r"l40s", "l40s"),
    (r"rtx 4090", "rtx-4090"),
    # AMD Instinct, as amd-smi / rocm-smi name them ("AMD Instinct MI300X", "MI355X OAM"): NVML never
    # reports these, but a name read from amd-smi maps through the same table.
    (r"mi300x", "mi300x"),
    (r"mi325x", "mi325x"),
    (r"mi355x", "mi355x"),
)
# The study may describe a GPU outside the catalogue with these hardware keys.
FIGURE_KEYS = ("memory_mib", "hbm_tb_s", "bf16_tflops", "sm", "nvlink_gb_s", "pcie_gb_s")


#: The largest memory a described GPU may claim (16 TiB; the largest GPU made holds 288 GiB).
MAX_MEMORY_MIB = 16 * 2**20


def _figure(key: str, value: Any) -> Any:
    """A GPU figure of the study (``hardware.memory_mib`` ...): a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"hardware.{key}: must be a finite number > 0 (got {shown(value)})")
    if key == "memory_mib" and value > MAX_MEMORY_MIB:
        raise ConfigError(f"hardware.memory_mib: more than {MAX_MEMORY_MIB:,} MiB (16 TiB) (got {shown(value)})")
    return value


def catalogue_name(nvml_name: str, memory_mib: int) -> str | None:
    """The catalogue name for an NVML device name, or None when it holds no such card.

    A name match whose memory differs from the catalogue's by more than 2 % is refused
    (a different edition of the card)."""
    low = nvml_name.lower()
    for pattern, name in _NAME_RULES:
        if re.search(pattern, low):
            if name is None:
                return None
            if abs(get_gpu(name).memory_mib - memory_mib) > 0.02 * memory_mib:
                return None
            return name
    # AMD SMI may give a bare device id as the market name: the gfx architecture and the memory decide
    gfx = re.search(r"\((gfx[0-9a-f]+)\)", low)
    if gfx:
        same = [g.name for g in GPUS.values() if g.gfx == gfx.group(1)
                and abs(g.memory_mib - memory_mib) <= 0.02 * memory_mib]
        return same[0] if len(same) == 1 else None
    return None


def _read_any_node() -> tuple[NvmlNode, Topology | None]:
    """NVML's node; where NVML cannot start, AMD SMI's (with its xGMI topology)."""
    try:
        return read_node(), None
    except ConfigError as nvml_error:
        try:
            return read_amd_node()
        except ConfigError:
            raise nvml_error from None


def resolve_hardware(hw: dict[str, Any], *, node: NvmlNode | None = None, topology: Topology | None = None,
                     read: Callable[[], NvmlNode] | None = None,
                     read_topo: Callable[[], Topology | None] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The hardware block with ``gpu`` (and, when absent, ``num_gpus`` and ``interconnect``)
    filled in. Returns (block, notes): notes are lines saying what was read and what is unknown.

    A block whose ``gpu`` is a catalogue name and has no figures is returned as it is. A GPU
    outside the catalogue with ``memory_mib`` becomes a custom GPU (no node read)."""
    hw = dict(hw)
    figures = {k: _figure(k, hw.pop(k)) for k in FIGURE_KEYS if k in hw}
    gpu = str(hw.get("gpu", "auto"))
    notes: list[str] = []
    if gpu != "auto":
        if not figures:
            return hw, notes  # a catalogue name (or a typo, which get_gpu will report)
        if "memory_mib" not in figures:
            raise ConfigError(f"hardware.memory_mib: required to describe a GPU outside the catalogue ({shown(gpu)})")
        hw["gpu"] = custom_gpu_name(gpu, **figures)
        notes.append(_unknown_line(hw["gpu"], "the study's description"))
        return hw, notes
    amd_topology: Topology | None = None
    if node is None:
        node, amd_topology = (read(), None) if read is not None else _read_any_node()
    if not node.gpus:
        raise ConfigError("hardware.gpu: auto but NVML sees no GPU on this node")
    kinds = {(g.name, g.memory_mib) for g in node.gpus}
    if len(kinds) > 1:
        raise ConfigError(f"hardware.gpu: auto but the node mixes GPU kinds {sorted(kinds)}; name the GPU")
    first = node.gpus[0]
    name = catalogue_name(first.name, first.memory_mib)
    if name is not None and not figures:
        hw["gpu"] = name
        notes.append(f"hardware: auto -> {len(node.gpus)} x {first.name} = catalogue {name!r} (driver {node.driver})")
    else:
        figures.setdefault("memory_mib", first.memory_mib)
        gfx = re.search(r"\((gfx[0-9a-f]+)\)", first.name.lower())
        if gfx is None:
            figures.setdefault("sm", first.sm)
        hw["gpu"] = custom_gpu_name(first.name, gfx=gfx.group(1) if gfx else None, **figures)
        arch = gfx.group(1) if gfx else f"sm {first.sm}"
        notes.append(f"hardware: auto -> {len(node.gpus)} x {first.name}, {first.memory_mib} MiB, "
                     f"{arch}: not in the catalogue (driver {node.driver})")
        notes.append(_unknown_line(hw["gpu"], "NVML"))
    hw.setdefault("num_gpus", len(node.gpus))
    if "interconnect" not in hw:
        topo = topology or amd_topology or (read_topo or read_topology)()
        if topo is None:
            hw["interconnect"] = "pcie"
            notes.append("hardware: nvidia-smi topo -m unavailable: interconnect taken as pcie")
        else:
            hw["interconnect"] = topo.interconnect
            notes.append(f"hardware: topology {topo.describe()} -> interconnect {topo.interconnect}")
    return hw, notes


def _unknown_line(descriptor: str, source: str) -> str:
    kind = get_gpu(descriptor)
    missing = unknown_figures(kind)
    if not missing:
        return f"hardware: {kind.description} from {source}: memory model and speed model use its figures"
    return (f"hardware: {kind.description}: memory from {source}; unknown: {', '.join(missing)}: the memory model "
            f"is unaffected, the simulated backend borrows the nearest catalogue GPU's speed, a real engine's "
            f"speed is measured only" + ("; sm unknown: SM90/SM100-only features are treated as off"
                                         if "sm" in missing else ""))


def resolve_study_data(data: dict[str, Any]) -> dict[str, Any]:
    """The raw study mapping with its hardware block resolved (``hardware: auto`` allowed).
    Logs what was read; returns the data unchanged when there is nothing to resolve."""
    hw = data.get("hardware")
    if hw == "auto":
        hw = {"gpu": "auto"}
    if not isinstance(hw, dict):
        return data
    block, notes = resolve_hardware(hw)
    for line in notes:
        log.warning("%s", line)
    return {**data, "hardware": block}
