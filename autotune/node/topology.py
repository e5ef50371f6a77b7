"""``nvidia-smi topo -m``: how the GPUs are linked (NVLink ``NV#`` vs PCIe paths)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

_PCIE = {"X", "SYS", "NODE", "PHB", "PXB", "PIX"}
#: An AMD pair joined by one xGMI hop (autotune.node.amd): the GPUs' own fabric, as NVLink is.
XGMI = "XGMI"


@dataclass(frozen=True)
class Topology:
    gpus: tuple[str, ...]  # "GPU0", ...
    links: dict[tuple[int, int], str]  # (i, j) -> "NV18" / "PIX" / "SYS" ..., i != j

    @property
    def nvlinked(self) -> bool:
        """Every pair of GPUs joined by NVLink (directly, as NV#) or, on AMD, by one xGMI hop."""
        return bool(self.links) and all(v.startswith("NV") or v == XGMI for v in self.links.values())

    @property
    def interconnect(self) -> str:
        """The study's ``hardware.interconnect``: "nvlink" only when every pair is NVLinked."""
        return "nvlink" if self.nvlinked else "pcie"

    def describe(self) -> str:
        kinds = sorted(set(self.links.values()))
        return f"{len(self.gpus)} GPUs, links {'/'.join(kinds) or 'none'}"


def parse_topo(text: str) -> Topology:
    """Parse the matrix part of ``nvidia-smi topo -m`` (NIC rows and legend ignored)."""
    header: list[str] | None = None
    rows: dict[int, list[str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"\t+", line.strip("\n")) if c.strip() != ""]
        if not cells:
            continue
        if header is None:
            if cells[0].startswith("GPU0"):
                header = [c for c in cells if re.fullmatch(r"GPU\d+", c)]
            continue
        m = re.fullmatch(r"GPU(\d+)", cells[0])
        if m:
            rows[int(m.group(1))] = cells[1:1 + len(header)]
        elif cells[0].startswith("Legend"):
            break
    if header is None:
        raise ValueError("no GPU matrix in nvidia-smi topo -m output")
    links = {}
    for i, cells in rows.items():
        for j, cell in enumerate(cells):
            if i != j:
                links[(i, j)] = cell
    return Topology(gpus=tuple(header), links=links)


def read_topology(timeout_s: float = 20.0) -> Topology | None:
    """Run ``nvidia-smi topo -m`` here; None when nvidia-smi is absent or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=timeout_s, check=True)
        return parse_topo(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
