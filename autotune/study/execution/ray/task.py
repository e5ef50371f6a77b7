"""What runs on the Ray side: the trial task and the report hub.

* :func:`trial_task` is declared ``@ray.remote(num_gpus=1, max_calls=1, ...)`` in the
  decorator, so its worker exits after one trial (Ray then ends the worker's process
  group; a server left running could not survive its task). The executor overrides
  ``num_gpus`` per trial with ``.options`` (``max_calls`` stays from the decorator).
  ``num_cpus=0``: a 2-CPU box still runs as many trials as it has GPUs.
* :class:`ReportHub` is a tiny actor: bodies push ``(number, step, value)`` and read
  the stop flag back; the driver drains the reports inside ``wait`` and sets the
  flag when its pruner says stop (optuna's report/should_prune live in the driver).
* A detached guard (:mod:`autotune.study.execution.ray.guard`) ends whatever the body started
  once the worker is gone, however it went (force-cancel, kill, crash).
* Artifacts written on another host are read back and shipped with the result, so
  the driver can store them as optuna artifacts.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from autotune.trial.contract import Reporter, TrialRequest, TrialResult

log = logging.getLogger(__name__)

Body = Callable[[TrialRequest, Reporter | None], TrialResult]

MAX_SHIPPED_BYTES = 64 * 1024**2  # per artifact; larger files stay on the node (path kept)


@ray.remote(num_cpus=0)
class ReportHub:
    """Intermediate reports from bodies to the driver, and the driver's stop flags back."""

    def __init__(self) -> None:
        self._reports: list[tuple[int, int, float]] = []
        self._stop: set[int] = set()

    def push(self, number: int, step: int, value: float) -> bool:
        """Queue a report; True while trial ``number`` may go on."""
        self._reports.append((number, step, value))
        return number not in self._stop

    def drain(self) -> list[tuple[int, int, float]]:
        out, self._reports = self._reports, []
        return out

    def stop(self, number: int) -> None:
        self._stop.add(number)

    def forget(self, number: int) -> None:
        self._stop.discard(number)


class HubReporter:
    """The ``report(step, value) -> bool`` a body gets on Ray: pushes to the hub, returns the flag."""

    def __init__(self, hub: Any, number: int, timeout_s: float = 30.0) -> None:
        self.hub = hub
        self.number = number
        self.timeout_s = timeout_s

    def __call__(self, step: int, value: float) -> bool:
        try:
            return bool(ray.get(self.hub.push.remote(self.number, int(step), float(value)), timeout=self.timeout_s))
        except ray.exceptions.RayError as exc:  # the driver side is gone or slow: keep measuring
            log.warning("trial %d: report of step %d not delivered: %s", self.number, step, exc)
            return True


def _assigned_gpus(req: TrialRequest) -> list[str]:
    """Put Ray's GPU assignment into the request, so the server sees exactly those devices."""
    ids = [str(i) for i in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])]
    if ids and all(i.isdigit() for i in ids):
        req.gpu_ids = [int(i) for i in ids]
    elif ids:  # UUIDs or MIG names: pass them through verbatim
        req.gpu_ids = None
        req.env = {**req.env, "CUDA_VISIBLE_DEVICES": ",".join(ids)}
    return ids


def _ship_artifacts(result: TrialResult) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for name, path in result.artifacts.items():
        try:
            p = Path(path)
            if p.is_file() and p.stat().st_size <= MAX_SHIPPED_BYTES:
                files[path] = p.read_bytes()
        except OSError as exc:
            log.warning("artifact %s (%s) not shipped: %s", name, path, exc)
    return files


@ray.remote(num_gpus=1, num_cpus=0, max_calls=1, max_retries=0)
def trial_task(body: Body, req: TrialRequest, hub: Any, driver_host: str) -> tuple[TrialResult, dict[str, bytes]]:
    """Run one trial body on the node Ray chose, with the GPUs Ray assigned."""
    from autotune.sglang.flags.release_tables import told_by_driver
    from autotune.study.execution.ray import guard

    told_by_driver(req.sglang_version)  # the driver warned of a release newer than every table, once for the run
    ids = _assigned_gpus(req)
    host = socket.gethostname()
    log.info("trial %d on %s, pid %d, GPUs %s", req.trial_number, host, os.getpid(), ids)
    # Every process the body starts inherits the marker; the guard ends them once this worker is gone.
    marker = f"{req.study_name}-{req.trial_number}-{uuid.uuid4().hex}"
    os.environ[guard.MARKER_ENV] = marker
    guard.spawn(marker)
    reporter = HubReporter(hub, req.trial_number) if hub is not None else None
    try:
        result = body(req, reporter)
    finally:
        os.environ.pop(guard.MARKER_ENV, None)
    result.observed = {**result.observed, "ray_host": host, "gpu_ids": ids}
    files = _ship_artifacts(result) if host != driver_host else {}
    return result, files


def write_shipped(files: dict[str, bytes]) -> None:
    """On the driver: put artifacts shipped from another host at their recorded paths."""
    for path, data in files.items():
        p = Path(path)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_name(p.name + ".part")
            tmp.write_bytes(data)
            os.replace(tmp, p)
        except OSError as exc:
            log.warning("could not write shipped artifact %s: %s", path, exc)
