"""wait_gpu_released against a stand-in nvidia-ml-py module (no GPU on the test machines)."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from autotune.launch.gpu import names_gpus, wait_gpu_released


def _fake_pynvml(monkeypatch: pytest.MonkeyPatch, holders: list[list[int]]) -> dict[str, int]:
    """Install a fake ``pynvml`` whose one device lists ``holders[i]`` on the i-th poll (last one repeats)."""
    calls = {"polls": 0, "init": 0, "shutdown": 0}
    mod = types.ModuleType("pynvml")

    def procs(_handle: object) -> list[SimpleNamespace]:
        i = min(calls["polls"], len(holders) - 1)
        calls["polls"] += 1
        return [SimpleNamespace(pid=p, usedGpuMemory=1 << 30) for p in holders[i]]

    mod.nvmlInit = lambda: calls.__setitem__("init", calls["init"] + 1)  # type: ignore[attr-defined]
    mod.nvmlShutdown = lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1)  # type: ignore[attr-defined]
    mod.nvmlDeviceGetCount = lambda: 1  # type: ignore[attr-defined]
    mod.nvmlDeviceGetHandleByIndex = lambda i: f"dev{i}"  # type: ignore[attr-defined]
    mod.nvmlDeviceGetComputeRunningProcesses = procs  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    return calls


def test_waits_until_the_pids_leave_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_pynvml(monkeypatch, [[111, 999], [111], [999]])
    assert wait_gpu_released([111], {"CUDA_VISIBLE_DEVICES": "0"}, timeout_s=5, poll_s=0.01)
    assert calls["polls"] == 3 and calls["init"] == calls["shutdown"] == 1


def test_times_out_when_memory_stays_held(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pynvml(monkeypatch, [[111]])
    assert not wait_gpu_released([111], {"CUDA_VISIBLE_DEVICES": "0"}, timeout_s=0.1, poll_s=0.01)


def test_no_gpus_named_means_no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_pynvml(monkeypatch, [[111]])
    assert wait_gpu_released([111], {}, timeout_s=5)
    assert wait_gpu_released([111], {"CUDA_VISIBLE_DEVICES": "-1"}, timeout_s=5)
    assert calls["polls"] == 0
    assert names_gpus({"CUDA_VISIBLE_DEVICES": "GPU-1f2e,3"}) and not names_gpus({"CUDA_VISIBLE_DEVICES": ""})
