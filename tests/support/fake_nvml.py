"""A stand-in for nvidia-ml-py's ``pynvml`` module: the calls autotune.node makes, over a
list of (name, memory MiB, compute capability, running pids) tuples."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class FakeNvmlError(Exception):
    pass


class FakeNvml:
    def __init__(self, gpus: list[tuple[str, int, tuple[int, int], list[int]]], *, driver: str = "580.82.07",
                 fail_init: bool = False) -> None:
        self.gpus = gpus
        self.driver = driver
        self.fail_init = fail_init
        self.open = 0

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise FakeNvmlError("NVML Shared Library Not Found")
        self.open += 1

    def nvmlShutdown(self) -> None:
        self.open -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self.gpus[h][0].encode()

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(total=self.gpus[h][1] * 1024 * 1024, used=0, free=self.gpus[h][1] * 1024 * 1024)

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return self.gpus[h][2]

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-fake-{h:04d}"

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=1 << 30) for p in self.gpus[h][3]]


def node_of(name: str, memory_mib: int, cc: tuple[int, int], n: int = 8, busy: dict[int, list[int]] | None = None,
            **kw: Any) -> FakeNvml:
    busy = busy or {}
    return FakeNvml([(name, memory_mib, cc, busy.get(i, [])) for i in range(n)], **kw)
