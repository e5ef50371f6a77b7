"""The GPU catalogue: what autotune needs to know about each accelerator kind.

``memory_mib`` is what ``nvidia-smi --query-gpu=memory.total`` prints, because
that is the number SGLang's automatic defaults are computed from (reference
section 2). The other figures (memory bandwidth, dense BF16 tensor throughput,
host link and NVLink bandwidth, both in GB/s per direction) feed the simulated
server's speed model and the memory model's scaling; they are datasheet-class
values, not measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import ConfigError

__all__ = ["GpuKind", "GPUS", "get_gpu", "gpu_names"]


@dataclass(frozen=True)
class GpuKind:
    """One GPU model.

    ``sm`` is the compute capability as an integer (90 = Hopper, 100 = B200,
    120 = RTX Blackwell). ``nvlink_gb_s`` is 0 for cards without NVLink; a
    machine may still be PCIe-only for NVLink-capable cards (the study says so
    with its ``interconnect``).
    """

    name: str
    memory_mib: int
    sm: int
    hbm_tb_s: float
    bf16_tflops: float
    pcie_gb_s: float
    nvlink_gb_s: float
    description: str = ""

    @property
    def memory_gib(self) -> float:
        """Device capacity in GiB (nvidia-smi MiB / 1024)."""
        return self.memory_mib / 1024.0

    @property
    def has_nvlink(self) -> bool:
        return self.nvlink_gb_s > 0


_CATALOGUE: tuple[GpuKind, ...] = (
    GpuKind("h100", 81559, 90, 3.35, 989.0, 50.0, 450.0, "H100 SXM 80GB HBM3"),
    GpuKind("h200", 143771, 90, 4.8, 989.0, 50.0, 450.0, "H200 SXM 141GB HBM3e"),
    # H20: 96 GB HBM3; 97871 MiB is a plausible nvidia-smi total, not verified on a card.
    GpuKind("h20", 97871, 90, 4.0, 148.0, 50.0, 450.0, "H20 96GB HBM3 (memory_mib unverified)"),
    GpuKind("b200", 183359, 100, 8.0, 2250.0, 50.0, 900.0, "B200 180GB HBM3e"),
    GpuKind(
        "rtx-pro-6000",
        97887,
        120,
        1.8,
        500.0,
        50.0,
        0.0,
        "RTX PRO 6000 Blackwell 96GB GDDR7, PCIe 5 only",
    ),
    GpuKind("a100-80", 81920, 80, 2.039, 312.0, 25.0, 300.0, "A100 SXM 80GB HBM2e"),
    GpuKind("a100-40", 40960, 80, 1.555, 312.0, 25.0, 300.0, "A100 SXM 40GB HBM2"),
    GpuKind("l40s", 46068, 89, 0.864, 362.0, 25.0, 0.0, "L40S 48GB GDDR6, PCIe 4 only"),
    GpuKind("rtx-4090", 24564, 89, 1.008, 165.0, 25.0, 0.0, "GeForce RTX 4090 24GB GDDR6X"),
)

GPUS: dict[str, GpuKind] = {g.name: g for g in _CATALOGUE}

_ALIASES: dict[str, str] = {
    "h100-80": "h100",
    "h100-sxm": "h100",
    "h200-141": "h200",
    "b200-180": "b200",
    "rtx-pro-6000-blackwell": "rtx-pro-6000",
    "rtxpro6000": "rtx-pro-6000",
    "a100": "a100-80",
    "a100-80gb": "a100-80",
    "a100-40gb": "a100-40",
    "4090": "rtx-4090",
}


def gpu_names() -> list[str]:
    """The catalogue's names, sorted."""
    return sorted(GPUS)


def host_cpu() -> GpuKind:
    """This host's CPU as the "device" of real SGLang on CPU (``server.device: cpu``).

    Its memory is the machine's RAM, which is what SGLang's "avail mem" reports there
    (psutil's available memory, shared with every other process). No speed figures:
    the memory model only needs the capacity, and the KV pool is capped by
    ``--max-total-tokens`` anyway.
    """
    import psutil

    return GpuKind("cpu", int(psutil.virtual_memory().total // 2**20), 0, 0.0, 0.0, 0.0, 0.0,
                   "host CPU (real SGLang on CPU; memory is the machine's RAM)")


def get_gpu(name: str) -> GpuKind:
    """Look up a GPU kind by name (case, ``_`` and spaces are forgiven).

    Raises :class:`ConfigError` naming the value and listing the known names.
    """
    key = str(name).strip().lower().replace("_", "-").replace(" ", "-")
    key = _ALIASES.get(key, key)
    if key == "cpu":
        return host_cpu()
    try:
        return GPUS[key]
    except KeyError:
        raise ConfigError(
            f"gpu: unknown GPU kind {name!r}; known: {', '.join(gpu_names())}, cpu"
        ) from None
