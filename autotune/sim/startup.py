"""SGLang's startup sequence, simulated: phases, log lines, and failures at the right phase.

Lines follow SGLang's own (``model_executor/model_runner.py``, ``model_runner_kv_cache_mixin.py`` at
0.5.9; ``mem_cache/kv_cache_configurator.py`` and ``model_executor/cuda_graph_runner.py`` at 0.5.23;
real examples in ``tests/data/public_logs/``) in the wording of the chosen version (classic 0.5.9
vs 0.5.23), carry SGLang's ``[YYYY-mm-dd HH:MM:SS TP<r>]`` prefix with timestamps in
*modelled* time, and are written to stderr (where SGLang's logging goes) and flushed as
they happen: the launcher parses them live. Memory lines come from every TP rank, as
SGLang's ``logger.info`` in each scheduler prints them; TP0-only lines are TP0 only.

Phase durations are modelled (init, weight load ~ W / bandwidth, KV allocation, graph
capture per captured size, warm-up) and slept for ``duration / time_scale``.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import sys
import time
from dataclasses import dataclass
from typing import TextIO

from autotune.outcome import FailureKind
from autotune.sglang.models import ModelProfile
from autotune.sglang.rocm import fp8_is_fnuz
from autotune.sim.args import Launch, SimOptions
from autotune.sim.hardware import GIB, MemoryPlan
from autotune.sim.weight_load import checkpoint_is_warm, checkpoint_read, weight_load_s

#: Modelled phase durations (seconds). Weight loading: :func:`autotune.sim.weight_load.weight_load_s`
#: (the checkpoint read from local disk, cold, or from the page cache, warm: cited there); one CUDA graph
#: capture takes ~50 ms per batch size.
INIT_BASE_S = 1.0
INIT_PER_RANK_S = 0.1
KV_ALLOC_S = 0.3
GRAPH_PER_SIZE_S = 0.05
WARMUP_S = 0.5
#: What the memory_imbalance fault pretends: another process holds this much on one GPU.
IMBALANCE_HOG_GIB = 30.0

TRACEBACK_HEAD = ("Traceback (most recent call last):\n"
                  '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2683, '
                  "in run_scheduler_process\n    scheduler = Scheduler(\n")
SIGQUIT_LINE = "Received sigquit from a child process. It usually means the child failed."


class StartupFailure(Exception):
    """SGLang failed at a startup phase; ``error`` is the exception line (type: message)."""

    def __init__(self, kind: FailureKind, error: str, where: str, extra: str = "") -> None:
        super().__init__(error)
        self.kind = kind
        self.error = error
        self.where = where  # the file/function the traceback ends in
        self.extra = extra  # text after the exception line (e.g. "Possible solutions:")


class LogWriter:
    """Writes SGLang-style log lines with modelled timestamps, flushed line by line."""

    def __init__(self, sim: SimOptions, launch: Launch, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.time_scale = sim.time_scale
        self.tp_size = launch.tp_size
        self.dp_size = launch.dp_size
        self.base = _dt.datetime.now().replace(microsecond=0)
        self.t0 = time.monotonic()

    def modelled_now(self) -> float:
        """Modelled seconds since the process started (wall elapsed x time scale)."""
        return (time.monotonic() - self.t0) * self.time_scale

    def _stamp(self) -> str:
        return (self.base + _dt.timedelta(seconds=self.modelled_now())).strftime("%Y-%m-%d %H:%M:%S")

    def raw(self, text: str) -> None:
        self.stream.write(text if text.endswith("\n") else text + "\n")
        self.stream.flush()

    def line(self, msg: str, rank: int | None = None, dp: int | None = None) -> None:
        prefix = ""
        if dp is not None and self.dp_size > 1:
            prefix += f" DP{dp}"
        if rank is not None and self.tp_size > 1:
            prefix += f" TP{rank}"
        self.raw(f"[{self._stamp()}{prefix}] {msg}")

    def all_ranks(self, msg: str) -> None:
        for dp in range(self.dp_size):
            for rank in range(self.tp_size):
                self.line(msg, rank, dp)

    def rank0(self, msg: str) -> None:
        self.line(msg, 0, 0)

    def failure(self, exc: StartupFailure) -> None:
        """SGLang's failure wrapper: each scheduler's traceback, then the launcher's sigquit line."""
        error_type = exc.error.split(":", 1)[0]
        text = (f"Scheduler hit an exception: {TRACEBACK_HEAD}"
                f'  File "/sgl-workspace/sglang/python/{exc.where}", line 1, in <module>\n    raise {error_type}(\n'
                f"{exc.error}\n{exc.extra}")
        self.all_ranks(text.rstrip("\n") + "\n")
        self.line(SIGQUIT_LINE)


async def _sleep(sim: SimOptions, modelled_s: float) -> None:
    await asyncio.sleep(max(0.0, modelled_s) / sim.time_scale)


def _g(x: float) -> str:
    return f"{x:.2f}"


def _torch_oom(plan: MemoryPlan, need_gib: float, free_gib: float) -> str:
    return (f"CUDA out of memory. Tried to allocate {need_gib * 1024:.2f} MiB. GPU 0 has a total capacity of "
            f"{plan.capacity_gib:.2f} GiB of which {max(free_gib, 0.0) * 1024:.2f} MiB is free. Including non-PyTorch "
            f"memory, this process has {plan.capacity_gib - max(free_gib, 0.0):.2f} GiB memory in use.")


def _graph_failure(plan: MemoryPlan) -> StartupFailure:
    modern = plan.version.dialect == "modern"
    bs_flag = "--cuda-graph-max-bs-decode" if modern else "--cuda-graph-max-bs"
    off = "--cuda-graph-backend-decode=disabled" if modern else "--disable-cuda-graph"
    need = plan.graph_gib + plan.fi_fusion_gib
    solutions = ["Possible solutions:",
                 "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
                 f"2. set {bs_flag} to a smaller value (e.g., 16)"]
    if not modern:
        solutions.append("3. disable torch compile by not using --enable-torch-compile")
    solutions.append(f"{len(solutions)}. disable CUDA graph by {off}. (Not recommended. Huge performance loss)")
    solutions.append("Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ")
    return StartupFailure(FailureKind.GRAPH_CAPTURE_OOM,
                          f"Exception: Capture cuda graph failed: {_torch_oom(plan, need, plan.before_graph_gib)}",
                          "sglang/srt/model_executor/cuda_graph_runner.py", "\n".join(solutions))


async def boot(plan: MemoryPlan, launch: Launch, sim: SimOptions, model: ModelProfile, log: LogWriter) -> None:
    """Run the scheduler's startup up to "ready to serve"; raise StartupFailure where SGLang fails."""
    modern = plan.version.dialect == "modern"
    v = plan.version
    # 1. distributed init -> baseline P
    log.all_ranks("Init parallel begin." if modern else "Init torch distributed begin.")
    for warning in plan.warnings:
        if "allreduce" in warning.lower() or "SymmMem" in warning:
            log.all_ranks(warning)
    init_s = INIT_BASE_S + INIT_PER_RANK_S * launch.tp_size
    await _sleep(sim, init_s)
    if sim.faults.memory_imbalance:
        local = plan.p_gib
        low = local - IMBALANCE_HOG_GIB
        name = "pre_model_load_memory" if v.at_least("0.5.12") else "min_per_gpu_memory"
        raise StartupFailure(FailureKind.MEMORY_IMBALANCE,
                             "RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other "
                             f"processes. {name}={low}, local_gpu_memory={local}, local_gpu_memory * 0.9={local * 0.9}",
                             "sglang/srt/model_executor/model_runner.py")
    if modern:
        log.all_ranks(f"Init parallel ends. elapsed={init_s:.2f} s")
        log.all_ranks(f"Memory baseline taken. mem usage={_g(plan.dist_init_gib)} GB")
    else:
        log.all_ranks(f"Init torch distributed ends. elapsed={init_s:.2f} s, mem usage={_g(plan.dist_init_gib)} GB")
    # 2. weights -> A
    log.all_ranks(f"Load weight begin. avail mem={_g(plan.p_gib)} GB")
    checkpoint_gib = model.weight_bytes / GIB
    if plan.draft is not None and v.regime == "B" and plan.draft.path != model.path:
        checkpoint_gib += plan.draft.weight_bytes / GIB
    warm = checkpoint_is_warm(sim.page_cache, launch.model_path)
    load_s = weight_load_s(checkpoint_gib, plan.w_gib, warm=warm)
    await _sleep(sim, load_s)
    checkpoint_read(sim.page_cache, launch.model_path)
    dtype = "" if modern else "dtype=torch.bfloat16, "
    log.all_ranks(f"Load weight end. elapsed={load_s:.2f} s, type={model.architecture}, {dtype}"
                  f"avail mem={_g(plan.a_gib)} GB, mem usage={_g(plan.w_gib)} GB.")
    # 3. KV pool
    f = plan.f
    if plan.fails_at == "kv_rest":
        minimum = 1.0 - plan.a_gib / plan.p_gib
        raise StartupFailure(FailureKind.KV_OOM,
                             f"ValueError: Loaded weights leave no GPU memory for the KV cache under "
                             f"--mem-fraction-static={f}. Raise --mem-fraction-static above {minimum:.3f} (minimum "
                             f"viable = 1 - available/pre = {minimum:.4f}). If using speculative decoding, draft "
                             "weights are now counted.", "sglang/srt/mem_cache/kv_cache_configurator.py")
    fp8 = "torch.float8_e4m3fnuz" if fp8_is_fnuz(sim.gpu) else "torch.float8_e4m3fn"  # MI300X/MI325X: fnuz
    kv_dtype = fp8 if plan.cell_bytes and launch.kv_cache_dtype.startswith("fp8") else "torch.bfloat16"
    log.rank0(f"Using KV cache dtype: {kv_dtype}")
    for warning in plan.warnings:
        if warning.startswith("max_total_tokens="):
            log.all_ranks(warning)
    await _sleep(sim, KV_ALLOC_S)
    if plan.fails_at == "kv_tokens":
        current = f"mem_fraction_static={f}" if v.at_least("0.5.12") else f"self.server_args.mem_fraction_static={f}"
        raise StartupFailure(FailureKind.KV_OOM,
                             f"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                             f"Current value: {current}", "sglang/srt/model_executor/model_runner.py")
    head = f"KV Cache is allocated. dtype: {kv_dtype}, " if modern else "KV Cache is allocated. "
    if model.is_mla:
        log.all_ranks(f"{head}#tokens: {plan.kv_tokens}, KV size: {_g(plan.kv_gib)} GB")
    else:
        log.all_ranks(f"{head}#tokens: {plan.kv_tokens}, K size: {_g(plan.kv_gib / 2)} GB, V size: {_g(plan.kv_gib / 2)} GB")
    log.all_ranks(f"Memory pool end. avail mem={_g(plan.after_pool_gib)} GB")
    # 4. CUDA graphs
    if plan.graph_bs:
        cap_s = GRAPH_PER_SIZE_S * len(plan.graph_bs)
        tpr = plan.speculative.num_draft_tokens if plan.speculative.enabled else 1
        if modern:
            log.all_ranks(f"Capture target decode CUDA graph begin. backend=full, num_tokens_per_req={tpr}, "
                          f"avail mem={_g(plan.before_graph_gib)} GB")
        else:
            log.all_ranks(f"Capture cuda graph begin. This can take up to several minutes. "
                          f"avail mem={_g(plan.before_graph_gib)} GB")
            log.rank0(f"Capture cuda graph bs {plan.graph_bs}")
        await _sleep(sim, cap_s)
        used = plan.graph_gib + plan.fi_fusion_gib
        after = plan.before_graph_gib - used
        if plan.fails_at == "graph" and after < 0:
            raise _graph_failure(plan)
        if plan.fi_fusion_active and modern:
            log.rank0(f"FlashInfer AllReduce Fusion enabled and workspace initialized: backend=trtllm, "
                      f"max_token_num=2048, hidden_dim={model.hidden_size}")
        if modern:
            log.all_ranks(f"Capture target decode CUDA graph end. bs={plan.graph_bs}, elapsed={cap_s:.2f} s, "
                          f"mem usage={_g(used)} GB, avail mem={_g(after)} GB.")
        else:
            log.all_ranks(f"Capture cuda graph end. Time elapsed: {cap_s:.2f} s. mem usage={_g(used)} GB. "
                          f"avail mem={_g(after)} GB.")
        if plan.prefill_graphs_on:
            log.all_ranks(f"Capture target prefill CUDA graph begin. backend=full, num_tokens="
                          f"{min(plan.chunked_prefill_size, 8192)}, avail mem={_g(after)} GB")
            await _sleep(sim, cap_s / 2)
            if plan.fails_at == "graph":
                raise StartupFailure(FailureKind.GRAPH_CAPTURE_OOM, "Exception: Capture prefill CUDA graph failed: "
                                     + _torch_oom(plan, plan.prefill_graph_gib, after),
                                     "sglang/srt/model_executor/runner_backend_utils/__init__.py",
                                     "Fail when using backend: full for prefill runner.")
            log.all_ranks(f"Capture target prefill CUDA graph end. elapsed={cap_s / 2:.2f} s, mem usage="
                          f"{_g(plan.prefill_graph_gib)} GB, avail mem={_g(plan.after_graph_gib)} GB.")
    elif plan.fails_at == "graph":  # no graphs to capture: the attention workspace is what does not fit
        raise StartupFailure(FailureKind.CUDA_OOM, "torch.OutOfMemoryError: " + _torch_oom(
            plan, plan.attn_workspace_gib, plan.after_pool_gib), "sglang/srt/layers/attention/flashinfer_backend.py")
    if plan.draft is not None and plan.version.regime == "B" and plan.draft_graph_gib:
        free = plan.after_graph_gib  # draft graphs are captured before the symm-mem prealloc
        topk = plan.speculative.eagle_topk or 1
        log.all_ranks(f"Capture draft decode CUDA graph begin. backend=full, num_tokens_per_req={topk}, "
                      f"avail mem={_g(free)} GB" if modern else
                      f"Capture draft cuda graph begin. This can take up to several minutes. avail mem={_g(free)} GB")
        await _sleep(sim, GRAPH_PER_SIZE_S * len(plan.graph_bs))
        if plan.fails_at == "draft":
            raise _graph_failure(plan)
        log.all_ranks(f"Capture draft decode CUDA graph end. bs={plan.graph_bs}, elapsed="
                      f"{GRAPH_PER_SIZE_S * len(plan.graph_bs):.2f} s, mem usage={_g(plan.draft_graph_gib)} GB, "
                      f"avail mem={_g(free - plan.draft_graph_gib)} GB." if modern else
                      f"Capture draft cuda graph end. Time elapsed: {GRAPH_PER_SIZE_S * len(plan.graph_bs):.2f} s. "
                      f"mem usage={_g(plan.draft_graph_gib)} GB. avail mem={_g(free - plan.draft_graph_gib)} GB.")
    # 5. NCCL symmetric memory prealloc, regime-A draft worker
    if launch.enable_symm_mem:
        log.all_ranks("Pre-allocating symmetric memory pool with 4 GiB")
        if plan.fails_at == "symm_mem":
            raise StartupFailure(FailureKind.CUDA_OOM, "torch.OutOfMemoryError: " + _torch_oom(
                plan, plan.symm_prealloc_gib, plan.after_graph_gib), "sglang/srt/model_executor/model_runner.py")
    if plan.draft is not None and plan.version.regime == "A":
        free = plan.after_graph_gib - plan.symm_prealloc_gib
        log.all_ranks(f"Load weight begin. avail mem={_g(free)} GB")
        draft_warm = checkpoint_is_warm(sim.page_cache, plan.draft.path)
        draft_s = weight_load_s(plan.draft_weights_gib * launch.tp_size, plan.draft_weights_gib, warm=draft_warm)
        await _sleep(sim, draft_s)
        checkpoint_read(sim.page_cache, plan.draft.path)
        if plan.fails_at == "draft":
            raise StartupFailure(FailureKind.CUDA_OOM, "torch.OutOfMemoryError: " + _torch_oom(
                plan, plan.draft_weights_gib + plan.draft_kv_gib + plan.draft_graph_gib, free),
                                 "sglang/srt/speculative/eagle_worker.py")
        log.all_ranks(f"Load weight end. elapsed={draft_s:.2f} s, type={plan.draft.architecture}, dtype=torch.bfloat16, "
                      f"avail mem={_g(free - plan.draft_weights_gib)} GB, mem usage={_g(plan.draft_weights_gib)} GB.")
        log.all_ranks(f"KV Cache is allocated. #tokens: {plan.kv_tokens}, KV size: {_g(plan.draft_kv_gib)} GB")
        log.all_ranks(f"Capture draft cuda graph end. mem usage={_g(plan.draft_graph_gib)} GB. "
                      f"avail mem={_g(plan.final_free_gib)} GB.")
    log.rank0(f"max_total_num_tokens={plan.kv_tokens}, chunked_prefill_size={plan.chunked_prefill_size}, "
              f"max_prefill_tokens={launch.max_prefill_tokens}, max_running_requests={plan.max_running_requests}, "
              f"context_len={plan.context_len}, available_gpu_mem={_g(plan.final_free_gib)} GB")


def http_lines(log: LogWriter, host: str, port: int, pid: int) -> None:
    """uvicorn's lines once the HTTP port listens."""
    log.raw(f"INFO:     Started server process [{pid}]")
    log.raw("INFO:     Waiting for application startup.")
    log.raw("INFO:     Application startup complete.")
    log.raw(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")


async def warmup(sim: SimOptions, launch: Launch) -> None:
    """The warm-up request SGLang sends itself before announcing readiness."""
    if not launch.skip_server_warmup:
        await _sleep(sim, WARMUP_S)


READY_LINE = "The server is fired up and ready to roll!"


@dataclass(frozen=True)
class RuntimeOom:
    """The scheduler's exception when a prefill does not fit in what the slack left."""

    error: str = "RuntimeError: Prefill out of memory. Try to lower your batch size."


def runtime_oom_failure() -> StartupFailure:
    return StartupFailure(FailureKind.RUNTIME_OOM, RuntimeOom().error, "sglang/srt/managers/schedule_batch.py")


__all__ = ["LogWriter", "StartupFailure", "boot", "warmup", "http_lines", "READY_LINE", "runtime_oom_failure", "GIB"]
