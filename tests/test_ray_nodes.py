"""RayExecutor joining a two-node cluster (two raylets on this host, 4 declared GPUs each).

Checks what a single node cannot show: a trial's GPUs come from one node, placement
spreads across nodes, node resources pin trials, and a TP no node can hold fails fast.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from autotune.objective import Objective  # noqa: E402
from autotune.sglang.knobs.config import ServerConfig  # noqa: E402
from autotune.spec import StudySpec, WorkloadSpec  # noqa: E402
from autotune.study.execution.ray.executor import RayExecutor  # noqa: E402
from autotune.trial.contract import TrialRequest, TrialResult, TrialState  # noqa: E402

pytestmark = pytest.mark.ray

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster_address() -> Iterator[str]:
    """A two-node cluster, joined once by this process (the executors reuse the connection); on
    teardown the environment and the SIGINT/SIGTERM handlers Ray set are put back."""
    from ray.cluster_utils import Cluster

    from autotune.study.execution.ray import cluster as ray_cluster

    env = dict(os.environ)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    os.environ.pop("RAY_ADDRESS", None)
    ray_cluster._loopback_only()
    store = 100 * 1024**2
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "num_gpus": 4, "resources": {"gpu_arch_a": 4}, "include_dashboard": False,
        "object_store_memory": store})
    try:
        cluster.add_node(num_cpus=1, num_gpus=4, object_store_memory=store)
        cluster.wait_for_nodes()
        assert ray_cluster.connect(cluster.address, num_cpus=None, num_gpus=0) is False
        yield cluster.address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        os.environ.clear()
        os.environ.update(env)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _spec(address: str, **executor: Any) -> StudySpec:
    return StudySpec.model_validate({
        "name": "nodes", "server": {"model_path": "models/x", "tp_size": 4},
        "hardware": {"gpu": "h100", "num_gpus": 8},
        "executor": {"kind": "ray", "address": address, **executor},
    })


def _request(number: int, tmp: Path, tp: int = 4) -> TrialRequest:
    return TrialRequest(
        study_name="nodes", trial_number=number, config=ServerConfig(model_path="models/x", tp_size=tp),
        backend="sim", sglang_version="0.5.9", gpu="h100", num_gpus=8, interconnect="nvlink",
        workload=WorkloadSpec(), objective=Objective(),
        artifact_dir=str(tmp / f"t{number}"), run_dir=str(tmp), env={"TEST_DIR": str(tmp)},
    )


def _node_body(req: TrialRequest, report: Any) -> TrialResult:
    """Record the node and GPUs; wait (bounded) until two trials are in at once."""
    d = Path(req.env["TEST_DIR"])
    (d / f"{req.trial_number}.in").write_text("")
    deadline = time.time() + 20
    while len(list(d.glob("*.in"))) < 2 and time.time() < deadline:
        time.sleep(0.05)
    rec = {"node": ray.get_runtime_context().get_node_id(), "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
           "together": len(list(d.glob("*.in"))) >= 2}
    (d / f"{req.trial_number}.json").write_text(json.dumps(rec))
    return TrialResult(state=TrialState.COMPLETE, value=1.0)


def _drive(ex: RayExecutor, requests: list[TrialRequest]) -> dict[int, TrialResult]:
    pending = list(requests)
    results: dict[int, TrialResult] = {}
    deadline = time.monotonic() + 90
    while pending or ex.in_flight():
        assert time.monotonic() < deadline
        while pending and ex.slots_free(pending[0]) > 0:
            req = pending.pop(0)
            ex.submit(req.trial_number, req)
        results.update(ex.wait(1.0))
    return results


def test_tp4_trials_spread_over_two_nodes_and_tp8_never_fits(cluster_address: str, tmp_path: Path) -> None:
    ex = RayExecutor(_spec(cluster_address), body=_node_body)
    try:
        assert ex.slots_free(_request(0, tmp_path)) == 2
        assert ex.slots_free(_request(0, tmp_path, tp=2)) == 4
        results = _drive(ex, [_request(0, tmp_path), _request(1, tmp_path)])
        ex.submit(2, _request(2, tmp_path, tp=8))
        never = dict(ex.wait(2.0))
    finally:
        ex.shutdown(cancel=True)
    assert all(r.state == "complete" for r in results.values()) and len(results) == 2
    recs = [json.loads((tmp_path / f"{n}.json").read_text()) for n in (0, 1)]
    assert recs[0]["node"] != recs[1]["node"]  # 4 + 4 GPUs: one trial per node
    assert all(r["together"] and len(r["cvd"].split(",")) == 4 for r in recs)
    assert never[2].failure_kind == "invalid_args"
    assert "2 node(s) with 4/4 GPU(s), largest 4" in never[2].evidence
    assert ray.is_initialized()  # joined, not owned: the cluster stays up


def test_node_resources_pin_trials(cluster_address: str, tmp_path: Path) -> None:
    ex = RayExecutor(_spec(cluster_address, resources={"gpu_arch_a": 0.01}), body=_node_body)
    try:
        assert ex.slots_free(_request(0, tmp_path)) == 1  # only the head has gpu_arch_a
        assert ex.slots_free(_request(0, tmp_path, tp=2)) == 2
    finally:
        ex.shutdown(cancel=False)
