"""The speed effects of the catalogue's knobs in the simulated server (private to :mod:`autotune.sim.perf.model`).

:func:`knob_speed` reads a launch's parsed flags and environment into a
:class:`KnobSpeed`; the speed model applies it. Every constant says where it
comes from: a published measurement (cited) or **[modelled]** (a plausible
figure, not fitted to any expected answer).

* ``SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1`` (0.5.23+, PCIe, TP 2/4/8): FlashInfer's
  PCIe-IPC allreduce serves reductions up to the decode width
  (``cuda_graph_max_bs x draft tokens x hidden``; prefill stays on NCCL, as
  SGLang sizes the workspace) at ``PCIE_IPC_NCCL_RATIO`` 0.70 of the measured
  NCCL time (uncaptured) **[derived from measured]**: SGLang 0.5.23
  ``pcie_ipc_ar.py`` reports TPOT 21.14 -> 13.62 ms at TP 8 on 8 x SM120, 7.5 ms
  over 122 allreduces = 62 us less than NCCL's measured 205 us at that size
  (143 / 205). The same docstring's kernel microbenchmark (5.3 / 15.3 / 34.6 us
  at 12 / 96 / 384 KiB, 34-39x faster than NCCL) does not survive end to end,
  so the end-to-end figure is used: the TPOT change on the simulator is
  therefore a calibration against that figure, not a validation.
* DP attention (``--enable-dp-attention --dp-size N`` / ``--attn-dp-size N``):
  each of the N attention-DP ranks attends over its own requests, so per GPU
  the MLA KV read is ``1/N`` of the context (GQA: unchanged, the heads were
  split already); the attention projections SGLang shards over the
  attention-TP group are whole on each of its ranks (read ``tp / attn_tp``
  times more; ``autotune/sglang/models/dp_attention.py``); the attention-output
  allreduce runs over the ``attn_tp`` ranks only (none at ``attn_tp`` 1) and
  the MoE layer's gather/scatter costs one allreduce of the whole batch
  (SGLang ``dp_attention.py``: ``dp_gather`` / ``dp_scatter``) **[modelled]**.
  0.5.9 multiplies ``--schedule-conservativeness`` by 0.3 under DP attention
  (``_handle_data_parallelism``).
* ``--ep-size`` without an all-to-all back-end: each rank holds ``E/ep``
  whole experts and the MoE output is still allreduced, so communication is
  unchanged; hot experts gate the step: expert reads x ``EP_IMBALANCE`` 1.10
  **[modelled]**.
* Kernel back-ends, as multipliers of the term they run **[modelled]**:
  ``MOE_RUNNER_SPEED`` on expert reads (SM120: tuned Triton MoE configs
  helped, 0.5.8.post1 PR #34827; flashinfer_cutlass is what 0.5.23 forces on
  SM120 for some models, ``overrides.py:1516``), ``FP8_GEMM_SPEED`` on dense
  compute of FP8 checkpoints, ``ATTENTION_BACKEND_SPEED`` on the KV read
  (SM120 defaults: triton for MLA, flashinfer for MHA); on Hopper ``ATTENTION_BACKEND_SPEED_SM90``
  against FA3 **[fitted on fitted.ATTENTION_BACKEND_SETS]**. The release's default backend is 1.0.
* ``--disable-overlap-schedule``: the scheduler's CPU work per step is no
  longer hidden behind the GPU: + ``OVERLAP_HIDDEN_S`` 1.0 ms +
  ``OVERLAP_HIDDEN_PER_REQ_S`` 4 us per request **[modelled]** (SGLang's
  zero-overhead scheduler post reports ~1.1x throughput from overlap).
* ``--num-continuous-decode-steps N``: half of the per-step overhead (batch
  formation) is paid once per N decode steps **[modelled]**.
* ``--enable-torch-compile``: decode steps at batch <= ``--torch-compile-max-bs``
  (default 32) run their GPU time x ``TORCH_COMPILE_FACTOR`` 0.90 **[modelled]**.
* ``--schedule-conservativeness c``: SGLang's new-token ratio starts at
  ``min(0.7 c, 1)`` and decays to ``min(0.1 c, 1)`` (``scheduler.py``); the
  engine admits accordingly.
* NCCL environment: ``NCCL_ALGO=Tree``: latency over ``2 log2(tp)`` hops
  instead of ``2 (tp-1)``, bandwidth x ``NCCL_TREE_BW_FACTOR`` 0.8
  **[modelled]**. ``NCCL_P2P_DISABLE=1`` or ``NCCL_P2P_LEVEL`` LOC/PIX on a
  switchless PCIe node: transfers staged through host memory, hop latency x2
  and bandwidth x ``NCCL_NO_P2P_BW_FACTOR`` 0.5 **[modelled]**.
* ``--schedule-policy lpm`` / ``dfs-weight``: every scheduling round that may admit
  a request (SGLang's ``get_new_batch_prefill`` past its ``batch_is_full`` check)
  matches each waiting request's prompt and output against the radix tree and
  inserts it into an in-batch tree (``SchedulePolicy.calc_priority``,
  ``_compute_prefix_matches``, ``schedule_policy.py:114-240`` at v0.5.9); ``lpm``
  falls back to FCFS above ``LPM_MATCH_MAX_WAITING`` 128 waiting requests (lines
  158-161), ``dfs-weight`` never does, and with ``--disable-radix-cache`` both are
  FCFS (164-180). CPU time of a round: ``POLICY_MATCH_PER_REQ_S`` 20 us per
  waiting request + ``POLICY_MATCH_PER_TOKEN_S`` 17 ns per token of theirs
  **[measured]**: 0.5.9's ``calc_priority`` timed on this repository's 2-core CI
  machine by ``benchmarks/schedule_policy_cpu.py`` (dfs-weight: 0.7 ms for 32
  waiting 2,000-token requests, 113 ms for 2,000; the least-squares fit, 19.7 us
  + 17.3 ns, rounded; within 25 % at 512 or more waiting, small queues of long
  prompts overstated up to 4.6x). 0.3.5.post2's code, without the in-batch tree,
  measured 4.1 us + 5.2 ns; a server CPU's single thread may be faster. Under
  the overlap scheduler the round runs while the GPU runs the previous batch,
  so only what exceeds that batch's time is added; without it, all of it
  (:mod:`autotune.sim.engine.scheduler`). The order a policy picks is not
  modelled (FCFS for all): on prompts that share no prefix it changes nothing
  but this CPU time.
* Accepted with no speed effect (said here, not hidden): ``--enable-mixed-chunk``;
  any flag or variable the catalogue does not know.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["KnobSpeed", "knob_speed"]

PCIE_IPC_NCCL_RATIO = 143.0 / 205.0
EP_IMBALANCE = 1.10
MOE_RUNNER_SPEED = {"auto": 1.0, "triton": 1.0, "flashinfer_cutlass": 0.93, "cutlass": 0.95, "triton_kernel": 1.05}
FP8_GEMM_SPEED = {"auto": 1.0, "triton": 1.08, "cutlass": 0.97, "flashinfer_cutlass": 0.97}
ATTENTION_BACKEND_SPEED = {"triton": 1.0, "flashinfer": 0.95, "fa3": 1.0, "torch_native": 3.0, "flex_attention": 1.3}
#: On Hopper, against SGLang's default there (FlashAttention-3 for MHA models): the KV-read factors
#: [fitted on fitted.ATTENTION_BACKEND_SETS: FlashInfer and Triton ran slower than FA3 there].
ATTENTION_BACKEND_SPEED_SM90 = {"fa3": 1.0, "flashinfer": 2.0, "triton": 2.5}
OVERLAP_HIDDEN_S = 1.0e-3
OVERLAP_HIDDEN_PER_REQ_S = 4e-6
#: One scheduling round's prefix matching per waiting request and per token of theirs (see the docstring)
#: [measured: SGLang 0.5.9's calc_priority on the CI machine's CPU, benchmarks/schedule_policy_cpu.py's fit].
POLICY_MATCH_PER_REQ_S = 20e-6
POLICY_MATCH_PER_TOKEN_S = 17e-9
#: SGLang's lpm turns its matching off above this many waiting requests (schedule_policy.py:158-161, v0.5.9).
LPM_MATCH_MAX_WAITING = 128
CACHE_AWARE_POLICIES = ("lpm", "dfs-weight")
TORCH_COMPILE_FACTOR = 0.90
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = 0.1
NCCL_TREE_BW_FACTOR = 0.8
NCCL_NO_P2P_BW_FACTOR = 0.5
_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class KnobSpeed:
    """The resolved speed-relevant knobs of one launch (defaults: SGLang's)."""

    attn_dp: int = 1
    ep_size: int = 1
    pcie_ipc: bool = False
    nccl_tree: bool = False
    nccl_no_p2p: bool = False
    overlap: bool = True
    continuous_decode_steps: int = 1
    torch_compile_max_bs: int = 0  # 0: torch.compile off
    moe_runner: str = "auto"
    fp8_gemm: str = "auto"
    attention_backend: str | None = None
    schedule_conservativeness: float = 1.0
    moe_a2a: str = "none"  # --moe-a2a-backend (deepep, ...): the MoE's dispatch/combine (perf.forward)
    spec_v2: bool = False  # SGLANG_ENABLE_SPEC_V2: EAGLE keeps the overlap scheduler
    schedule_policy: str = "fcfs"

    @property
    def moe_factor(self) -> float:
        return MOE_RUNNER_SPEED.get(self.moe_runner, 1.0) * (EP_IMBALANCE if self.ep_size > 1 else 1.0)

    def attention_factor_on(self, sm_family: int) -> float:
        """The named attention backend's KV-read factor; the release's own default backend is the reference."""
        if not self.attention_backend:
            return 1.0
        table = ATTENTION_BACKEND_SPEED_SM90 if sm_family == 90 else {}
        return table.get(self.attention_backend, ATTENTION_BACKEND_SPEED.get(self.attention_backend, 1.0))

    def new_token_ratios(self) -> tuple[float, float]:
        c = self.schedule_conservativeness
        return min(INIT_NEW_TOKEN_RATIO * c, 1.0), min(MIN_NEW_TOKEN_RATIO * c, 1.0)

    def schedule_round_s(self, waiting: int, waiting_tokens: int) -> float:
        """CPU seconds of one scheduling round's prefix matching over ``waiting`` requests holding
        ``waiting_tokens`` prompt and output tokens (0 for a policy that does not match)."""
        p = self.schedule_policy
        if p == "dfs-weight" or (p == "lpm" and waiting <= LPM_MATCH_MAX_WAITING):
            return waiting * POLICY_MATCH_PER_REQ_S + waiting_tokens * POLICY_MATCH_PER_TOKEN_S
        return 0.0

    def overhead(self, base: float, batch: int, *, decode: bool) -> float:
        """Per-step scheduler overhead ``base`` as these knobs change it."""
        if decode and self.continuous_decode_steps > 1:
            base *= 0.5 + 0.5 / self.continuous_decode_steps
        if not self.overlap:
            base += OVERLAP_HIDDEN_S + OVERLAP_HIDDEN_PER_REQ_S * batch
        return base


def _raw(raw: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if raw.get(n) is not None:
            return raw[n]
    return default


def knob_speed(raw: dict[str, Any], env: dict[str, str], *, version: Any, interconnect: str, tp_size: int,
               attn_dp: int) -> KnobSpeed:
    """A launch's speed knobs from its parsed SGLang args (``raw``) and environment."""
    v = version
    ipc_env = str(env.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "")).lower() in _TRUE
    ipc = ipc_env and v.at_least("0.5.23") and interconnect == "pcie" and tp_size in (2, 4, 8)
    p2p_level = str(env.get("NCCL_P2P_LEVEL", "")).upper()
    no_p2p = str(env.get("NCCL_P2P_DISABLE", "")).lower() in _TRUE or p2p_level in ("LOC", "PIX", "NVL")
    conserv = float(_raw(raw, "schedule_conservativeness", default=1.0) or 1.0)
    if attn_dp > 1 and not v.at_least("0.5.10"):
        conserv *= 0.3  # 0.5.9 _handle_data_parallelism
    compile_on = bool(_raw(raw, "enable_torch_compile", default=False))
    return KnobSpeed(
        attn_dp=attn_dp,
        ep_size=int(_raw(raw, "ep_size", default=1) or 1),
        pcie_ipc=ipc,
        nccl_tree=str(env.get("NCCL_ALGO", "")).lower() == "tree",
        nccl_no_p2p=no_p2p,
        overlap=not bool(_raw(raw, "disable_overlap_schedule", default=False)),
        continuous_decode_steps=max(int(_raw(raw, "num_continuous_decode_steps", default=1) or 1), 1),
        torch_compile_max_bs=int(_raw(raw, "torch_compile_max_bs", default=32) or 32) if compile_on else 0,
        moe_runner=str(_raw(raw, "moe_runner_backend", default="auto")),
        fp8_gemm=str(_raw(raw, "fp8_gemm_backend", default="auto")),
        attention_backend=_raw(raw, "attention_backend", "decode_attention_backend"),
        schedule_conservativeness=conserv,
        moe_a2a=str(_raw(raw, "moe_a2a_backend", default="none") or "none")
        if not _raw(raw, "enable_deepep_moe", default=False) else "deepep",
        spec_v2=str(env.get("SGLANG_ENABLE_SPEC_V2", "")).lower() in _TRUE,
        schedule_policy=str(_raw(raw, "schedule_policy", default="fcfs") or "fcfs"),
    )


def tree_hops(tp: int) -> float:
    return 2.0 * math.log2(max(tp, 2))
