"""One trial body: launch, wait until ready, warm up and load, tear down.

It runs in the driver (inline executor) or in a Ray worker, and never touches
optuna storage: it takes a :class:`TrialRequest` and returns a
:class:`TrialResult`, both plain picklable data.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from autotune.errors import LaunchError, LoadGenError
from autotune.outcome import FailureKind
from autotune.sglang.config import ServerConfig

log = logging.getLogger(__name__)

# report(step, value) -> True to continue, False to stop the load early (pruned).
Reporter = Callable[[int, float], bool]


@dataclass
class TrialRequest:
    study_name: str
    trial_number: int
    config: dict[str, Any]  # ServerConfig.to_dict()
    backend: str  # "sim" | "sglang"
    sglang_version: str
    gpu: str
    num_gpus: int
    interconnect: str
    workload: dict[str, Any]  # WorkloadSpec.model_dump()
    objective_metric: str
    objective_direction: str
    artifact_dir: str
    run_dir: str
    startup_timeout_s: float = 900.0
    env: dict[str, str] = field(default_factory=dict)
    python: str | None = None
    sim: dict[str, Any] = field(default_factory=dict)  # time_scale, seed, faults
    prediction: dict[str, Any] = field(default_factory=dict)  # p_gib, f, ...: for the live kill
    gpu_ids: list[int] | None = None
    slo: dict[str, float] = field(default_factory=dict)  # ceilings on latency metrics


@dataclass
class TrialResult:
    state: str  # "complete" | "failed" | "pruned"
    failure_kind: str | None = None
    evidence: str = ""
    value: float | None = None
    metrics_by_point: dict[str, dict[str, Any]] = field(default_factory=dict)
    best_point: str | None = None
    observed: dict[str, Any] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)
    artifacts: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    gpu_seconds: float = 0.0  # modelled GPU time this trial held (startup + load) x GPUs
    time_scale: float = 1.0
    slo_violation: float | None = None  # at the chosen point; <= 0 meets the SLO, None without one

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_argv(req: TrialRequest, cfg: ServerConfig) -> list[str]:
    """The launch argv: real SGLang, or the simulated server with the same flags plus --sim-*."""
    from autotune.sglang.flags import render_argv

    python = req.python or sys.executable
    if req.backend == "sglang":
        return render_argv(cfg, req.sglang_version, python=python, module="sglang.launch_server")
    argv = render_argv(cfg, req.sglang_version, python=python, module="autotune.sim")
    argv += [
        "--sim-sglang-version", req.sglang_version,
        "--sim-gpu", req.gpu,
        "--sim-num-gpus", str(req.num_gpus),
        "--sim-interconnect", req.interconnect,
        "--sim-time-scale", str(req.sim.get("time_scale", 1.0)),
        "--sim-seed", str(req.sim.get("seed", 0) + req.trial_number),
    ]
    for fault in req.sim.get("faults", []):
        argv += ["--sim-fault", fault]
    return argv


class LiveKill:
    """Watches startup lines; kills the launch as soon as the weights-loaded line proves
    ``rest = A - P x (1 - f)`` negative (seconds instead of the rest of the startup)."""

    def __init__(self, f: float | None, p_pred: float | None) -> None:
        self.f = f
        self.p_pred = p_pred
        self.p_seen: float | None = None
        self.events: list[Any] = []
        self.server: Any = None

    def __call__(self, line: str) -> None:
        from autotune.sglang.logparse import parse_line

        ev = parse_line(line)
        if ev is None:
            return
        self.events.append(ev)
        # "Load weight begin. avail mem=P" (and 0.5.23's baseline line) carry P as avail_gib.
        if ev.kind == "baseline" and ev.values.get("avail_gib") is not None:
            p = float(ev.values["avail_gib"])
            self.p_seen = p if self.p_seen is None else min(self.p_seen, p)
        if ev.kind == "weights_loaded" and self.f is not None and self.server is not None:
            a = ev.values.get("avail_gib")
            p = self.p_seen if self.p_seen is not None else self.p_pred
            if a is None or p is None:
                return
            rest = float(a) - p * (1 - self.f)
            if rest <= 0:
                evidence = (
                    f"rest = {a:.2f} - {p:.2f} x (1 - {self.f:.3f}) = {rest:.2f} GiB < 0 "
                    f"(from: {line.strip()[:200]})"
                )
                self.server.kill_now(FailureKind.KV_OOM.value, evidence)


def run_trial_body(req: TrialRequest, report: Reporter | None = None) -> TrialResult:
    """Launch, measure and tear down one candidate. Never raises for a trial-level failure."""
    from autotune.launch import ProcessRegistry, ServerProcess, free_port
    from autotune.launch.artifacts import write_launch_artifacts
    from autotune.sglang.logparse import summarize

    art = Path(req.artifact_dir)
    art.mkdir(parents=True, exist_ok=True)
    cfg = ServerConfig.from_dict(req.config).with_port(free_port(req.config.get("host", "127.0.0.1")))
    argv = build_argv(req, cfg)
    env = dict(req.env)
    result = TrialResult(state="failed", command=argv, time_scale=float(req.sim.get("time_scale", 1.0)) if req.backend == "sim" else 1.0)
    shown_env = dict(env)
    if req.gpu_ids is not None:  # what ServerProcess will set, recorded so the launch can be reproduced
        shown_env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in req.gpu_ids)
    result.artifacts.update(
        write_launch_artifacts(art, argv, shown_env, sglang_version=req.sglang_version, gpu=req.gpu)
    )
    watcher = LiveKill(cfg.mem_fraction_static, req.prediction.get("p_gib"))
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
            result.failure_kind = exc.kind
            result.evidence = exc.evidence or str(exc)
            return result
        result.timings["startup_s"] = time.monotonic() - t0
        t1 = time.monotonic()
        _run_load_points(req, server.url, result, report, art)
        result.timings["load_s"] = time.monotonic() - t1
        if result.state == "failed" and server.returncode is not None:
            # The server died under load: say why, from its log.
            from autotune.launch import classify

            kind, line = classify(_tail(log_path), server.returncode)
            if kind and kind != FailureKind.CRASHED:
                result.failure_kind = str(kind)
                result.evidence = line or result.evidence
    finally:
        t2 = time.monotonic()
        server.stop()
        result.timings["teardown_s"] = time.monotonic() - t2
        events = watcher.events
        result.observed = {k: v for k, v in summarize(events).items() if v is not None}
        ev_path = art / "events.json"
        ev_path.write_text(json.dumps([_event_dict(e) for e in events], indent=1, default=str))
        result.artifacts["events.json"] = str(ev_path)
        held = result.timings.get("startup_s", time.monotonic() - t0) + result.timings.get("load_s", 0.0)
        result.gpu_seconds = held * result.time_scale * max(1, ServerConfig.from_dict(req.config).num_gpus)
    return result


def _run_load_points(req: TrialRequest, url: str, result: TrialResult, report: Reporter | None, art: Path) -> None:
    """Every load point of the launch (one per concurrency level; with a rate search, a bisection
    on the request rate per level), then the trial's value: its best point that meets the SLO."""
    from autotune.study.slo import pick_point, violation

    wl = dict(req.workload)
    levels = wl.pop("concurrency")
    search = wl.pop("rate_search", None)
    step = [0]
    for conc in levels:
        if not search:
            if not _load_point(req, url, result, report, art, f"c{conc}", conc, wl, step):
                return
            continue
        # The highest request rate whose load point meets the SLO, by bisection (one launch).
        low, high = float(search["low"]), float(search["high"])
        for i in range(int(search.get("steps", 4))):
            rate = high if i == 0 else round((low + high) / 2, 3)
            point = f"c{conc}_r{rate:g}"
            if not _load_point(req, url, result, report, art, point, conc, {**wl, "request_rate": rate}, step):
                return
            if violation(result.metrics_by_point[point], req.slo) <= 0:
                low = rate
                if rate == high:
                    break  # even the highest rate meets it
            else:
                high = rate
    picked = pick_point(result.metrics_by_point, req.objective_metric, req.objective_direction, req.slo or None)
    if picked is not None:
        result.state = "complete"
        result.best_point, result.value, v = picked
        result.slo_violation = v if req.slo else None


def _load_point(req: TrialRequest, url: str, result: TrialResult, report: Reporter | None, art: Path,
                point: str, conc: int, wl: dict[str, Any], step: list[int]) -> bool:
    """Run one load point and record it; False when the trial ends here (failed or stopped early)."""
    from autotune.load import LoadSpec, run_load

    spec = LoadSpec(base_url=url, concurrency=conc, snapshot_interval_s=1.0, **load_kwargs(wl))

    def on_snapshot(snap: Any) -> bool:
        if report is None or req.objective_metric != "output_throughput":
            return True
        step[0] += 1
        return report(step[0], float(snap.output_throughput))

    try:
        res = run_load(url, spec, on_snapshot=on_snapshot)
    except LoadGenError as exc:
        result.failure_kind = FailureKind.LOAD_FAILED.value
        result.evidence = str(exc)
        return False
    metrics = dict(res.metrics)
    result.metrics_by_point[point] = metrics
    _write_json(art / f"load_{point}.json", metrics)
    result.artifacts[f"load_{point}.json"] = str(art / f"load_{point}.json")
    if getattr(res, "records", None):
        rec_path = art / f"requests_{point}.jsonl"
        with rec_path.open("w") as fh:
            for r in res.records:
                fh.write(json.dumps(r, default=str) + "\n")
        result.artifacts[rec_path.name] = str(rec_path)
    if getattr(res, "stopped_early", False):
        result.state = "pruned"
        result.failure_kind = FailureKind.EARLY_STOPPED.value
        result.evidence = f"stopped at {point}: clearly worse than earlier trials"
        return False
    if metrics.get("completed", 0) == 0:
        result.failure_kind = FailureKind.LOAD_FAILED.value
        result.evidence = f"{point}: no request completed ({metrics.get('errors') or 'no detail'})"
        return False
    return True


def load_kwargs(wl: dict[str, Any]) -> dict[str, Any]:
    keys = ("backend", "input_len", "output_len", "range_ratio", "num_prompts", "duration_s", "request_rate",
            "warmup_requests", "flush_cache", "dataset_path", "seed", "dataset", "tokenizer", "goodput_slo")
    return {k: wl[k] for k in keys if k in wl and wl[k] is not None}


def _tail(path: Path, n: int = 200) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return []


def _event_dict(ev: Any) -> dict[str, Any]:
    try:
        return asdict(ev)
    except TypeError:
        return dict(vars(ev))


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)
