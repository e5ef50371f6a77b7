"""Speed model of the simulated SGLang server: how long one engine step takes.

(The roofline of one forward pass lives in :mod:`autotune.sim.perf_forward`,
the allreduce paths in :mod:`autotune.sim.perf_comm`; their constants are
documented here and there.)

The engine (:mod:`autotune.sim.engine`) asks this model for the modelled time of
each prefill and decode step. The model is a roofline per step, built so that
the launch knobs move speed the way they move it in real SGLang. Everything is
per GPU of one tensor-parallel group.

Data parallelism (``dp_size`` > 1, plain DP: independent replicas that the
router feeds evenly) is modelled as replicas stepping in lockstep: the engine
keeps one queue and one KV pool for all of them (the server passes the total),
and a step over ``B`` requests takes the time of one replica's step over
``ceil(B / dp)`` requests and ``1/dp`` of the KV context (prefill likewise).

Decode step (``decode_step_time_s``), for ``B`` running requests holding
``C`` KV tokens in total:

* weights: dense bytes + expert bytes x (share of experts touched by ``B``
  tokens, ``1 - (1 - k/E)^B``), divided by TP, read at ``hbm_tb_s`` x
  ``HBM_EFFICIENCY`` (0.8: achievable share of datasheet bandwidth for
  streaming GEMV reads). Dense and expert bytes are solved from
  ``weight_bytes = D + E e`` and ``active_param_bytes = D + k e``.
* compute: ``2 x params_active x B / (bf16_tflops x GEMM_EFFICIENCY)`` (0.55);
  the weight read and the GEMMs overlap, so the step takes the larger.
  ``params_active`` comes from the architecture (layers, hidden, heads,
  experts per token, vocabulary), independent of weight quantization.
* KV read: ``C x kv_bytes_per_token`` at the same bandwidth (MLA latent KV is
  replicated on every TP rank; GQA KV heads are split over TP).
* allreduce: 2 per layer of ``B x hidden x 2 B`` (:mod:`autotune.sim.perf_comm`),
  including the PCIe CUDA-graph penalty that makes batches above ~128 run
  faster eagerly on PCIe-only nodes.
* launch: with a CUDA graph (``B <= cuda_graph_max_bs``; the batch is padded
  up to the next captured size of SGLang's ladder) a replay costs
  ``GRAPH_REPLAY_S`` 40 us and no per-kernel gaps. Eagerly, the CPU issues
  every kernel (``EAGER_CPU_PER_LAYER_S``: 150 us per dense layer, 300 us per
  MoE layer, the Python/PyTorch dispatch of ~20-40 kernels at 5-8 us each)
  and the GPU idles between kernels (``EAGER_GAP_PER_LAYER_S``: 30 us dense,
  50 us MoE, ~1.5 us per kernel); CPU launch overlaps GPU work, so an eager
  step is ``max(cpu, gpu) + gaps``. Small batches are launch-bound (graphs
  win ~3x for the 61-layer MoE, ~1.2x for a dense 70B), large batches are
  GPU-bound (eager costs a few percent, unless the captured PCIe allreduce
  penalty outweighs that).
* ``STEP_FIXED_S`` 300 us + ``STEP_PER_REQ_S`` 0.4 us per request: sampling,
  output processing and scheduler work not hidden by the overlap scheduler.

Speculative decoding (EAGLE, EAGLE3, NEXTN->EAGLE, STANDALONE, NGRAM): one
step is one draft/verify cycle. Per-depth acceptance ``p`` is 0.60 (EAGLE),
0.75 (EAGLE3), 0.78 (MTP drafts: EAGLE on a checkpoint with its own MTP
layers), 0.70 (STANDALONE), 0.30 (NGRAM: no model, it matches repeated
text only). These are typical published acceptance figures, not measured
here. topk > 1 raises p to ``1 - (1-p) topk^-0.3`` and the tree depth is
``min(num_steps, num_draft_tokens - 1)``. Accepted tokens per cycle ``(1 - p^(d+1)) / (1 - p)``
(the bonus token included): diminishing returns in the number of steps. Cost
of a cycle = ``num_steps`` draft forwards over ``B x topk`` tokens + one target
forward over ``B x num_draft_tokens`` tokens (compute grows with draft tokens,
so large batches become compute-bound and lose; for MoE models the draft
tokens of one sequence route mostly to the same experts, so each extra one
counts as ``SPEC_ROUTING_LOCALITY`` 0.3 of an independently routed token
**[modelled]**) + ``SPEC_CYCLE_*`` (tree build and verify bookkeeping: 0.5 ms
+ 20 us of Python per request per cycle **[modelled]**; 0.5.9 disables the
overlap scheduler under speculative decoding, so none of it is hidden).

What comes out: dense llama-70b-class TP4 on H100 gains ~2.4x at batch 1,
~1.4-1.8x at batch 64 (the EAGLE-3 paper reports 1.38x at batch 64 in
SGLang) and loses from batch ~128. Large MoE models stay weight-read-bound
to larger batches, so their gain shrinks more slowly: on the PCIe seed case
EAGLE3 breaks even around batch 128-256, and with SGLang's default cap of 48
running requests it loses to plain decoding at concurrency 256.

Prefill (``prefill_time_s``): ``max(weights read, 2 x params x tokens /
(tflops x PREFILL_EFFICIENCY 0.6))`` + attention ``4 x layers x heads x
head_dim x tokens^2 / (2 x reqs)`` FLOPs + KV write + 2 allreduces per layer of
``tokens x hidden`` + eager launch (prefill runs without decode graphs).

Absolute sanity (see tests/test_sim_perf*.py and benchmarks/sim_graph_bs.py):
kimi-k2-class TP8 on 8 x RTX PRO 6000 PCIe decodes a few thousand tokens/s at
batch 256 (~1.8k from graphs, ~2.4k eager; about 1k at the demo workload,
where slow PCIe prefill and the KV pool weigh in); llama-70b-class TP4 on
H100 NVLink ~6k tokens/s at batch 128.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, field
from typing import Any

from autotune.sglang.defaults import decode_graph_batch_sizes
from autotune.sglang.knobs.config import SpeculativeConfig
from autotune.sim.perf_comm import CommSetup
from autotune.sim.perf_forward import (
    GEMM_EFFICIENCY,
    GRAPH_REPLAY_S,
    HBM_EFFICIENCY,
    PREFILL_EFFICIENCY,
    Forward,
    mtp_head,
)
from autotune.sim.perf_knobs import TORCH_COMPILE_FACTOR, KnobSpeed

__all__ = ["PerfInputs", "PerfModel", "graph_ladder"]

log = logging.getLogger(__name__)

STEP_FIXED_S = 300e-6
STEP_PER_REQ_S = 0.4e-6
SPEC_ACCEPT_P = {"EAGLE": 0.60, "EAGLE3": 0.75, "MTP": 0.78, "STANDALONE": 0.70, "NGRAM": 0.30}
SPEC_TOPK_EXPONENT = 0.3
SPEC_CYCLE_FIXED_S = 500e-6
SPEC_CYCLE_PER_REQ_S = 20e-6
SPEC_ROUTING_LOCALITY = 0.3
NGRAM_DRAFT_PER_REQ_S = 20e-6  # CPU-side n-gram trie lookup per request


def graph_ladder(max_bs: int, *, speculative: bool, version: str = "0.5.9") -> list[int]:
    """SGLang's decode CUDA-graph batch sizes up to ``max_bs`` (reference 3.1), for
    servers that do not pass their own ladder in :attr:`PerfInputs.graph_batch_sizes`."""
    return sorted(set(decode_graph_batch_sizes(max_bs, speculative=speculative, version=version)))


@dataclass(frozen=True)
class PerfInputs:
    """Everything the speed model needs about one launch (resolved by the server)."""

    model: Any  # autotune.sglang.models.profile.ModelProfile
    gpu: Any  # autotune.sglang.hardware.gpus.GpuKind
    tp_size: int = 1
    dp_size: int = 1
    interconnect: str = "pcie"
    cuda_graph_max_bs: int = 0
    cuda_graph_enabled: bool = True
    custom_allreduce_active: bool = False
    flashinfer_allreduce_fusion: bool = False
    torch_symm_mem_active: bool = False
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    draft: Any = None  # ModelProfile | None
    kv_cache_dtype_bytes: int = 2
    chunked_prefill_size: int = 8192
    graph_batch_sizes: tuple[int, ...] | None = None  # the server's ladder; None = derive
    sglang_version: str = "0.5.9"  # only picks the graph ladder when graph_batch_sizes is None
    knobs: KnobSpeed = field(default_factory=KnobSpeed)  # the catalogue's speed knobs (perf_knobs)

    def __post_init__(self) -> None:
        if self.tp_size < 1 or self.dp_size < 1:
            raise ValueError(f"tp_size/dp_size must be >= 1, got {self.tp_size}/{self.dp_size}")
        if self.interconnect not in ("pcie", "nvlink"):
            raise ValueError(f"interconnect must be 'pcie' or 'nvlink', got {self.interconnect!r}")


class PerfModel:
    """Modelled step times for one launch. Pure functions of the inputs; cheap to call."""

    def __init__(self, inputs: PerfInputs) -> None:
        self.inputs = inputs
        gpu = inputs.gpu
        self.comm = CommSetup(
            tp_size=inputs.tp_size,
            interconnect=inputs.interconnect,
            pcie_gb_s=gpu.pcie_gb_s,
            nvlink_gb_s=gpu.nvlink_gb_s,
            custom_allreduce_active=inputs.custom_allreduce_active,
            flashinfer_allreduce_fusion=inputs.flashinfer_allreduce_fusion,
            torch_symm_mem_active=inputs.torch_symm_mem_active,
            pcie_ipc_max_bytes=self._ipc_max_bytes(inputs),
            nccl_tree=inputs.knobs.nccl_tree,
            nccl_no_p2p=inputs.knobs.nccl_no_p2p,
        )
        self.target = Forward(inputs.model, inputs, self.comm)
        spec = inputs.speculative
        self.spec_algorithm = spec.algorithm.upper() if spec.algorithm else None
        if self.spec_algorithm == "NEXTN":
            self.spec_algorithm = "EAGLE"
        self.spec_steps = self.spec_topk = self.spec_draft_tokens = 0
        self.draft: Forward | None = None
        self.accept_p = 0.0
        self._accepted = 1.0
        if self.spec_algorithm:
            self._init_speculative(spec)
        max_bs = inputs.cuda_graph_max_bs if inputs.cuda_graph_enabled else 0
        if inputs.graph_batch_sizes is not None:
            ladder = sorted(b for b in inputs.graph_batch_sizes if 0 < b)
        else:
            ladder = graph_ladder(max_bs, speculative=self.spec_algorithm is not None, version=inputs.sglang_version)
        self.ladder: list[int] = ladder if inputs.cuda_graph_enabled else []

    @staticmethod
    def _ipc_max_bytes(inputs: PerfInputs) -> float:
        """The PCIe-IPC workspace: the widest decode reduction (max_bs x draft tokens x hidden x 2 B)."""
        if not inputs.knobs.pcie_ipc:
            return 0.0
        spec = inputs.speculative
        draft = (spec.num_draft_tokens or (spec.num_steps or 3) + 1) if spec.enabled else 1
        rows = (inputs.cuda_graph_max_bs if inputs.cuda_graph_enabled and inputs.cuda_graph_max_bs else 64) * draft
        return float(rows * inputs.model.hidden_size * 2)

    def _init_speculative(self, spec: SpeculativeConfig) -> None:
        algo = self.spec_algorithm or ""
        self.spec_steps = max(int(spec.num_steps or 3), 1)
        self.spec_topk = max(int(spec.eagle_topk or 1), 1)
        self.spec_draft_tokens = max(int(spec.num_draft_tokens or self.spec_steps + 1), 2)
        key = algo
        model = self.inputs.model
        if algo == "EAGLE" and getattr(model, "num_nextn_predict_layers", 0) > 0:
            key = "MTP"
        p = SPEC_ACCEPT_P.get(key, SPEC_ACCEPT_P["EAGLE"])
        p = 1.0 - (1.0 - p) * self.spec_topk ** (-SPEC_TOPK_EXPONENT)
        depth = min(self.spec_steps, self.spec_draft_tokens - 1)
        self.accept_p = p
        self._accepted = (1.0 - p ** (depth + 1)) / (1.0 - p)
        if algo != "NGRAM":
            draft_model = self.inputs.draft if self.inputs.draft is not None else mtp_head(model)
            self.draft = Forward(draft_model, self.inputs, self.comm)

    # --- public API -------------------------------------------------------------------

    def graph_batch(self, batch_size: int) -> int | None:
        """The captured batch size a decode batch is padded to, or None (runs eager)."""
        if not self.ladder or batch_size > self.ladder[-1]:
            return None
        return self.ladder[bisect.bisect_left(self.ladder, batch_size)]

    def accepted_tokens_per_step(self, batch_size: int) -> float:
        """Mean tokens each request gains per decode step (1.0 without speculative)."""
        return self._accepted

    def decode_step_time_s(self, batch_size: int, context_tokens: int) -> float:
        """Modelled seconds of one decode step (one draft/verify cycle under speculative)."""
        if batch_size <= 0:
            return 0.0
        dp = self.inputs.dp_size
        if dp > 1:
            batch_size, context_tokens = -(-batch_size // dp), context_tokens // dp
        padded = self.graph_batch(batch_size)
        graph = padded is not None
        bs = padded if padded is not None else batch_size
        knobs = self.inputs.knobs
        overhead = knobs.overhead(STEP_FIXED_S + STEP_PER_REQ_S * batch_size, batch_size, decode=True)
        compiled = TORCH_COMPILE_FACTOR if 0 < batch_size <= knobs.torch_compile_max_bs else 1.0
        if not self.spec_algorithm:
            return self.target.step_s(bs, context_tokens, graph=graph) * compiled + overhead
        routed = bs * (1.0 + SPEC_ROUTING_LOCALITY * (self.spec_draft_tokens - 1))
        verify = self.target.step_s(bs * self.spec_draft_tokens, context_tokens, graph=graph, routed=routed)
        if self.draft is not None:
            draft = self.spec_steps * self.draft.step_s(bs * self.spec_topk, 0.0, graph=graph)
        else:
            draft = NGRAM_DRAFT_PER_REQ_S * batch_size
        return verify + draft + overhead + SPEC_CYCLE_FIXED_S + SPEC_CYCLE_PER_REQ_S * batch_size

    def prefill_time_s(self, num_tokens: int, batch_reqs: int) -> float:
        """Modelled seconds of one prefill (extend) step over ``num_tokens`` new tokens."""
        if num_tokens <= 0:
            return 0.0
        dp = self.inputs.dp_size
        if dp > 1:
            num_tokens, batch_reqs = -(-num_tokens // dp), -(-batch_reqs // dp)
        reqs = max(batch_reqs, 1)
        m = self.inputs.model
        base = self.target.step_s(num_tokens, 0.0, graph=False, efficiency=PREFILL_EFFICIENCY)
        attn_flops = 4.0 * m.num_layers * m.num_attention_heads * m.head_dim * num_tokens**2 / (2.0 * reqs)
        attn = attn_flops / self.inputs.tp_size / (self.target.flops * PREFILL_EFFICIENCY)
        kv_write = num_tokens * self.target.kv_token_bytes / self.target.bw
        extra = 0.0
        if self.draft is not None:  # the draft extends over the same tokens
            extra = self.draft.step_s(num_tokens, 0.0, graph=False, efficiency=PREFILL_EFFICIENCY)
        overhead = self.inputs.knobs.overhead(STEP_FIXED_S + STEP_PER_REQ_S * reqs, reqs, decode=False)
        return base + attn + kv_write + extra + overhead

    def describe(self) -> dict[str, Any]:
        """The constants and derived figures this model uses (for /sim/stats and logs)."""
        t = self.target
        return {
            "tp_size": self.inputs.tp_size,
            "dp_size": self.inputs.dp_size,
            "interconnect": self.inputs.interconnect,
            "gpu": getattr(self.inputs.gpu, "name", str(self.inputs.gpu)),
            "hbm_efficiency": HBM_EFFICIENCY,
            "gemm_efficiency": GEMM_EFFICIENCY,
            "prefill_efficiency": PREFILL_EFFICIENCY,
            "graph_replay_s": GRAPH_REPLAY_S,
            "eager_cpu_s_per_step": t.eager_cpu,
            "eager_gap_s_per_step": t.eager_gap,
            "dense_bytes_per_gpu": t.dense_bytes,
            "expert_bytes_per_gpu": t.expert_bytes,
            "flop_params_per_gpu": t.params,
            "kv_bytes_per_token_per_gpu": t.kv_token_bytes,
            "chunked_prefill_size": self.inputs.chunked_prefill_size,
            "graph_batch_sizes": list(self.ladder),
            "cuda_graph_max_bs": self.ladder[-1] if self.ladder else 0,
            "custom_allreduce_active": self.inputs.custom_allreduce_active,
            "flashinfer_allreduce_fusion": self.inputs.flashinfer_allreduce_fusion,
            "torch_symm_mem_active": self.inputs.torch_symm_mem_active,
            "speculative_algorithm": self.spec_algorithm,
            "speculative_num_steps": self.spec_steps,
            "speculative_eagle_topk": self.spec_topk,
            "speculative_num_draft_tokens": self.spec_draft_tokens,
            "speculative_accept_p": self.accept_p,
            "accepted_tokens_per_step": self._accepted,
            "pcie_ipc_max_bytes": self.comm.pcie_ipc_max_bytes,
            "knobs": dict(vars(self.inputs.knobs)),
        }
