"""The live evaluator: launch the server, wait until ready, measure the plan's load points, tear down.

It runs in the driver (inline executor) or in a Ray worker, and never touches
optuna storage: it takes a :class:`~autotune.trial.contract.TrialRequest` and
returns a :class:`~autotune.trial.contract.TrialResult`. Which points are measured
and which one gives the value is :func:`autotune.trial.load_points.run_plan`'s.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from autotune.errors import LaunchError, LoadGenError
from autotune.launch import ProcessRegistry, ServerProcess, classify, free_port
from autotune.launch.artifacts import write_launch_artifacts
from autotune.launch.cleanup import raise_if_interrupted
from autotune.launch.failures import line_failure
from autotune.launch.tail import LINE_BYTES
from autotune.load import Snapshot, run_load
from autotune.outcome import FailureKind, load_failure_kind
from autotune.sglang.logparse import summarize
from autotune.trial.argv import api_key, build_argv
from autotune.trial.contract import Reporter, TrialRequest, TrialResult, TrialState
from autotune.trial.live_kill import LiveKill
from autotune.trial.load_points import LoadPoint, load_spec, run_trial_plan, workload_of

log = logging.getLogger(__name__)

__all__ = ["run_trial_body"]


def run_trial_body(req: TrialRequest, report: Reporter | None = None) -> TrialResult:
    """Launch, measure and tear down one candidate. Never raises for a trial-level failure."""
    art = Path(req.artifact_dir)
    art.mkdir(parents=True, exist_ok=True)
    cfg = req.config.with_port(free_port(req.config.host))
    argv = build_argv(req, cfg)
    env = dict(req.env)
    result = TrialResult(state=TrialState.FAILED, command=argv,
                         time_scale=req.sim.time_scale if req.backend == "sim" else 1.0)
    shown_env = dict(env)
    if req.gpu_ids is not None:  # what ServerProcess will set, recorded so the launch can be reproduced
        shown_env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in req.gpu_ids)
    result.artifacts.update(
        write_launch_artifacts(art, argv, shown_env, sglang_version=req.sglang_version, gpu=req.gpu)
    )
    watcher = LiveKill(cfg.mem_fraction_static, req.prediction.p_gib if req.prediction else None)
    registry = ProcessRegistry(req.run_dir, req.study_name)
    # Per-node sweep: servers of dead orchestrators/workers of this study (safe beside live trials).
    registry.reap_leftovers()
    log_path = art / "server.log"
    result.artifacts["server.log"] = str(log_path)
    t0 = time.monotonic()
    server = ServerProcess(
        argv,
        env=env,
        gpu_ids=req.gpu_ids,
        log_path=log_path,
        host=cfg.host,
        port=cfg.port,
        startup_timeout_s=req.startup_timeout_s,
        on_line=watcher,
        registry=registry,
        tags={"study": req.study_name, "trial": req.trial_number},
    )
    watcher.server = server
    try:
        server.start()
        try:
            server.wait_ready()
        except LaunchError as exc:
            raise_if_interrupted()  # the server died because Ctrl-C stopped it
            return result.fail(exc.kind, exc.evidence or str(exc))
        result.timings["startup_s"] = time.monotonic() - t0
        t1 = time.monotonic()
        _measure_plan(req, server.url, result, report, art)
        result.timings["load_s"] = time.monotonic() - t1
        if result.state == TrialState.FAILED:
            _why_server_failed(server, log_path, result)
    finally:
        t2 = time.monotonic()
        server.stop()
        result.timings["teardown_s"] = time.monotonic() - t2
        events = watcher.events
        result.observed = {k: v for k, v in summarize(events).items() if v is not None}
        ev_path = art / "events.json"
        ev_path.write_text(json.dumps([asdict(e) for e in events], indent=1, default=str))
        result.artifacts["events.json"] = str(ev_path)
        held = result.timings.get("startup_s", time.monotonic() - t0) + result.timings.get("load_s", 0.0)
        result.gpu_seconds = held * result.time_scale * max(1, req.config.num_gpus)
    return result


#: A load point failed while the server was still up: how long to wait for it to exit. A server
#: that runs out of memory under load fails its clients' requests (errors, dropped connections) a
#: moment before its process exits; on a loaded node that moment was long enough for the trial to
#: be judged a plain load failure (a flaky runtime-OOM test in CI, 2026-12-02).
DYING_GRACE_S = 5.0


def _why_server_failed(server: ServerProcess, log_path: Path, result: TrialResult) -> None:
    """A load point failed: when the server (or part of its tree) died, or a line of its log
    proves why, that reason replaces the load's."""
    deadline = time.monotonic() + DYING_GRACE_S
    while server.failure is None and server.returncode is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if server.failure is not None:  # autotune killed it: a scheduler or detokenizer died under load
        result.failure_kind, result.evidence = server.failure
        return
    alive = server.returncode is None
    kind, line = classify(_tail(log_path), server.returncode)
    proven = line_failure(line) is not None  # a line of the log says why
    if proven or (not alive and kind != FailureKind.CRASHED):
        result.failure_kind = FailureKind(kind)
        result.evidence = line or result.evidence


def _measure_plan(req: TrialRequest, url: str, result: TrialResult, report: Reporter | None, art: Path) -> None:
    """The plan's load points against the running server, then the trial's value."""
    step = [0]

    def measure(point: LoadPoint) -> Mapping[str, Any] | None:
        return _load_point(req, url, result, report, art, point, step)

    outcome = run_trial_plan(req.workload, req.workloads, req.objective, measure)
    result.mix = outcome.mix
    if outcome.ended_at is not None:
        return
    if outcome.picked is None:
        result.fail(FailureKind.LOAD_FAILED, f"no load point reported {req.objective.metric}")
        return
    result.state = TrialState.COMPLETE
    result.best_point, result.value = outcome.picked.point, outcome.picked.value
    result.slo_violation = outcome.picked.violation if req.has_slo else None


def _load_point(req: TrialRequest, url: str, result: TrialResult, report: Reporter | None, art: Path,
                point: LoadPoint, step: list[int]) -> Mapping[str, Any] | None:
    """Run one load point and record it; None when the trial ends here (failed or stopped early)."""
    spec = load_spec(workload_of(req.workload, req.workloads, point), point, base_url=url, snapshot_interval_s=1.0,
                     api_key=api_key(req.config.extra_args))
    name = point.name

    def on_snapshot(snap: Snapshot) -> bool:
        if report is None or req.objective.metric != "output_throughput":
            return True
        step[0] += 1
        return report(step[0], float(snap.output_throughput))

    try:
        res = run_load(url, spec, on_snapshot=on_snapshot)
    except LoadGenError as exc:
        raise_if_interrupted()  # a Ctrl-C swallowed in a transport callback: not a load failure
        result.fail(load_failure_kind(str(exc)), str(exc))
        return None
    raise_if_interrupted()
    metrics = dict(res.metrics)
    result.metrics_by_point[name] = metrics
    _write_json(art / f"load_{name}.json", metrics)
    result.artifacts[f"load_{name}.json"] = str(art / f"load_{name}.json")
    if res.records:
        rec_path = art / f"requests_{name}.jsonl"
        with rec_path.open("w") as fh:
            for r in res.records:
                fh.write(json.dumps(r, default=str) + "\n")
        result.artifacts[rec_path.name] = str(rec_path)
    if res.stopped_early:
        result.state = TrialState.PRUNED
        result.failure_kind = FailureKind.EARLY_STOPPED
        result.evidence = f"stopped at {name}: clearly worse than earlier trials"
        return None
    if metrics.get("completed", 0) == 0:
        why = f"{name}: no request completed ({metrics.get('errors') or 'no detail'})"
        result.fail(load_failure_kind(why), why)
        return None
    return metrics


#: The end of a server log read to classify a failure (its last lines say why; the whole log was read
#: into memory, however large a server had made it).
TAIL_BYTES = 1 << 20


def _tail(path: Path, n: int = 200) -> list[str]:
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(size - TAIL_BYTES, 0))
            data = fh.read(TAIL_BYTES)
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    if size > TAIL_BYTES:
        lines = lines[1:]  # the first is a piece of a line
    return [line[:LINE_BYTES] for line in lines[-n:]]


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)
