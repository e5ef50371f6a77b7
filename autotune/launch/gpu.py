"""Wait until the GPU memory of stopped server processes is released.

Why: the next trial on the same GPUs measures free memory at startup; if the
previous server's memory is still held (the driver frees it a moment after
the process is gone), SGLang sees a smaller budget or fails with "The memory
capacity is unbalanced". Only active when nvidia-ml-py is importable and the
server's environment names GPUs; otherwise a no-op.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping

logger = logging.getLogger(__name__)


def names_gpus(env: Mapping[str, str]) -> bool:
    """True when ``CUDA_VISIBLE_DEVICES`` in ``env`` names at least one device."""
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return False
    return any(tok.strip() and tok.strip() not in ("-1", "NoDevFiles") for tok in cvd.split(","))


def wait_gpu_released(pids: Iterable[int], env: Mapping[str, str], *, timeout_s: float = 30.0, poll_s: float = 0.25) -> bool:
    """Wait until no GPU lists any of ``pids`` as a compute process; False on timeout.

    All devices are scanned (not only the visible ones) because CUDA's device
    order need not match NVML's. In a container with its own pid namespace NVML
    may report host pids; then nothing matches and this returns at once.
    """
    wanted = set(pids)
    if not wanted or not names_gpus(env):
        return True
    try:
        import pynvml  # noqa: PLC0415 - optional, only on GPU nodes
    except ImportError:
        return True
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no driver: nothing to wait for
        logger.debug("NVML unavailable (%s); not waiting for GPU memory", exc)
        return True
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        deadline = time.monotonic() + timeout_s
        while True:
            held: set[int] = set()
            for h in handles:
                try:
                    held.update(p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h))
                except Exception:  # noqa: BLE001, S112 - a device that cannot answer holds nothing we can wait on
                    continue
            held &= wanted
            if not held:
                return True
            if time.monotonic() >= deadline:
                logger.warning("GPU memory of pids %s still held after %.0f s", sorted(held), timeout_s)
                return False
            time.sleep(poll_s)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
