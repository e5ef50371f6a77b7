"""``python -m autotune.sim``: the simulated SGLang server process.

Parses SGLang's flags of ``--sim-sglang-version`` plus ``--sim-*``, reads the model
directory, computes the memory truth (:mod:`autotune.sim.hardware`), prints SGLang's
startup lines (:mod:`autotune.sim.startup`), fails as SGLang fails (the failure wrapper,
then the process kills itself like SGLang's ``kill_process_tree``), or serves SGLang's
endpoints (:mod:`autotune.sim.http`) from the token engine (:mod:`autotune.sim.engine.core`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from typing import Any

from autotune.errors import ConfigError
from autotune.sglang.models.profile import ModelProfile, load_model_profile
from autotune.sim.args import Launch, SimOptions, parse_args
from autotune.sim.child import spawn_child
from autotune.sim.engine.core import Engine
from autotune.sim.engine.factory import build_engine
from autotune.sim.hardware import MemoryPlan, load_draft, plan_memory, resolve_speculative
from autotune.sim.http import ServerState, start_http
from autotune.sim.startup import READY_LINE, LogWriter, StartupFailure, boot, http_lines, runtime_oom_failure, warmup

logger = logging.getLogger("autotune.sim")


def _die(log: LogWriter, children: list[subprocess.Popen[bytes]], exc: StartupFailure | None) -> None:
    """SGLang's end on a scheduler failure: the traceback, the sigquit line, SIGKILL to the tree."""
    if exc is not None:
        log.failure(exc)
    for child in children:
        if child.poll() is None:
            child.kill()
    sys.stderr.flush()
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


async def _watch_scheduler(children: list[subprocess.Popen[bytes]], engine: Engine) -> None:
    """A scheduler child that dies freezes the engine: the HTTP front end lives on and answers
    ``/health``, every stream stalls (SGLang without its subprocess watchdog; 0.5.23's ends the tree)."""
    while not any(_ended(c) for c in children):
        await asyncio.sleep(0.2)
    engine.freeze()


def _ended(child: subprocess.Popen[bytes]) -> bool:
    """Whether ``child`` ended, without reaping it (SGLang's launcher leaves a dead scheduler a
    zombie, so its wait status stays readable in /proc until the teardown)."""
    try:
        with open(f"/proc/{child.pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return child.poll() is not None
    return raw[raw.rfind(b")") + 2:][:1] in (b"Z", b"X")


def model_info(launch: Launch, model: ModelProfile) -> dict[str, Any]:
    """``GET /model_info`` (0.5.9 keys)."""
    return {"model_path": launch.model_path, "tokenizer_path": launch.model_path, "is_generation": True,
            "preferred_sampling_params": None, "weight_version": "default", "has_image_understanding": False,
            "has_audio_understanding": False, "model_type": model.model_type, "architectures": [model.architecture]}


def server_info(launch: Launch, sim: SimOptions, model: ModelProfile, plan: MemoryPlan) -> dict[str, Any]:
    """The static part of ``GET /server_info``: resolved args, capacity, memory usage, ``sim``."""
    info: dict[str, Any] = dict(launch.raw)
    spec = plan.speculative
    info.update(
        model_path=launch.model_path, served_model_name=launch.served_model_name, mem_fraction_static=plan.f,
        chunked_prefill_size=plan.chunked_prefill_size, page_size=launch.page_size,
        max_running_requests=launch.max_running_requests or (48 if spec.enabled else None),
        speculative_algorithm=spec.algorithm, speculative_num_steps=spec.num_steps,
        speculative_eagle_topk=spec.eagle_topk, speculative_num_draft_tokens=spec.num_draft_tokens,
        disable_custom_all_reduce=launch.disable_custom_all_reduce, context_length=launch.context_length,
        max_total_num_tokens=plan.kv_tokens, max_req_input_len=plan.max_req_input_len, version=str(sim.version),
    )
    memory: dict[str, Any] = {"weight": round(plan.w_gib, 2), "kvcache": round(plan.kv_gib, 2),
                              "token_capacity": plan.kv_tokens}
    if sim.version.dialect == "modern":
        info["cuda_graph_config"] = {"decode": {"backend": "full" if plan.graph_bs else "disabled",
                                                "max_bs": plan.cuda_graph_max_bs, "bs": plan.graph_bs},
                                     "prefill": {"backend": "full" if plan.prefill_graph_gib else "disabled"}}
        memory.update(startup_available=round(plan.a_gib, 2), token_capacity_swa=None,
                      graph={"prefill": round(plan.prefill_graph_gib, 2), "decode": round(plan.graph_gib, 2),
                             "target_verify": 0.0, "draft_prefill": 0.0, "draft_decode": round(plan.draft_graph_gib, 2),
                             "draft_extend": 0.0})
    else:
        info["cuda_graph_max_bs"] = plan.cuda_graph_max_bs
        info["cuda_graph_bs"] = plan.graph_bs
        memory["graph"] = round(plan.graph_gib + plan.fi_fusion_gib, 2)
    info["internal_states"] = [{"last_gen_throughput": 0.0,
                                "effective_max_running_requests_per_dp": plan.max_running_requests,
                                "memory_usage": memory}]
    info["sim"] = dict(sim.to_dict(), p_gib=round(plan.p_gib, 4), a_gib=round(plan.a_gib, 4),
                       w_gib=round(plan.w_gib, 4),
                       f=plan.f, f_is_auto=plan.f_is_auto, kv_tokens=plan.kv_tokens, cell_bytes=plan.cell_bytes,
                       slack_gib=round(plan.slack_gib, 4), graph_gib=round(plan.graph_gib, 4),
                       final_free_gib=round(plan.final_free_gib, 4), prefill_oom_tokens=plan.prefill_oom_tokens,
                       max_running_requests=plan.max_running_requests,
                       custom_allreduce_active=plan.custom_ar_active, torch_symm_mem_active=plan.torch_symm_active,
                       flashinfer_allreduce_fusion_active=plan.fi_fusion_active, tokenizer="whitespace-words",
                       newer_flags={k: str(v) for k, v in launch.newer_flags.items()})
    return info


async def serve(launch: Launch, sim: SimOptions, model: ModelProfile, plan: MemoryPlan) -> int:
    """Start up like SGLang, then serve until SIGTERM/SIGINT. Returns the exit code."""
    log = LogWriter(sim, launch)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    children = [spawn_child(rank=0)]
    for name, value in launch.newer_flags.items():
        log.line(f"autotune.sim: {name} {value} is no flag of SGLang {sim.version}'s tables: taken for a newer "
                 "build's flag, with no modelled effect")
    try:
        await boot(plan, launch, sim, model, log)
    except StartupFailure as exc:
        _die(log, children, exc)
    state = ServerState(served_model_name=launch.served_model_name, context_len=plan.context_len,
                        server_info=server_info(launch, sim, model, plan), model_info=model_info(launch, model),
                        faults=sim.faults, emit=log.line, cache_report=bool(launch.raw.get("enable_cache_report")),
                        api_key=launch.raw.get("api_key") or None, admin_api_key=launch.raw.get("admin_api_key") or None)

    def on_runtime_oom(*_args: Any, **_kwargs: Any) -> None:
        state.dead = True
        loop.call_soon_threadsafe(_die, log, children, runtime_oom_failure())

    engine = build_engine(plan, launch, sim, model, on_runtime_oom)
    state.engine = engine
    await engine.start()
    watch = loop.create_task(_watch_scheduler(children, engine))
    try:
        runner = await start_http(state, launch.host, launch.port)
    except OSError as exc:
        log.raw(f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                f"('{launch.host}', {launch.port}): {exc.strerror.lower() if exc.strerror else exc}")
        _die(log, children, None)
    http_lines(log, launch.host, launch.port, os.getpid())
    if sim.faults.hang_startup:
        log.line("Simulated fault hang_startup: the warm-up request never returns.")
    else:
        await warmup(sim, launch)
        log.line(READY_LINE)  # printed (and flushed) before health turns 200, so a log reader sees it first
        state.ready = True
    await stop.wait()
    watch.cancel()
    state.ready = False
    await runner.cleanup()
    await engine.stop()
    for child in children:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=2)
            except subprocess.TimeoutExpired:
                child.kill()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        launch, sim = parse_args(argv)  # argparse exits 2 on an unknown or ambiguous flag
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        model = load_model_profile(launch.model_path)
        draft = load_draft(resolve_speculative(launch, model, sim.version), model)
        plan = plan_memory(launch, model, draft, sim.gpu, version=sim.version, interconnect=sim.interconnect)
    except ConfigError as exc:  # SGLang refuses these while handling its arguments
        print(f"ValueError: {exc}", file=sys.stderr)
        return 1
    if launch.tp_size * launch.dp_size * launch.pp_size > sim.num_gpus:
        print(f"RuntimeError: CUDA error: invalid device ordinal (tp_size*dp_size*pp_size="
              f"{launch.tp_size * launch.dp_size * launch.pp_size} > {sim.num_gpus} GPUs)", file=sys.stderr)
        return 1
    return asyncio.run(serve(launch, sim, model, plan))


if __name__ == "__main__":
    sys.exit(main())
