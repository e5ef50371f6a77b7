"""The GPU catalogue: what autotune needs to know about each accelerator kind.

``memory_mib`` is what ``nvidia-smi --query-gpu=memory.total`` prints, because
that is the number SGLang's automatic defaults are computed from (reference
section 2). The other figures (memory bandwidth, dense BF16 tensor throughput,
host link and NVLink bandwidth, both in GB/s per direction) feed the simulated
server's speed model and the memory model's scaling; they are datasheet-class
values, not measurements.

AMD Instinct GPUs: SGLang on ROCm sizes its automatic defaults from rocminfo's
"Pool 1" size (``get_amdgpu_memory_capacity``, 0.5.23 ``srt/utils/common.py:682``),
the same figure ``rocm-smi --showmeminfo vram`` / ``amd-smi static`` print as the
VRAM total; ``memory_mib`` holds it in MiB. torch's ``mem_get_info`` (SGLang's
"avail mem") shows about 0.8-1.5 GiB less on every vendor (the context).
Sources of each figure are on its line; "[unverified]" marks a memory total no
public driver output was found for.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from autotune.errors import ConfigError
from autotune.limits import shown

__all__ = ["GPUS", "GpuKind", "custom_gpu_name", "get_gpu", "gpu_names", "unknown_figures"]


@dataclass(frozen=True)
class GpuKind:
    """One GPU model.

    ``sm`` is the CUDA compute capability as an integer (90 = Hopper, 100 = B200,
    103 = B300, 120 = RTX Blackwell); 0 on AMD, whose architecture is ``gfx``
    (gfx942 = MI300X/MI325X, gfx950 = MI355X). ``nvlink_gb_s`` is the GPU-to-GPU
    fabric per direction: NVLink, or on AMD Instinct the xGMI (Infinity Fabric)
    mesh, which the study's ``interconnect: nvlink`` (alias ``xgmi``) stands for;
    0 for cards without one. A machine may still be PCIe-only for NVLink-capable
    cards (the study says so with its ``interconnect``).
    """

    name: str
    memory_mib: int
    sm: int
    hbm_tb_s: float
    bf16_tflops: float
    pcie_gb_s: float
    nvlink_gb_s: float
    description: str = ""
    unknown: tuple[str, ...] = ()  # figures a custom GPU's description left out (borrowed or 0)
    vendor: str = "nvidia"  # "nvidia" (CUDA) | "amd" (ROCm)
    gfx: str = ""  # AMD only: the gfx architecture torch reports as gcnArchName

    @property
    def rocm(self) -> bool:
        """An AMD GPU: SGLang runs its ROCm (HIP) paths there."""
        return self.vendor == "amd"

    @property
    def sm_family(self) -> int:
        """The compute capability as SGLang's SM90/SM100/SM120 tests see it: the major version
        from Blackwell on (B300's 10.3 is "SM100", GB10's 12.1 is "SM120"), else ``sm``."""
        return self.sm // 10 * 10 if self.sm >= 100 else self.sm

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
    # H20: nvidia-smi "NVIDIA H20 ... 97871MiB" (a public nvidia-smi output of a 500 W H20, GitHub); 96 GB HBM3,
    # 4.0 TB/s, 148 TFLOPS bf16 dense, NVLink 900 GB/s both ways (NVIDIA H20 datasheet). The 141 GB H20 is another card.
    GpuKind("h20", 97871, 90, 4.0, 148.0, 50.0, 450.0, "H20 96GB HBM3"),
    GpuKind("b200", 183359, 100, 8.0, 2250.0, 50.0, 900.0, "B200 180GB HBM3e"),
    # B300: nvidia-smi 275040 MiB ("B300 SXM6 AC", public nvidia-smi output); 8 TB/s HBM3e, 2.25 PFLOPS bf16 dense per GPU (HGX B300 datasheet: 18 PF dense / 8),
    # NVLink 5 1.8 TB/s both ways; compute capability 10.3.
    GpuKind("b300", 275040, 103, 8.0, 2250.0, 50.0, 900.0, "B300 SXM6 288GB HBM3e"),
    # GB200 (per GPU of the superchip): nvidia-smi 189471 MiB (a public nvidia-smi output); 8 TB/s,
    # 2.5 PFLOPS bf16 dense (GB200 NVL72: 180 PF / 72), NVLink 5; the host link is NVLink-C2C to Grace.
    GpuKind("gb200", 189471, 100, 8.0, 2500.0, 450.0, 900.0, "GB200 186GB HBM3e (per GPU)"),
    # GB300 (per GPU, NVML "NVIDIA GB300 NVL"): 283679 MiB [unverified, derived]: NVML's nominal 278 GiB for the
    # board (298500227072 B in a public go-nvml MIG profile table, which gives B200 180 GiB and GB200 186 GiB)
    # less the 993 MiB GB200's nvidia-smi total lacks from its nominal 186 GiB. (Google's A4X Max: "roughly
    # 279 GB per GPU".) 8 TB/s, 2.5 PFLOPS bf16 dense (GB300 NVL72: 180 PF / 72), NVLink 5, compute capability 10.3.
    GpuKind("gb300", 283679, 103, 8.0, 2500.0, 450.0, 900.0, "GB300 288GB HBM3e (per GPU; memory_mib unverified)"),
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
    # RTX 5090: nvidia-smi 32607 MiB (public output; noonghunna/club-3090 issue #617); 1.79 TB/s GDDR7, 209.5 TFLOPS
    # fp16/bf16 tensor dense (NVIDIA RTX Blackwell GPU architecture whitepaper), PCIe 5, no NVLink.
    GpuKind("rtx-5090", 32607, 120, 1.792, 209.5, 50.0, 0.0, "GeForce RTX 5090 32GB GDDR7, PCIe 5 only"),
    GpuKind("a100-80", 81920, 80, 2.039, 312.0, 25.0, 300.0, "A100 SXM 80GB HBM2e"),
    GpuKind("a100-40", 40960, 80, 1.555, 312.0, 25.0, 300.0, "A100 SXM 40GB HBM2"),
    GpuKind("l40s", 46068, 89, 0.864, 362.0, 25.0, 0.0, "L40S 48GB GDDR6, PCIe 4 only"),
    # L20: 48 GB GDDR6 on the same AD102 board as L40S, so L40S's 46068 MiB nvidia-smi total [unverified];
    # 864 GB/s, 119.5 TFLOPS bf16 dense (NVIDIA L20 datasheet), PCIe 4, no NVLink.
    GpuKind("l20", 46068, 89, 0.864, 119.5, 25.0, 0.0, "L20 48GB GDDR6, PCIe 4 only (memory_mib unverified)"),
    GpuKind("rtx-4090", 24564, 89, 1.008, 165.0, 25.0, 0.0, "GeForce RTX 4090 24GB GDDR6X"),
    # AMD Instinct (OAM, 8 per node on a full xGMI mesh: 7 links per GPU). MI300X: rocm-smi VRAM total
    # 206141652992 B = 196592 MiB (public output; ROCm/legacy-rocm-build issue #4750); 5.3 TB/s HBM3, 1307.4 TFLOPS bf16
    # dense, xGMI 7 x 64 GB/s per direction (AMD Instinct MI300X datasheet); gfx942.
    GpuKind("mi300x", 196592, 0, 5.3, 1307.4, 50.0, 448.0, "AMD Instinct MI300X 192GB HBM3",
            vendor="amd", gfx="gfx942"),
    # MI325X: 256 GB HBM3E, 6.0 TB/s, 1307.4 TFLOPS bf16 dense, same xGMI as MI300X (AMD MI325X datasheet);
    # gfx942. 262128 MiB [unverified]: 256 GiB less the 16 MiB the MI300X and MI355X totals both lack.
    GpuKind("mi325x", 262128, 0, 6.0, 1307.4, 50.0, 448.0, "AMD Instinct MI325X 256GB HBM3E (memory_mib unverified)",
            vendor="amd", gfx="gfx942"),
    # MI355X: rocm-smi VRAM total 309220868096 B = 294896 MiB (public rocm-smi output); 8 TB/s
    # HBM3E, 2516 TFLOPS bf16 dense, xGMI 7 x 76.8 GB/s per direction (AMD Instinct MI355X datasheet); gfx950.
    GpuKind("mi355x", 294896, 0, 8.0, 2516.0, 50.0, 537.6, "AMD Instinct MI355X 288GB HBM3E",
            vendor="amd", gfx="gfx950"),
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
    "5090": "rtx-5090",
    "b300-sxm": "b300",
    "instinct-mi300x": "mi300x",
    "instinct-mi325x": "mi325x",
    "instinct-mi355x": "mi355x",
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
CUSTOM_PREFIX = "custom:"
# The figures a custom GPU may leave out, and what stands in for them (a GPU outside the
# catalogue described by its memory alone: the memory model needs nothing more).
_OPTIONAL = ("hbm_tb_s", "bf16_tflops", "sm", "nvlink_gb_s", "pcie_gb_s")


def custom_gpu_name(name: str, memory_mib: int, gfx: str | None = None, **figures: float | None) -> str:
    """A GPU outside the catalogue as one string that :func:`get_gpu` reads back.

    The string travels where a catalogue name does (study spec, trial request, the
    simulator's ``--sim-gpu``), so every process sees the same figures.
    ``custom:l4:memory_mib=23034:hbm_tb_s=0.3``; figures left out are unknown. ``gfx``
    (``gfx90a``) makes it an AMD GPU, judged by SGLang's ROCm rules.
    """
    label = re.sub(r"[^a-z0-9.-]+", "-", name.strip().lower()).strip("-") or "gpu"
    parts = [f"memory_mib={int(memory_mib)}"]
    parts += [f"{k}={figures[k]:g}" for k in _OPTIONAL if figures.get(k) is not None]
    if gfx:
        parts.append(f"gfx={re.sub(r'[^a-z0-9]', '', gfx.lower())}")
    return CUSTOM_PREFIX + label + ":" + ":".join(parts)


def unknown_figures(kind: GpuKind) -> list[str]:
    """Which of a custom kind's figures were not given (empty for catalogue kinds)."""
    return list(kind.unknown)


def _parse_custom(text: str) -> GpuKind:
    body = text[len(CUSTOM_PREFIX):]
    label, _, rest = body.partition(":")
    figures: dict[str, float] = {}
    gfx = ""
    for item in filter(None, rest.split(":")):
        key, eq, value = item.partition("=")
        if key == "gfx" and eq and re.fullmatch(r"gfx[0-9a-f]+", value):
            gfx = value
            continue
        if not eq or key not in ("memory_mib", *_OPTIONAL):
            raise ConfigError(f"gpu: bad custom GPU figure {shown(item)} in {shown(text)}")
        try:
            figures[key] = float(value)
        except ValueError:
            raise ConfigError(f"gpu: bad custom GPU figure {shown(item)} in {shown(text)}") from None
        if not math.isfinite(figures[key]) or figures[key] <= 0:
            raise ConfigError(f"gpu: custom GPU figure {shown(item)} must be a finite number > 0")
    if "memory_mib" not in figures:
        raise ConfigError(f"gpu: custom GPU {shown(text)} needs memory_mib > 0")
    mem = int(figures["memory_mib"])
    unknown = [k for k in ("hbm_tb_s", "bf16_tflops", "sm") if k not in figures and not (k == "sm" and gfx)]
    # Speed figures left out are borrowed from the catalogue GPU nearest in memory, so the
    # simulated backend can still run; the real engine's speed is measured, not predicted.
    near = min(_CATALOGUE, key=lambda g: abs(g.memory_mib - mem))
    desc = f"{label} (outside the catalogue, {mem} MiB"
    desc += f"; unknown: {', '.join(unknown)})" if unknown else ")"
    return GpuKind(
        name=text,
        memory_mib=mem,
        sm=int(figures.get("sm", 0)),
        hbm_tb_s=figures.get("hbm_tb_s", near.hbm_tb_s),
        bf16_tflops=figures.get("bf16_tflops", near.bf16_tflops),
        pcie_gb_s=figures.get("pcie_gb_s", 50.0),
        nvlink_gb_s=figures.get("nvlink_gb_s", 0.0),
        description=desc,
        unknown=tuple(unknown),
        vendor="amd" if gfx else "nvidia",
        gfx=gfx,
    )


def get_gpu(name: str) -> GpuKind:
    """Look up a GPU kind by name (case, ``_`` and spaces are forgiven), or read a
    ``custom:`` description (:func:`custom_gpu_name`).

    Raises :class:`ConfigError` naming the value and listing the known names.
    """
    if str(name).startswith(CUSTOM_PREFIX):
        return _parse_custom(str(name))
    key = str(name).strip().lower().replace("_", "-").replace(" ", "-")
    key = _ALIASES.get(key, key)
    if key == "cpu":
        return host_cpu()
    try:
        return GPUS[key]
    except KeyError:
        raise ConfigError(
            f"gpu: unknown GPU kind {shown(name)} (describe it: hardware.memory_mib, hbm_tb_s, bf16_tflops; "
            f"or gpu: auto on the node); known: {', '.join(gpu_names())}, cpu"  # the hint first: a clip cuts the list
        ) from None
