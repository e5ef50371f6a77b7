"""Weight loading from disk: how long a launch spends between "Load weight begin" and "Load weight end".

The TP ranks of one launch read disjoint slices of the same safetensors files, so the
node reads its checkpoint once, from local storage (cold) or from the OS page cache
when an earlier launch on the node read it (warm); each GPU also receives its share
over PCIe host->device, in parallel. The load takes the longer of the two. The node
is assumed to have the RAM to keep the checkpoint cached after its first read
(a node whose RAM cannot hold it would read cold every time: not modelled).

:func:`weight_load_s` is the one model: the simulated server's startup
(:func:`autotune.sim.startup.boot`, its log's ``elapsed=`` and its sleep) uses it, and
the offline evaluator runs that same ``boot`` on a virtual clock. Which launches are
warm: the server asks the node's page cache (:class:`PageCache`: a marker per
checkpoint in a directory of this host, like the kernel's cache it outlives the study
until the host is rebooted or the directory emptied); the offline evaluator keeps its
own record per study run (the first launch of a model in a study is cold, later ones warm).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

#: Cold read of a checkpoint from the node's local storage, GiB/s. [measured] vLLM issue #40821: a
#: 148.66 GiB checkpoint (46 safetensors shards) on local EXT4, larger than the node's RAM (so not
#: cached), loaded at ~1.1 s per 3.2 GiB shard on an RTX PRO 6000 node: ~2.9 GiB/s. (A PCIe 4.0 x4
#: NVMe drive is rated up to ~7 GB/s sequential; safetensors loading reaches less.)
COLD_READ_GIB_PER_S = 2.9
#: Warm read of a checkpoint the page cache holds, GiB/s. [measured] SGLang issue #3416: DeepSeek-V3's
#: 163 shards (~642 GiB) at ~3.1 shards/s on 8 x H200, ~52 s: ~12 GiB/s (the log does not say whether
#: the cache held it; it is the fastest public whole-checkpoint figure for this model class).
WARM_READ_GIB_PER_S = 12.0
#: Host->device copy per GPU, GiB/s. [modelled] about half of a PCIe 5.0 x16 link's 64 GB/s.
H2D_GIB_PER_S = 25.0

#: Where each constant comes from (printed by benchmarks/sim_graph_bs.py).
PROVENANCE: dict[str, tuple[str, str]] = {
    "COLD_READ_GIB_PER_S": ("measured", "~2.9 GiB/s: 148.66 GiB checkpoint, 46 shards, ~1.1 s/shard, local EXT4, "
                            "larger than RAM (vLLM issue #40821)"),
    "WARM_READ_GIB_PER_S": ("measured", "~12 GiB/s: DeepSeek-V3, 163 shards at ~3.1 shards/s on 8 x H200 "
                            "(SGLang issue #3416)"),
    "H2D_GIB_PER_S": ("modelled", "host->device per GPU, ~half a PCIe 5.0 x16 link"),
    "page cache": ("modelled", "first launch of a checkpoint on a node cold, later launches warm"),
}

PAGE_CACHE_MODES = ("auto", "cold", "warm")


def weight_load_s(checkpoint_gib: float, per_gpu_gib: float, *, warm: bool) -> float:
    """Modelled seconds to load a checkpoint of ``checkpoint_gib`` (the whole node's read) of which
    each GPU receives ``per_gpu_gib``."""
    read = checkpoint_gib / (WARM_READ_GIB_PER_S if warm else COLD_READ_GIB_PER_S)
    return max(read, per_gpu_gib / H2D_GIB_PER_S)


class PageCache:
    """The checkpoints this node has read: one marker file per checkpoint path in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @staticmethod
    def default() -> PageCache:
        """This host's cache: ``$AUTOTUNE_SIM_PAGE_CACHE_DIR``, else a per-user folder in the temp directory."""
        where = os.environ.get("AUTOTUNE_SIM_PAGE_CACHE_DIR")
        return PageCache(Path(where) if where else Path(tempfile.gettempdir()) / f"autotune-sim-page-cache-{os.getuid()}")

    def _marker(self, checkpoint: str) -> Path:
        return self.directory / hashlib.sha1(os.path.realpath(checkpoint).encode()).hexdigest()

    def holds(self, checkpoint: str) -> bool:
        return self._marker(checkpoint).exists()

    def add(self, checkpoint: str) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._marker(checkpoint).touch()
        except OSError:  # a read-only temp dir only costs later launches their warm read
            pass


def checkpoint_is_warm(mode: str, checkpoint: str) -> bool:
    """Whether this launch reads ``checkpoint`` warm: ``mode`` cold / warm, or auto (the node's page cache)."""
    if mode == "auto":
        return PageCache.default().holds(checkpoint)
    return mode == "warm"


def checkpoint_read(mode: str, checkpoint: str) -> None:
    """Record that the node read ``checkpoint`` (only the page cache of ``auto`` remembers)."""
    if mode == "auto":
        PageCache.default().add(checkpoint)


__all__ = ["COLD_READ_GIB_PER_S", "WARM_READ_GIB_PER_S", "H2D_GIB_PER_S", "PROVENANCE", "PAGE_CACHE_MODES",
           "PageCache", "checkpoint_is_warm", "checkpoint_read", "weight_load_s"]
