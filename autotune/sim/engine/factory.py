"""Build the simulated server's token engine from its launch: one factory for every driver.

The server (``python -m autotune.sim``) and the offline evaluator
(:mod:`autotune.trial.offline`) must model the same engine for the same launch: the
speed model's inputs (model, GPU, parallelism, interconnect, CUDA graphs, all-reduce
paths, speculative decoding, KV dtype) and the scheduler's limits (KV pool, running
requests, chunk size, the runtime-OOM threshold, stream interval) come from the
memory plan and the parsed flags here, and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotune.sglang.models.profile import ModelProfile
from autotune.sim.args import Launch, SimOptions
from autotune.sim.engine.core import Engine
from autotune.sim.hardware import MemoryPlan
from autotune.sim.perf.knobs import knob_speed
from autotune.sim.perf.model import PerfInputs, PerfModel

__all__ = ["build_engine", "perf_inputs"]


def perf_inputs(plan: MemoryPlan, launch: Launch, sim: SimOptions, model: ModelProfile) -> PerfInputs:
    """The speed model's inputs for this launch on this simulated hardware."""
    kv_bytes = 1 if launch.kv_cache_dtype.startswith("fp8") or model.kv_cache_quant_fp8 else 2
    return PerfInputs(
        model=model, gpu=sim.gpu, tp_size=launch.tp_size, dp_size=launch.dp_size, interconnect=sim.interconnect,
        cuda_graph_max_bs=max(plan.graph_bs) if plan.graph_bs else 0, cuda_graph_enabled=bool(plan.graph_bs),
        custom_allreduce_active=plan.custom_ar_active, flashinfer_allreduce_fusion=plan.fi_fusion_active,
        torch_symm_mem_active=plan.torch_symm_active, speculative=plan.speculative, draft=plan.draft,
        kv_cache_dtype_bytes=kv_bytes, chunked_prefill_size=plan.chunked_prefill_size,
        graph_batch_sizes=tuple(plan.graph_bs), sglang_version=str(sim.version),
        knobs=knob_speed(launch.raw, sim.env, version=sim.version, interconnect=sim.interconnect,
                         tp_size=launch.tp_size, attn_dp=launch.attn_dp_size),
    )


def build_engine(plan: MemoryPlan, launch: Launch, sim: SimOptions, model: ModelProfile,
                 on_runtime_oom: Callable[[int], Any] | None = None) -> Engine:
    """The engine the simulated server runs for ``launch`` (not started).

    ``on_runtime_oom(num_tokens)`` is called when a prefill batch exceeds the activation
    headroom (the server dies there; offline, the engine just reports ``dead``). The
    time scale is the server's, slowed by the ``slow_tokens`` fault; the offline
    evaluator passes options with time scale 1 or steps the engine without sleeping.
    """
    # One KV pool and one scheduler per attention-DP rank and per plain DP replica (--dp-size replicas of
    # one server, fed by its router): the engine holds them all; the speed model steps replicas in lockstep.
    # Each rank's scheduler also admits its own prefill chunk (SGLang 0.5.9 server_args.py:2117 divides
    # --chunked-prefill-size by dp_size under DP attention: the chunk is per rank), so one engine step over all
    # the ranks takes up to ``ranks`` chunks; a plain DP replica is a whole server with its own chunk [code].
    ranks = max(plan.attn_dp_size, 1) * max(launch.dp_size, 1)
    oom = plan.prefill_oom_tokens * ranks if plan.prefill_oom_tokens is not None else None
    return Engine(PerfModel(perf_inputs(plan, launch, sim, model)), kv_tokens=plan.kv_tokens * ranks,
                  max_running_requests=plan.max_running_requests * ranks,
                  chunked_prefill_size=plan.chunked_prefill_size * ranks if plan.chunked_prefill_size > 0 else 0,
                  time_scale=sim.time_scale / sim.faults.slow_tokens, seed=sim.seed,
                  prefill_oom_tokens=oom, on_runtime_oom=on_runtime_oom,
                  stream_interval=launch.stream_interval,
                  radix_cache=not launch.raw.get("disable_radix_cache", False))
