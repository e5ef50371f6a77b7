"""Allreduce cost of the simulated SGLang server (private to :mod:`autotune.sim.perf.model`).

Every decoder layer of a tensor-parallel model does two allreduces (after the
attention output projection and after the MLP), each over a message of
``tokens x hidden x 2 B`` (bf16 activations). Which implementation runs
follows SGLang's selection order in ``GroupCoordinator.all_reduce``
(SGLang `distributed/parallel_state.py`): FlashInfer fusion (<= 2048 tokens) ->
custom allreduce (<= 8 MiB, only where SGLang keeps it active) -> torch
symmetric memory (<= 64/128 MiB) -> NCCL.

Constants (all per allreduce; GB/s are per direction). Each says whether it
is **[measured]** (a published figure, cited), **[fitted]** (chosen so the
seed case's observations come out) or **[modelled]** (a physical estimate):

* NCCL over PCIe, messages up to 384 KiB: **[measured]**
  :data:`PCIE_NCCL_TP8_MEASURED`, 205 / 585 / 1169 us at 12 / 96 / 384 KiB on
  8 x SM120 (RTX PRO 6000 class) across NUMA nodes: SGLang 0.5.23
  ``sglang/srt/distributed/device_communicators/pcie_ipc_ar.py`` (module
  docstring). Interpolated log-log between the points, extrapolated below
  12 KiB with the first segment's slope. Other world sizes scale with the
  ring's ``2 (tp-1)`` steps **[modelled]**. Other published figures on other
  PCIe topologies are lower (8 x RTX 6000D: 45 us at 4 KB, 344 us at 64 KB,
  SGLang PR #32479; 16 x RTX PRO 6000: 36 us at 14 KB, b12x PR #139): the
  cross-NUMA figure is the seed node's kind (8 GPUs, two sockets).
* NCCL over PCIe above 384 KiB: the measured 1169 us plus a ring bandwidth
  term at ``PCIE_NCCL_LARGE_BUSBW_GB_S`` 12 GB/s **[fitted]**: no published
  figure for decode-sized messages (1-4 MiB) on this topology; chosen so the
  seed case's +9 % for ``--cuda-graph-max-bs`` 128 over 512 stays within its
  5-15 % tolerance with the captured-graph penalty below.
* NCCL over NVLink: ``NCCL_BASE_LATENCY_S`` 5 us plus ``NVLINK_HOP_LATENCY_S``
  0.5 us per ring step (``2 (tp-1)`` steps) **[modelled]**: TP8 -> 12 us, the
  order of magnitude nccl-tests reports for small allreduces over NVLink.
* ``NCCL_BUS_EFFICIENCY`` 0.4 **[modelled]** (NVLink): NCCL bus bandwidth as a share of the link's
  datasheet figure (PCIe 5 x16, 50 GB/s usable -> ~20 GB/s busbw without P2P
  through a switch; NVLink 450 GB/s -> ~180 GB/s busbw for mid-size
  messages). Ring time = ``size x 2 (tp-1)/tp / busbw``.
* ``GRAPH_PCIE_PENALTY_MAX`` 1.5, ``GRAPH_PCIE_PENALTY_SIZE`` 2.5 MB,
  ``GRAPH_PCIE_PENALTY_STEEPNESS`` 8: **[fitted]** an NCCL allreduce
  captured in a CUDA graph replays with the protocol, algorithm and channel
  count chosen at capture time and loses the per-call tuning eager NCCL does;
  over PCIe (proxy-driven SHM/P2P transports) that costs bandwidth on large
  messages. The bandwidth term of a captured PCIe NCCL allreduce is multiplied
  by ``1 + 1.5 / (1 + (2.5 MB / size)^8)``. Chosen so that, on the seed case
  (8 x RTX PRO 6000 PCIe, kimi-k2-class, TP 8, the demo workload: 512 in /
  256 out, concurrency 256), graphs still win at batch <= 128 and
  ``--cuda-graph-max-bs 128`` beats 512 by 6-12 % across KV pools of
  125k-160k tokens (the real node: +9 %). NVLink (no penalty) keeps
  preferring graphs at every batch size.
* Custom allreduce (one-shot IPC for small messages, two-shot above 512 KiB):
  4 us on NVLink, 7 us on PCIe (TP2 P2P), bandwidth 0.6 of the link; only for
  messages <= 8 MiB (``max_size`` of the legacy CUDA implementation).
* Torch symmetric memory (NVLink multicast only): 4 us, 0.5 of the link,
  messages <= 64 MiB (TP2/4) or 128 MiB (TP6/8).
* FlashInfer allreduce fusion: fuses residual-add + RMSNorm into the
  allreduce (saves ``FUSION_SAVED_S`` 3 us per call) and exchanges through
  TRT-LLM IPC (lamport) buffers: one-shot (every rank reads ``tp-1`` peers) up
  to 512 KiB, two-shot above. On NVLink: 4 us, 0.6 of the link. Over PCIe the
  ranks poll each other's memory across the PCIe fabric: 143 us **[derived from
  measured]**, see ``FUSION_LATENCY_PCIE_S``, and only
  ``FUSION_PCIE_LINK_EFFICIENCY`` 0.25 of the link **[modelled]**, so at TP 8
  it beats NCCL only for tiny batches and loses at large ones (the seed case:
  "FlashInfer allreduce fusion ... failed or underperformed"). Used for <= 2048
  tokens only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from autotune.sim.perf.knobs import (
    NCCL_NO_P2P_BW_FACTOR,
    NCCL_TREE_BW_FACTOR,
    PCIE_IPC_NCCL_RATIO,
    tree_hops,
)

#: [measured] NCCL allreduce, 8 x SM120 over PCIe across NUMA nodes: (message bytes, seconds).
#: Source: SGLang 0.5.23 sglang/srt/distributed/device_communicators/pcie_ipc_ar.py, module docstring.
PCIE_NCCL_TP8_MEASURED: tuple[tuple[float, float], ...] = ((12 * 1024, 205e-6), (96 * 1024, 585e-6),
                                                          (384 * 1024, 1169e-6))
#: [fitted] bus bandwidth above the measured sizes (seed case: 128 beats 512 by 5-15 %).
PCIE_NCCL_LARGE_BUSBW_GB_S = 12.0
NCCL_BASE_LATENCY_S = 5e-6
NVLINK_HOP_LATENCY_S = 0.5e-6
NCCL_BUS_EFFICIENCY = 0.4
GRAPH_PCIE_PENALTY_MAX = 1.5  # [fitted] to the seed case, see the module docstring
GRAPH_PCIE_PENALTY_SIZE = 2.5e6  # [fitted]
GRAPH_PCIE_PENALTY_STEEPNESS = 8.0  # [fitted]
CUSTOM_AR_MAX_BYTES = 8 * 2**20
CUSTOM_AR_LATENCY_NVLINK_S = 4e-6
CUSTOM_AR_LATENCY_PCIE_S = 7e-6
IPC_LINK_EFFICIENCY = 0.6
SYMM_MEM_LATENCY_S = 4e-6
SYMM_MEM_LINK_EFFICIENCY = 0.5
FUSION_MAX_TOKENS = 2048
FUSION_LATENCY_NVLINK_S = 4e-6
#: [derived from measured] the PCIe IPC allreduce cut TPOT 21.14 -> 13.62 ms at TP 8 on SM120 (SGLang 0.5.23
#: pcie_ipc_ar.py): 7.5 ms over 122 allreduces = 62 us less than NCCL's 205 us, so ~143 us for an IPC
#: (lamport) exchange of a decode message across this topology. FlashInfer's fusion exchanges the same way.
FUSION_LATENCY_PCIE_S = 143e-6
FUSION_PCIE_LINK_EFFICIENCY = 0.08  # [fitted] the seed case: fusion underperformed NCCL at large batches
FUSION_ONESHOT_MAX_BYTES = 512 * 1024
FUSION_SAVED_S = 3e-6
ACT_BYTES = 2  # bf16 activations


@dataclass(frozen=True)
class CommSetup:
    """The resolved communication facts of one launch."""

    tp_size: int
    interconnect: str  # "pcie" | "nvlink"
    pcie_gb_s: float
    nvlink_gb_s: float
    custom_allreduce_active: bool
    flashinfer_allreduce_fusion: bool
    torch_symm_mem_active: bool
    pcie_ipc_max_bytes: float = 0.0  # > 0: the FlashInfer PCIe-IPC allreduce serves messages up to this size
    nccl_tree: bool = False
    nccl_no_p2p: bool = False

    @property
    def nvlink(self) -> bool:
        return self.interconnect == "nvlink" and self.nvlink_gb_s > 0

    @property
    def link_bytes_s(self) -> float:
        """Per-direction link bandwidth in bytes/s."""
        return (self.nvlink_gb_s if self.nvlink else self.pcie_gb_s) * 1e9


def _pcie_measured_s(size_bytes: float) -> float:
    """The measured TP 8 PCIe NCCL curve at ``size_bytes`` <= its last point (log-log interpolation)."""
    pts = PCIE_NCCL_TP8_MEASURED
    size = max(size_bytes, 1.0)
    for (s0, t0), (s1, t1) in zip(pts, pts[1:], strict=False):
        if size <= s1 or (s1, t1) == pts[-1]:
            slope = math.log(t1 / t0) / math.log(s1 / s0)
            return t0 * (size / s0) ** slope
    return pts[-1][1]


def nccl_allreduce_s(setup: CommSetup, size_bytes: float, *, captured: bool) -> float:
    """NCCL allreduce time; ``captured`` applies the PCIe CUDA-graph penalty."""
    tp = setup.tp_size
    ring_hops = max(2 * (tp - 1), 1)
    hops = tree_hops(tp) if setup.nccl_tree else ring_hops  # NCCL_ALGO=Tree (perf.knobs)
    bw_factor = NCCL_TREE_BW_FACTOR if setup.nccl_tree else 1.0
    if setup.nccl_no_p2p and not setup.nvlink:  # NCCL_P2P_DISABLE / NCCL_P2P_LEVEL LOC|PIX (perf.knobs)
        hops, bw_factor = hops * 2, bw_factor * NCCL_NO_P2P_BW_FACTOR
    if not setup.nvlink:
        last_size, last_t = PCIE_NCCL_TP8_MEASURED[-1]
        steps = (tp - 1) / 7 * hops / ring_hops  # the measured figures are TP 8's 2 x 7 ring steps
        latency = _pcie_measured_s(min(size_bytes, last_size)) * steps
        extra = max(size_bytes - last_size, 0.0)
        bw_term = extra * 2 * (tp - 1) / tp / (PCIE_NCCL_LARGE_BUSBW_GB_S * 1e9 * bw_factor)
    else:
        latency = NCCL_BASE_LATENCY_S + NVLINK_HOP_LATENCY_S * hops
        bw_term = size_bytes * 2 * (tp - 1) / tp / (setup.link_bytes_s * NCCL_BUS_EFFICIENCY * bw_factor)
    if captured and not setup.nvlink:
        ratio = GRAPH_PCIE_PENALTY_SIZE / max(size_bytes, 1.0)
        bw_term *= 1.0 + GRAPH_PCIE_PENALTY_MAX / (1.0 + ratio**GRAPH_PCIE_PENALTY_STEEPNESS)
    return latency + bw_term


def allreduce_s(setup: CommSetup, tokens: int, hidden: int, *, captured: bool) -> tuple[float, str]:
    """Time of one allreduce of ``tokens x hidden`` bf16 values and the path SGLang takes."""
    if setup.tp_size <= 1 or tokens <= 0:
        return 0.0, "none"
    size = float(tokens * hidden * ACT_BYTES)
    tp = setup.tp_size
    link = setup.link_bytes_s
    if setup.flashinfer_allreduce_fusion and tokens <= FUSION_MAX_TOKENS:
        lat = FUSION_LATENCY_NVLINK_S if setup.nvlink else FUSION_LATENCY_PCIE_S
        eff = IPC_LINK_EFFICIENCY if setup.nvlink else FUSION_PCIE_LINK_EFFICIENCY
        factor = (tp - 1) if size <= FUSION_ONESHOT_MAX_BYTES else 2 * (tp - 1) / tp
        return max(lat + size * factor / (link * eff) - FUSION_SAVED_S, 1e-6), "flashinfer_fusion"
    if setup.pcie_ipc_max_bytes and not setup.nvlink and size <= setup.pcie_ipc_max_bytes:
        plain = replace(setup, nccl_tree=False, nccl_no_p2p=False)
        return PCIE_IPC_NCCL_RATIO * nccl_allreduce_s(plain, size, captured=False), "pcie_ipc"
    if setup.custom_allreduce_active and size <= CUSTOM_AR_MAX_BYTES:
        lat = CUSTOM_AR_LATENCY_NVLINK_S if setup.nvlink else CUSTOM_AR_LATENCY_PCIE_S
        # two-shot (reduce-scatter + all-gather) moves 2 (tp-1)/tp of the message per rank
        factor = (tp - 1) if size <= 512 * 1024 else 2 * (tp - 1) / tp
        return lat + size * factor / (link * IPC_LINK_EFFICIENCY), "custom"
    if setup.torch_symm_mem_active:
        limit = (64 if tp <= 4 else 128) * 2**20
        if size <= limit:
            return SYMM_MEM_LATENCY_S + size / (link * SYMM_MEM_LINK_EFFICIENCY), "torch_symm_mem"
    return nccl_allreduce_s(setup, size, captured=captured), "nccl"


#: Where each allreduce constant comes from: name -> (kind, source). Kinds: "measured" (a published
#: figure), "derived" (arithmetic on measured figures), "fitted" (chosen so the seed case's observations
#: come out: not a validation), "modelled" (a physical estimate). benchmarks/sim_graph_bs.py prints it.
PROVENANCE: dict[str, tuple[str, str]] = {
    "PCIE_NCCL_TP8_MEASURED": ("measured", "205/585/1169 us at 12/96/384 KiB, 8 x SM120 across NUMA: "
                               "SGLang 0.5.23 device_communicators/pcie_ipc_ar.py"),
    "FUSION_LATENCY_PCIE_S": ("derived", "TPOT 21.14 -> 13.62 ms with the PCIe IPC allreduce (same file), "
                              "over 122 allreduces"),
    "PCIE_NCCL_LARGE_BUSBW_GB_S": ("fitted", "seed case: --cuda-graph-max-bs 128 beats 512 by ~9 %"),
    "GRAPH_PCIE_PENALTY_*": ("fitted", "seed case: --cuda-graph-max-bs 128 beats 512 by ~9 %"),
    "FUSION_PCIE_LINK_EFFICIENCY": ("fitted", "seed case: FlashInfer fusion underperformed NCCL"),
    "NCCL_BASE_LATENCY_S, NVLINK_HOP_LATENCY_S": ("modelled", "nccl-tests order of magnitude over NVLink"),
    "NCCL_BUS_EFFICIENCY": ("modelled", "share of the NVLink datasheet bandwidth"),
    "CUSTOM_AR_*, SYMM_MEM_*, IPC_LINK_EFFICIENCY": ("modelled", "no published figure on this node"),
    "PCIE_IPC_NCCL_RATIO (perf.knobs)": ("derived", ("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE: 143 / 205 us per decode "
                                                     "allreduce from TPOT 21.14 -> 13.62 ms (pcie_ipc_ar.py)")),
    "NCCL_TREE_*, NCCL_NO_P2P_* (perf.knobs)": ("modelled", "NCCL_ALGO=Tree, NCCL_P2P_DISABLE / NCCL_P2P_LEVEL"),
}
