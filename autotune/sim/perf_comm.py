"""Allreduce cost of the simulated SGLang server (private to :mod:`autotune.sim.perf`).

Every decoder layer of a tensor-parallel model does two allreduces (after the
attention output projection and after the MLP), each over a message of
``tokens x hidden x 2 B`` (bf16 activations). Which implementation runs
follows SGLang's selection order in ``GroupCoordinator.all_reduce``
(reference sglang-startup.md 3.2-3.4): FlashInfer fusion (<= 2048 tokens) ->
custom allreduce (<= 8 MiB, only where SGLang keeps it active) -> torch
symmetric memory (<= 64/128 MiB) -> NCCL.

Constants (all per allreduce; GB/s are per direction):

* ``NCCL_BASE_LATENCY_S`` 5 us plus ``*_HOP_LATENCY_S`` per ring step
  (``2 (tp-1)`` steps): 1.5 us per hop over PCIe (traffic through the host
  bridge / switch), 0.5 us per hop over NVLink. TP8 PCIe -> 26 us, TP8 NVLink
  -> 12 us: the "latency ~20-30 us over PCIe, NVLink much faster" of the brief,
  and the order of magnitude nccl-tests reports for 8-byte allreduces.
* ``NCCL_BUS_EFFICIENCY`` 0.4: NCCL bus bandwidth as a share of the link's
  datasheet figure (PCIe 5 x16, 50 GB/s usable -> ~20 GB/s busbw without P2P
  through a switch; NVLink 450 GB/s -> ~180 GB/s busbw for mid-size
  messages). Ring time = ``size x 2 (tp-1)/tp / busbw``.
* ``GRAPH_PCIE_PENALTY_MAX`` 1.0, ``GRAPH_PCIE_PENALTY_SIZE`` 2.4 MB,
  ``GRAPH_PCIE_PENALTY_STEEPNESS`` 8: **[modelled]** an NCCL allreduce
  captured in a CUDA graph replays with the protocol, algorithm and channel
  count chosen at capture time and loses the per-call tuning eager NCCL does;
  over PCIe (proxy-driven SHM/P2P transports) that costs bandwidth on large
  messages. The bandwidth term of a captured PCIe NCCL allreduce is multiplied
  by ``1 + 1.0 / (1 + (2.4 MB / size)^8)``: +10 % at batch 128, +75 % at
  batch 192, +97 % at batch 256 for a 7168-wide model. Calibrated on the seed
  case (8 x RTX PRO 6000 PCIe, kimi-k2-class, TP 8): graphs still win at
  batch <= 128, a decode step at batch 256 runs ~30 % faster eagerly, and at
  the demo workload (512 in / 256 out, concurrency 256, prefill and
  retractions included) ``--cuda-graph-max-bs 128`` beats 512 by 7-11 %
  depending on the KV pool (125k-400k tokens; the real node: +9 %). NVLink
  (no penalty) keeps preferring graphs at every batch size.
* Custom allreduce (one-shot IPC for small messages, two-shot above 512 KiB):
  4 us on NVLink, 7 us on PCIe (TP2 P2P), bandwidth 0.6 of the link; only for
  messages <= 8 MiB (``max_size`` of the legacy CUDA implementation).
* Torch symmetric memory (NVLink multicast only): 4 us, 0.5 of the link,
  messages <= 64 MiB (TP2/4) or 128 MiB (TP6/8).
* FlashInfer allreduce fusion: fuses residual-add + RMSNorm into the
  allreduce (saves ``FUSION_SAVED_S`` 3 us per call) and exchanges through
  TRT-LLM IPC (lamport) buffers: one-shot (every rank reads ``tp-1`` peers) up
  to 512 KiB, two-shot above. On NVLink: 4 us, 0.6 of the link. Over PCIe the
  ranks poll each other's memory across the PCIe fabric: 15 us and only
  ``FUSION_PCIE_LINK_EFFICIENCY`` 0.25 of the link **[modelled]**, so at TP 8
  it beats NCCL only for tiny batches and loses at large ones (the seed case:
  "FlashInfer allreduce fusion ... failed or underperformed"). Used for <= 2048
  tokens only.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.sim.perf_knobs import (
    NCCL_NO_P2P_BW_FACTOR,
    NCCL_TREE_BW_FACTOR,
    ipc_allreduce_s,
    tree_hops,
)

NCCL_BASE_LATENCY_S = 5e-6
PCIE_HOP_LATENCY_S = 1.5e-6
NVLINK_HOP_LATENCY_S = 0.5e-6
NCCL_BUS_EFFICIENCY = 0.4
GRAPH_PCIE_PENALTY_MAX = 1.0
GRAPH_PCIE_PENALTY_SIZE = 2.4e6
GRAPH_PCIE_PENALTY_STEEPNESS = 8.0
CUSTOM_AR_MAX_BYTES = 8 * 2**20
CUSTOM_AR_LATENCY_NVLINK_S = 4e-6
CUSTOM_AR_LATENCY_PCIE_S = 7e-6
IPC_LINK_EFFICIENCY = 0.6
SYMM_MEM_LATENCY_S = 4e-6
SYMM_MEM_LINK_EFFICIENCY = 0.5
FUSION_MAX_TOKENS = 2048
FUSION_LATENCY_NVLINK_S = 4e-6
FUSION_LATENCY_PCIE_S = 15e-6
FUSION_PCIE_LINK_EFFICIENCY = 0.25
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


def nccl_allreduce_s(setup: CommSetup, size_bytes: float, *, captured: bool) -> float:
    """Ring allreduce time; ``captured`` applies the PCIe CUDA-graph penalty."""
    tp = setup.tp_size
    hop = NVLINK_HOP_LATENCY_S if setup.nvlink else PCIE_HOP_LATENCY_S
    hops = tree_hops(tp) if setup.nccl_tree else 2 * (tp - 1)
    bus = setup.link_bytes_s * NCCL_BUS_EFFICIENCY * (NCCL_TREE_BW_FACTOR if setup.nccl_tree else 1.0)
    if setup.nccl_no_p2p and not setup.nvlink:
        hop, bus = hop * 2, bus * NCCL_NO_P2P_BW_FACTOR
    latency = NCCL_BASE_LATENCY_S + hop * hops
    bw_term = size_bytes * 2 * (tp - 1) / tp / bus
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
        return ipc_allreduce_s(size), "pcie_ipc"
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
