"""The GPUs as NVML reports them (nvidia-ml-py's ``pynvml``; a fake module in tests).

Only NVML's library calls are used, never a process: reading the node is cheap enough
to do while a study file is loaded.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from autotune.errors import ConfigError


@dataclass(frozen=True)
class NvmlGpu:
    index: int
    name: str  # "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    memory_mib: int  # total, as nvidia-smi prints it
    sm: int  # compute capability as an integer: 90, 100, 120
    uuid: str = ""
    processes: tuple[int, ...] = field(default=())  # pids of compute processes on it


@dataclass(frozen=True)
class NvmlNode:
    driver: str
    gpus: tuple[NvmlGpu, ...]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def load_nvml() -> Any:
    """The ``pynvml`` module, or ConfigError saying how to get it."""
    try:
        import pynvml
    except ImportError:
        raise ConfigError("hardware: auto needs nvidia-ml-py (pip install -e '.[sglang]')") from None
    return pynvml


def read_node(nvml: Any = None) -> NvmlNode:
    """Every GPU NVML sees. ``nvml`` is a pynvml-like module (default: the real one).

    Raises ConfigError when NVML cannot start (no driver, no GPU).
    """
    nv = nvml if nvml is not None else load_nvml()
    try:
        nv.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raise ConfigError(f"hardware: auto but NVML cannot start here ({exc}); name the GPU in the study") from None
    try:
        driver = _text(nv.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(int(nv.nvmlDeviceGetCount())):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            major, minor = nv.nvmlDeviceGetCudaComputeCapability(h)
            try:
                procs = tuple(int(p.pid) for p in nv.nvmlDeviceGetComputeRunningProcesses(h))
            except Exception:  # noqa: BLE001 - not supported on some boards: unknown, not "none"
                procs = ()
            gpus.append(NvmlGpu(
                index=i,
                name=_text(nv.nvmlDeviceGetName(h)),
                memory_mib=int(nv.nvmlDeviceGetMemoryInfo(h).total) // (1024 * 1024),
                sm=int(major) * 10 + int(minor),
                uuid=_text(nv.nvmlDeviceGetUUID(h)),
                processes=procs,
            ))
        return NvmlNode(driver=driver, gpus=tuple(gpus))
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()
