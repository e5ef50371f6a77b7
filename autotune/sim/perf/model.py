"""Speed model of the simulated SGLang server: how long one engine step takes.

(The roofline of one forward pass lives in :mod:`autotune.sim.perf.forward`,
the allreduce paths in :mod:`autotune.sim.perf.comm`; their constants are
documented here and there.)

The engine (:mod:`autotune.sim.engine.core`) asks this model for the modelled time of
each prefill and decode step. The model is a roofline per step, built so that
the launch knobs move speed the way they move it in real SGLang. Everything is
per GPU of one tensor-parallel group.

Data parallelism (``dp_size`` > 1, plain DP: independent replicas that the
router feeds evenly) is modelled as replicas stepping in lockstep: the engine
keeps one queue and one KV pool for all of them (the server passes the total),
and a step over ``B`` requests takes the time of one replica's step over
``ceil(B / dp)`` requests and ``1/dp`` of the KV context (prefill likewise).

Decode step (``decode_step_time_s``), for ``B`` running requests holding ``C`` KV tokens in total
(every term and its evidence: ``docs/simulator-speed.md``; the forward pass: :mod:`autotune.sim.perf.forward`;
what each GPU kind achieves: :mod:`autotune.sim.perf.gpu`):

* weights, compute, GEMM floors: the largest of the weight read (dense bytes + expert bytes x the share
  of experts ``B`` tokens touch, ``1 - (1 - k/E)^B``, divided by TP, at the GPU's achievable HBM
  bandwidth), the GEMM FLOPs at this checkpoint's tensor peak (FP8 checkpoints at the FP8 peak; a MoE's
  experts over their rows padded to the Triton MoE kernel's block of 16) and the GEMM kernels' floors;
* attention: the larger of the KV read and its FLOPs (MLA decode is compute-bound on H20);
* the MoE layers' activation traffic (the fused MoE kernel's intermediate caches), which grows with ``B``;
* small kernels: every norm, rope, KV store, routing and activation kernel costs at least the GPU's
  kernel floor, graph-replayed or not;
* allreduce: 2 per layer of ``B x hidden x 2 B`` (:mod:`autotune.sim.perf.comm`), including the PCIe
  CUDA-graph penalty; DeepEP-style dispatch/combine instead of the MoE's with ``--moe-a2a-backend``;
* launch: with a CUDA graph (``B <= cuda_graph_max_bs``; the batch is padded up to the next captured size
  of SGLang's ladder) a replay costs ``GRAPH_REPLAY_S`` 40 us. Eagerly, the CPU issues every kernel
  (``EAGER_CPU_PER_LAYER_S``: 150 us per dense layer, 300 us per MoE layer, +200 us for MLA attention and
  +200 us more for DSA's indexer **[fitted]**, each x the node's eager scale, 4 but on the seed-calibrated
  kinds) and the GPU idles between
  kernels (``EAGER_GAP_PER_LAYER_S``: 30 / 50 us); CPU launch overlaps GPU work, so an eager step is
  ``max(cpu, gpu) + gaps`` **[modelled]**;
* ``STEP_FIXED_S`` 300 us **[modelled]** + ``STEP_PER_REQ_S`` 15 us per request **[fitted]**: sampling,
  output processing and scheduler work not hidden by the overlap scheduler; without the overlap scheduler (the
  flag, or speculative decoding in 0.5.9) the scheduler's whole CPU work adds (:mod:`autotune.sim.perf.knobs`).
  Per request *of the scheduler's own*: every GPU runs a scheduler process, under pure TP each one schedules
  and post-processes the whole batch, under DP attention each one only its DP rank's requests (the controller
  sends each request to one rank: ``managers/data_parallel_controller.py`` ``round_robin_scheduler``) **[code]**,
  and the ranks meet every step, so a step waits for the largest rank's share.

Speculative decoding (EAGLE, EAGLE3, NEXTN->EAGLE, STANDALONE, NGRAM): one step is one draft/verify
cycle. Per-depth acceptance ``p``: ``SPEC_ACCEPT_P`` (MTP drafts, EAGLE on a checkpoint with its own
NextN layers: DeepSeek-V3's published 85-90 %; the others **[modelled]**). topk > 1 raises p to
``1 - (1-p) topk^-0.3`` and the tree depth is ``min(num_steps, num_draft_tokens - 1)``. Accepted tokens
per cycle ``(1 - p^(d+1)) / (1 - p)`` (the bonus token included). Cost of a cycle = ``num_steps`` draft
forwards over ``B x topk`` tokens (an MTP checkpoint's draft is its NextN head:
:func:`autotune.sim.perf.forward.mtp_head`) + one draft extend over the accepted tokens + one target
forward over ``B x num_draft_tokens`` tokens (its attention over that many queries per sequence; a MoE
sequence's draft tokens route mostly to the same experts: ``SPEC_ROUTING_LOCALITY`` 0.3 **[modelled]**)
+ ``SPEC_CYCLE_*`` (tree build and verify bookkeeping: 0.5 ms + 20 us per request **[modelled]**) + the
scheduler's CPU work, not hidden: 0.5.9 turns the overlap scheduler off under speculative decoding.

Prefill (``prefill_time_s``): the same forward over the step's tokens, eager, at the prefill share of
the tensor peak, + attention FLOPs over the step's (query, key) pairs (a later chunk of a long prompt
attends to its earlier chunks) + KV write + the draft's extend under speculative decoding.

TTFT comes out of the engine (:mod:`autotune.sim.engine.scheduler`): a request reaches the scheduler
``REQUEST_PATH_S`` after it is sent, waits for the batch that admits it (one step later under SGLang's
overlap scheduler), then for its prefill chunks, prefill having priority over decode.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, field, replace
from typing import Any

from autotune.sglang.defaults import decode_graph_batch_sizes
from autotune.sglang.knobs.config import SpeculativeConfig
from autotune.sim.perf.comm import CommSetup
from autotune.sim.perf.forward import GRAPH_REPLAY_S, Forward, mtp_head
from autotune.sim.perf.knobs import TORCH_COMPILE_FACTOR, KnobSpeed

__all__ = ["PerfInputs", "PerfModel", "graph_ladder"]

log = logging.getLogger(__name__)

STEP_FIXED_S = 300e-6  # [modelled]
#: From the client's send to the scheduler's queue: HTTP, the tokenizer manager, ZMQ. The engine admits a
#: request only once received (scheduler._admission_cutoff), so TTFT includes this and the scheduling
#: delay it causes.
#: [fitted on fitted.FITTED_SETS: TTFT, 8 ms] (1 ms before the first fit, modelled; 16 ms before the refit). More than HTTP, the tokenizer
#: manager and ZMQ take: it also holds what TTFT has that the model lacks (the first token's detokenisation and
#: streaming back, the client's own overhead), so it is a calibration, not a measurement of the request path.
REQUEST_PATH_S = 8e-3
#: ... and per input token: the tokenizer manager tokenises text prompts (bench_serving sends text)
#: [fitted on fitted.FITTED_SETS: 10 us a token]
REQUEST_PATH_PER_TOKEN_S = 10e-6
STEP_PER_REQ_S = 15e-6  # [fitted on fitted.FITTED_SETS] per running request per step (0.4 us before)
#: Per-depth acceptance by algorithm. MTP: DeepSeek-V3's second-token acceptance "ranges between 85% and 90%"
#: (DeepSeek-V3 technical report, arXiv 2412.19437, section 5.4.3): its midpoint **[published]**; the others
#: **[modelled]**.
SPEC_ACCEPT_P = {"EAGLE": 0.60, "EAGLE3": 0.75, "MTP": 0.875, "STANDALONE": 0.70, "NGRAM": 0.30}
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
    knobs: KnobSpeed = field(default_factory=KnobSpeed)  # the catalogue's speed knobs (perf.knobs)

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
        # 0.5.9 turns the overlap scheduler off under speculative decoding (server_args.py
        # _handle_speculative_decoding: "Overlap scheduler is disabled because of using eagle3 or standalone
        # speculative decoding"), except EAGLE with SGLANG_ENABLE_SPEC_V2 [code]
        self.request_path_s = REQUEST_PATH_S
        self.request_path_per_token_s = REQUEST_PATH_PER_TOKEN_S
        knobs = inputs.knobs
        self.overlap = knobs.overlap and (not self.spec_algorithm or (knobs.spec_v2 and self.spec_algorithm == "EAGLE"))
        self.knobs = knobs if self.overlap == knobs.overlap else replace(knobs, overlap=False)
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
        attn_dp = max(self.inputs.knobs.attn_dp, 1)
        if attn_dp > 1:
            # DP attention: each rank replays its own graph, keyed on the largest rank's batch, every rank padded
            # to it (0.5.9 model_executor/cuda_graph_runner.py:385-404, can_run: max(global_num_tokens) <= max_bs)
            # [code]; the batch is spread evenly over the ranks (round-robin dispatch)
            per_rank = self.graph_batch(-(-batch_size // attn_dp))
            padded = per_rank * attn_dp if per_rank is not None else None
        else:
            padded = self.graph_batch(batch_size)
        graph = padded is not None
        bs = padded if padded is not None else batch_size
        knobs = self.knobs
        own = -(-batch_size // attn_dp)  # the largest attention-DP rank's requests: its scheduler's own (above)
        overhead = knobs.overhead(STEP_FIXED_S + STEP_PER_REQ_S * own, own, decode=True)
        compiled = TORCH_COMPILE_FACTOR if 0 < batch_size <= knobs.torch_compile_max_bs else 1.0
        if not self.spec_algorithm:
            return self.target.step_s(bs, context_tokens, graph=graph) * compiled + overhead
        routed = bs * (1.0 + SPEC_ROUTING_LOCALITY * (self.spec_draft_tokens - 1))
        verify = self.target.step_s(bs * self.spec_draft_tokens, context_tokens, graph=graph, routed=routed,
                                    queries_per_seq=self.spec_draft_tokens)
        if self.draft is not None:  # each draft step: the draft's layers over the top-k branches, its own KV
            draft = self.spec_steps * self.draft.step_s(bs * self.spec_topk, context_tokens, graph=graph,
                                                        queries_per_seq=self.spec_topk)
            # after verification the draft extends over the accepted tokens to refresh its hidden states
            # (eagle_worker.py forward_draft_extend_after_decode, captured in its own CUDA graph) [code]
            accepted = max(int(round(self._accepted)), 1)
            draft += self.draft.step_s(bs * accepted, context_tokens, graph=graph, queries_per_seq=accepted)
        else:
            draft = NGRAM_DRAFT_PER_REQ_S * batch_size
        return verify + draft + overhead + SPEC_CYCLE_FIXED_S + SPEC_CYCLE_PER_REQ_S * batch_size

    def prefill_time_s(self, num_tokens: int, batch_reqs: int, attn_pairs: float | None = None) -> float:
        """Modelled seconds of one prefill (extend) step over ``num_tokens`` new tokens.

        ``attn_pairs``: (query, key) token pairs the step's attention computes, a chunk after the first
        attending to its request's earlier chunks too; default ``tokens^2 / (2 reqs)`` (whole prompts)."""
        if num_tokens <= 0:
            return 0.0
        dp = self.inputs.dp_size
        if dp > 1:
            num_tokens, batch_reqs = -(-num_tokens // dp), -(-batch_reqs // dp)
            attn_pairs = attn_pairs / dp if attn_pairs is not None else None
        reqs = max(batch_reqs, 1)
        m = self.inputs.model
        eff = self.target.speed.prefill
        base = self.target.step_s(num_tokens, 0.0, graph=False, efficiency=eff)
        pairs = num_tokens**2 / (2.0 * reqs) if attn_pairs is None else attn_pairs
        attn_flops = 4.0 * m.num_layers * m.num_attention_heads * m.head_dim * pairs
        attn = attn_flops / self.inputs.tp_size / (self.target.flops * eff)
        kv_write = num_tokens * self.target.kv_token_bytes / self.target.bw
        extra = 0.0
        if self.draft is not None:  # the draft extends over the same tokens
            extra = self.draft.step_s(num_tokens, 0.0, graph=False, efficiency=eff)
        overhead = self.knobs.overhead(STEP_FIXED_S + STEP_PER_REQ_S * reqs, reqs, decode=False)
        return base + attn + kv_write + extra + overhead

    def describe(self) -> dict[str, Any]:
        """The constants and derived figures this model uses (for /sim/stats and logs)."""
        t = self.target
        return {
            "tp_size": self.inputs.tp_size,
            "dp_size": self.inputs.dp_size,
            "interconnect": self.inputs.interconnect,
            "gpu": getattr(self.inputs.gpu, "name", str(self.inputs.gpu)),
            "hbm_efficiency": t.speed.hbm,
            "gemm_efficiency": t.speed.gemm,
            "prefill_efficiency": t.speed.prefill,
            "attention_efficiency": t.speed.attention,
            "kernel_floor_s": t.speed.kernel_floor_s,
            "gpu_speed_kind": t.speed.kind,
            "gemm_peak_tflops": t.gemm_flops / 1e12,
            "small_kernels_s_per_step": t.small_s,
            "small_kernels_graph_s_per_step": t.small_graph_s,
            "graph_replay_s": GRAPH_REPLAY_S,
            "overlap_scheduler": self.overlap,
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
