"""The offline evaluator agrees with the real simulated server driven by the real trial body.

Each case launches ``python -m autotune.sim`` through :func:`run_trial_body` (real
process, HTTP, load generator) at time scale 10 with a small workload, and compares
with :func:`autotune.sim.offline.evaluate` on the same request: same outcome and
failure kind; output throughput within a few percent when both complete.
"""

from __future__ import annotations

import re

from pathlib import Path

import pytest

from autotune import space
from autotune.sim.offline import evaluate
from autotune.spec import load_study_spec
from autotune.study.trial import TrialRequest, run_trial_body

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "studies" / "demo.yaml"
# The real run converts wall time to modelled time; on a loaded 2-core host it keeps
# within ~2-3 % at time scale 10. 8 % leaves room for a busy machine.
THROUGHPUT_TOL = 0.08

PLAIN = {"mem_fraction_static": 0.9, "cuda_graph_max_bs": 256, "custom_allreduce": False,
         "speculative_algorithm": "none"}
EAGLE3 = {"mem_fraction_static": 0.9, "cuda_graph_max_bs": 64, "custom_allreduce": False,
          "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
          "speculative_num_draft_tokens": 4}
KV_OOM = {"mem_fraction_static": 0.6, "cuda_graph_max_bs": 64, "custom_allreduce": False,
          "speculative_algorithm": "none"}
RUNTIME_OOM = {"mem_fraction_static": 0.95, "cuda_graph_max_bs": 512, "custom_allreduce": False,
               "speculative_algorithm": "none"}


def _request(params: dict, tmp_path: Path, name: str) -> TrialRequest:
    spec = load_study_spec(DEMO)
    wl = dict(spec.workload.model_dump(), num_prompts=48, concurrency=[24], output_len=48, warmup_requests=2)
    return TrialRequest(
        study_name="agree", trial_number=0, config=space.to_config(spec, params).to_dict(), backend="sim",
        sglang_version=spec.server.sglang_version, gpu=spec.hardware.gpu, num_gpus=spec.hardware.num_gpus,
        interconnect=spec.hardware.interconnect, workload=wl, objective_metric="output_throughput",
        objective_direction="maximize", artifact_dir=str(tmp_path / name), run_dir=str(tmp_path / "run"),
        startup_timeout_s=60, sim={"time_scale": 10.0, "seed": 0},
    )


@pytest.mark.parametrize(("name", "params"), [("plain", PLAIN), ("eagle3", EAGLE3)])
def test_throughput_agrees_with_the_real_server(tmp_path: Path, name: str, params: dict) -> None:
    req = _request(params, tmp_path, name)
    offline = evaluate(req)
    real = run_trial_body(req)
    assert real.state == "complete", real.evidence
    assert offline.state == "complete", offline.evidence
    assert offline.value == pytest.approx(real.value, rel=THROUGHPUT_TOL)
    point = real.best_point
    assert offline.best_point == point
    assert offline.metrics_by_point[point]["completed"] == real.metrics_by_point[point]["completed"]
    assert offline.observed["kv_tokens"] == real.observed["kv_tokens"]
    assert offline.observed["a_gib"] == real.observed["a_gib"]


@pytest.mark.parametrize(("name", "params", "kind"), [("kv", KV_OOM, "kv_oom"), ("rt", RUNTIME_OOM, "runtime_oom")])
def test_failure_kind_and_evidence_agree(tmp_path: Path, name: str, params: dict, kind: str) -> None:
    req = _request(params, tmp_path, name)
    offline = evaluate(req)
    real = run_trial_body(req)
    assert (real.state, real.failure_kind) == ("failed", kind), real.evidence
    assert (offline.state, offline.failure_kind) == ("failed", kind)
    # Same evidence line, but for the log timestamp (each run stamps its own clock).
    stamp = re.compile(r"\[\d{4}-\d\d-\d\d [\d:.]+")
    assert stamp.sub("[T", offline.evidence) == stamp.sub("[T", real.evidence)
