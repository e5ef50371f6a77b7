"""The offline evaluator: what a trial on the simulated server would report, without processes or HTTP.

:func:`evaluate` takes the same :class:`~autotune.trial.contract.TrialRequest` as the
live evaluator (:func:`~autotune.trial.live.run_trial_body`) and returns the
:class:`~autotune.trial.contract.TrialResult` that it would return against the
simulated SGLang server, in modelled time and in a fraction of a second:

1. **Arguments**: the live evaluator's own argv (:func:`~autotune.trial.argv.build_argv`)
   goes through the simulated server's own parser (:func:`autotune.sim.args.parse_args`),
   so a flag the SGLang version refuses fails as ``invalid_args`` here too.
2. **Memory**: the server's memory truth, :func:`autotune.sim.hardware.plan_memory`.
3. **Startup**: the server's :func:`autotune.sim.startup.boot` on a virtual clock
   (:mod:`autotune.trial.offline_startup`): the same failure kinds at the same phase,
   the same evidence as the launcher's classifier reads it, the trial body's live
   KV-OOM kill at the weights-loaded line, the observed memory from the log parser,
   and the modelled startup duration.
4. **Load**: the server's :class:`~autotune.sim.engine.core.Engine` (built by the server's
   own factory, :func:`autotune.sim.engine.factory.build_engine`) stepped synchronously
   through its public stepping API in modelled time (:mod:`autotune.trial.offline_load`),
   fed by the load generator's prompts and closed loop, warm-up excluded, measured with
   the load generator's own metrics code, at the points of the one load-point plan
   (:func:`autotune.trial.load_points.run_plan`: concurrency levels, and the rate bisection).
   A prefill over the activation headroom kills the engine: ``runtime_oom``, as the
   live evaluator classifies the dead server's log.

Differences from a live trial, on purpose: no artifacts are written; ``timings`` and
``gpu_seconds`` are pure modelled seconds (a live trial adds host overheads x time
scale: process start-up, HTTP); no mid-load early stopping (no reporter); injected
faults other than ``memory_imbalance`` are ignored (with a warning). The result's
``time_scale`` is 1.0 because every figure is already modelled.

Load outcomes are memoised on the engine's exact inputs (speed model inputs, KV
pool, running-request cap, chunk size, OOM threshold, stream interval, seed when the
engine samples speculative acceptance, workload, objective): two launches that differ only in
knobs that change nothing the engine sees (``custom_allreduce`` where SGLang turns it
off anyway) are measured once. Weight loading reads the checkpoint cold from disk on the
first launch of a model in a study run (``run_dir``, ``study_name``) in this process and
warm from the page cache after (:mod:`autotune.sim.weight_load`). Deterministic for a
given sequence of requests.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from autotune.errors import ConfigError
from autotune.launch.failures import classify
from autotune.objective import Picked
from autotune.outcome import FailureKind, load_failure_kind
from autotune.sglang.models.profile import ModelProfile, load_model_profile
from autotune.sim.args import Launch, SimOptions, parse_args
from autotune.sim.engine.core import Engine
from autotune.sim.engine.factory import build_engine
from autotune.sim.hardware import MemoryPlan, load_draft, plan_memory, resolve_speculative
from autotune.trial.argv import build_argv
from autotune.trial.contract import TrialRequest, TrialResult, TrialState
from autotune.trial.load_points import LoadPoint, load_spec, run_trial_plan, workload_of
from autotune.trial.offline_load import run_point
from autotune.trial.offline_startup import StartupOutcome, run_startup, runtime_oom_evidence

log = logging.getLogger(__name__)

__all__ = ["evaluate", "clear_cache", "cache_info"]

#: How many load outcomes the memo keeps (metrics only: a few KiB each).
MEMO_SIZE = 4096
_MEMO: OrderedDict[str, _LoadOutcome] = OrderedDict()
_MEMO_STATS = {"hits": 0, "misses": 0}
#: ((run_dir, study_name), checkpoint path) this process has loaded: the offline node's page cache.
_READ: set[tuple[tuple[str, str], str]] = set()


@dataclass(frozen=True)
class _LoadOutcome:
    metrics_by_point: dict[str, dict[str, Any]]
    duration_s: float
    picked: Picked | None = None
    error: str | None = None
    died: bool = False
    mix: dict[str, dict[str, Any]] | None = None


@functools.lru_cache(maxsize=64)
def _profile(path: str) -> ModelProfile:
    """Model profiles are read once per process (candidate-independent)."""
    return load_model_profile(path)


@functools.lru_cache(maxsize=64)
def _draft_cached(spec: Any, model: ModelProfile) -> ModelProfile | None:
    return load_draft(spec, model)


def _draft(spec: Any, model: ModelProfile) -> ModelProfile | None:
    """The server's own draft choice (:func:`autotune.sim.hardware.load_draft`), read once per process."""
    try:
        return _draft_cached(spec, model)
    except TypeError:  # an unhashable profile: no caching
        return load_draft(spec, model)


def clear_cache() -> None:
    """Forget memoised load outcomes, model profiles and which checkpoints were read (tests, or after
    editing a model directory)."""
    _MEMO.clear()
    _READ.clear()
    _MEMO_STATS.update(hits=0, misses=0)
    _profile.cache_clear()
    _draft_cached.cache_clear()


def cache_info() -> dict[str, int]:
    """Memo hits, misses and size."""
    return {**_MEMO_STATS, "size": len(_MEMO)}


def _parse(argv: list[str], env: dict[str, str]) -> tuple[Launch, SimOptions] | str:
    """The simulated server's own argument handling; on refusal, the line its stderr would show."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parse_args(argv, env)
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        return lines[-1] if lines else "argument parsing failed"
    except ConfigError as exc:
        return f"error: {exc}"


def evaluate(request: TrialRequest) -> TrialResult:
    """The result the live evaluator would report for ``request`` on the simulated server (module docstring).

    Never raises for a trial-level failure; raises ConfigError for a request it cannot
    model at all (``backend`` other than ``sim``).
    """
    if request.backend != "sim":
        raise ConfigError(f"backend={request.backend!r}: offline evaluation models the simulated server only ('sim')")
    cfg = request.config
    argv = build_argv(request)
    result = TrialResult(state=TrialState.FAILED, command=argv, time_scale=1.0)
    parsed = _parse(argv[3:], dict(request.env))  # [python, -m, autotune.sim, flags...]
    if isinstance(parsed, str):
        return result.fail(*classify([parsed], 2))
    launch, sim = parsed
    ignored = [f for f, on in sim.faults.to_dict().items() if on and f != "memory_imbalance"]
    if ignored:
        log.warning("offline evaluation ignores injected faults %s", ignored)
    try:
        model = _profile(launch.model_path)
        draft = _draft(resolve_speculative(launch, model, sim.version), model)
        plan = plan_memory(launch, model, draft, sim.gpu, version=sim.version, interconnect=sim.interconnect)
    except ConfigError as exc:  # the server prints "ValueError: ..." and exits 1
        return result.fail(*classify([f"ValueError: {exc}"], 1))
    if launch.tp_size * launch.dp_size * launch.pp_size > sim.num_gpus:
        return result.fail(*classify([f"RuntimeError: CUDA error: invalid device ordinal (tp_size*dp_size*pp_size="
                                      f"{launch.tp_size * launch.dp_size * launch.pp_size} > {sim.num_gpus} GPUs)"], 1))
    n_gpus = max(1, cfg.num_gpus)
    startup = _startup(plan, launch, sim, model, request)
    result.observed = startup.observed
    result.timings["startup_s"] = startup.duration_s
    if not startup.ready:
        result.gpu_seconds = startup.duration_s * n_gpus
        return result.fail(startup.failure_kind or FailureKind.CRASHED, startup.evidence)
    if startup.duration_s / sim.time_scale > request.startup_timeout_s:
        result.gpu_seconds = request.startup_timeout_s * sim.time_scale * n_gpus
        return result.fail(FailureKind.STARTUP_TIMEOUT, f"server not ready after {request.startup_timeout_s:.0f} s "
                           f"(modelled startup {startup.duration_s:.1f} s at time scale {sim.time_scale:g})")
    load = _load(plan, launch, sim, model, request)
    result.timings["load_s"] = load.duration_s
    result.timings["teardown_s"] = 0.0
    result.gpu_seconds = (startup.duration_s + load.duration_s) * n_gpus
    result.metrics_by_point = {k: dict(v) for k, v in load.metrics_by_point.items()}
    if load.died:
        return result.fail(*runtime_oom_evidence(sim, launch))
    if load.error is not None:
        return result.fail(load_failure_kind(load.error), load.error)
    if load.picked is None:
        return result.fail(FailureKind.LOAD_FAILED, f"no load point reported {request.objective.metric}")
    result.state = TrialState.COMPLETE
    result.best_point, result.value = load.picked.point, load.picked.value
    result.slo_violation = load.picked.violation if request.has_slo else None
    result.mix = dict(load.mix or {})
    return result


def _startup(plan: MemoryPlan, launch: Launch, sim: SimOptions, model: ModelProfile,
             request: TrialRequest) -> StartupOutcome:
    p_predicted = request.prediction.p_gib if request.prediction is not None else None
    # The node's page cache, per study run: the first launch of a checkpoint reads it cold, later ones warm
    # (the server's own "auto" remembers it per host instead, which would make this evaluator's costs
    # depend on what ran before on this machine).
    # A mode the request pins for the server (its AUTOTUNE_SIM_PAGE_CACHE) is taken as is.
    node = (request.run_dir, request.study_name)
    cache = request.env.get("AUTOTUNE_SIM_PAGE_CACHE", "auto")
    if cache not in ("cold", "warm"):
        cache = "warm" if (node, launch.model_path) in _READ else "cold"
    outcome = run_startup(plan, launch, replace(sim, time_scale=1.0, page_cache=cache), model,
                          live_kill_f=request.config.mem_fraction_static, p_predicted=p_predicted)
    if any("Load weight end" in line for line in outcome.lines):
        _READ.add((node, launch.model_path))
    return outcome


def _load(plan: MemoryPlan, launch: Launch, sim: SimOptions, model: ModelProfile,
          request: TrialRequest) -> _LoadOutcome:
    """Every load point of the plan on one engine (memoised on the engine's exact inputs)."""
    engine = build_engine(plan, launch, sim, model)
    speculative = float(engine.perf.accepted_tokens_per_step(1)) > 1.0
    key = json.dumps({
        "perf": repr(engine.perf.inputs), "kv": engine.kv_tokens, "mrr": engine.max_running_requests,
        "chunk": engine.chunked_prefill_size, "oom": engine.prefill_oom_tokens, "si": engine.stream_interval,
        # without speculative decoding the seed only picks fake token ids: timing does not depend on it
        "seed": sim.seed if speculative else None,
        "ctx": plan.context_len, "maxin": plan.max_req_input_len,
        "wl": request.workload.model_dump(mode="json"), "objective": repr(request.objective),
        "mix": [w.model_dump(mode="json") for w in request.workloads or ()],
    }, sort_keys=True, default=str)
    hit = _MEMO.get(key)
    if hit is not None:
        _MEMO.move_to_end(key)
        _MEMO_STATS["hits"] += 1
        return hit
    _MEMO_STATS["misses"] += 1
    outcome = _measure(engine, plan, request)
    _MEMO[key] = outcome
    if len(_MEMO) > MEMO_SIZE:
        _MEMO.popitem(last=False)
    return outcome


def _measure(engine: Engine, plan: MemoryPlan, request: TrialRequest) -> _LoadOutcome:
    """The plan's load points in turn, on one engine (its state carries over, as live)."""
    total = 0.0
    failure: dict[str, Any] = {}

    def measure(point: LoadPoint) -> Mapping[str, Any] | None:
        nonlocal total
        wl = workload_of(request.workload, request.workloads, point)
        out = run_point(engine, load_spec(wl, point), context_len=plan.context_len,
                        max_req_input_len=plan.max_req_input_len)
        total += out.duration_s
        if out.died or out.error:
            failure.update(error=out.error, died=out.died, metrics=out.metrics, name=point.name)
            return None
        return out.metrics

    with _engine_log_muted():
        planned = run_trial_plan(request.workload, request.workloads, request.objective, measure)
    points = planned.metrics_by_point
    if failure:
        if failure["metrics"]:  # a point that died part-way still reports what it measured
            points[failure["name"]] = failure["metrics"]
        return _LoadOutcome(points, total, None, failure["error"], failure["died"])
    return _LoadOutcome(points, total, planned.picked, mix=planned.mix)


@contextlib.contextmanager
def _engine_log_muted() -> Iterator[None]:
    """The engine's own log lines (a runtime OOM is an ERROR there) belong in the server's log,
    which offline evaluation does not write: keep them out of the orchestrator's log."""
    engine_log = logging.getLogger("autotune.sim.engine")
    muted = logging.Filter("autotune.sim.engine.offline-muted")  # matches no record name: drops all
    engine_log.addFilter(muted)
    try:
        yield
    finally:
        engine_log.removeFilter(muted)
