"""Weight loading from disk (autotune.sim.weight_load): cold from local storage, warm from the page cache,
the same model in the simulated server's startup log and in the offline evaluator's launch cost."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from autotune import space
from autotune.objective import Objective
from autotune.sglang.models.profile import load_model_profile
from autotune.sim.args import parse_args
from autotune.sim.hardware import GIB, load_draft, plan_memory, resolve_speculative
from autotune.sim.weight_load import (
    COLD_READ_GIB_PER_S,
    WARM_READ_GIB_PER_S,
    PageCache,
    checkpoint_is_warm,
    checkpoint_read,
    weight_load_s,
)
from autotune.spec import SimSpec, load_study_spec
from autotune.trial.contract import TrialRequest
from autotune.trial.offline import clear_cache, evaluate
from autotune.trial.offline_startup import run_startup

ROOT = Path(__file__).resolve().parents[1]
KIMI = ROOT / "studies" / "models" / "kimi-k2-class"
CKPT_GIB = load_model_profile(KIMI).weight_bytes / GIB
SEED = f"--model-path {KIMI} --tp-size 8 --sim-gpu rtx-pro-6000 --sim-interconnect pcie --sim-sglang-version 0.5.9"


def _load_line_elapsed(cache: str) -> tuple[float, float]:
    """The seed launch's "Load weight end. elapsed=" and its weights per GPU."""
    launch, sim = parse_args(f"{SEED} --mem-fraction-static 0.55 --sim-page-cache {cache}".split())
    model = load_model_profile(launch.model_path)
    draft = load_draft(resolve_speculative(launch, model, sim.version), model)
    plan = plan_memory(launch, model, draft, sim.gpu, version=sim.version, interconnect=sim.interconnect)
    out = run_startup(plan, launch, sim, model, live_kill_f=None, p_predicted=None)
    line = next(x for x in out.lines if "TP0] Load weight end." in x)
    return float(re.search(r"elapsed=([\d.]+) s", line).group(1)), plan.w_gib  # type: ignore[union-attr]


def test_a_1t_class_checkpoint_takes_minutes_cold_and_under_a_minute_warm() -> None:
    ckpt = CKPT_GIB  # ~576 GiB, read once by the node
    cold, warm = weight_load_s(ckpt, ckpt / 8, warm=False), weight_load_s(ckpt, ckpt / 8, warm=True)
    assert cold == pytest.approx(ckpt / COLD_READ_GIB_PER_S) and cold > 180
    assert warm == pytest.approx(ckpt / WARM_READ_GIB_PER_S) and 30 < warm < 60
    tiny = weight_load_s(0.1, 10.0, warm=True)  # a GPU's own host->device copy bounds it from below
    assert tiny == pytest.approx(10.0 / 25.0)


def test_the_servers_log_shows_the_cold_and_the_warm_load() -> None:
    (cold, per_gpu), (warm, _) = _load_line_elapsed("cold"), _load_line_elapsed("warm")
    assert cold == pytest.approx(weight_load_s(CKPT_GIB, per_gpu, warm=False), rel=0.01)
    assert warm == pytest.approx(weight_load_s(CKPT_GIB, per_gpu, warm=True), rel=0.01)


def test_the_node_page_cache_remembers_what_it_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_SIM_PAGE_CACHE_DIR", str(tmp_path / "cache"))
    assert not checkpoint_is_warm("auto", str(KIMI))
    checkpoint_read("auto", str(KIMI))
    assert checkpoint_is_warm("auto", str(KIMI)) and PageCache.default().holds(str(KIMI))
    assert not checkpoint_is_warm("auto", str(tmp_path / "other-model"))
    assert checkpoint_is_warm("warm", str(tmp_path / "other-model")) and not checkpoint_is_warm("cold", str(KIMI))
    checkpoint_read("cold", str(tmp_path / "other-model"))  # only auto keeps a record
    assert not PageCache.default().holds(str(tmp_path / "other-model"))


def _kv_oom_request(study: str) -> TrialRequest:
    spec = load_study_spec(ROOT / "studies" / "demo.yaml")
    cfg = space.to_config(spec, {"mem_fraction_static": 0.55, "cuda_graph_max_bs": 512, "custom_allreduce": False,
                                 "speculative_algorithm": "none"})
    return TrialRequest(
        study_name=study, trial_number=0, config=cfg, backend="sim", sglang_version="0.5.9", gpu="rtx-pro-6000",
        num_gpus=8, interconnect="pcie", workload=spec.workload, objective=Objective(),
        artifact_dir="/nonexistent/a", run_dir="/nonexistent/r", sim=SimSpec(time_scale=20.0, seed=0))


def test_offline_launches_read_cold_first_then_warm_per_study() -> None:
    clear_cache()
    first = evaluate(_kv_oom_request("s1"))
    second = evaluate(dataclasses.replace(_kv_oom_request("s1"), trial_number=1))
    other = evaluate(_kv_oom_request("s2"))
    assert first.failure_kind == second.failure_kind == "kv_oom"
    gap = weight_load_s(CKPT_GIB, CKPT_GIB / 8, warm=False) - weight_load_s(CKPT_GIB, CKPT_GIB / 8, warm=True)
    assert first.timings["startup_s"] - second.timings["startup_s"] == pytest.approx(gap, rel=0.01)
    assert other.timings["startup_s"] == pytest.approx(first.timings["startup_s"])
    assert first.gpu_seconds > 8 * 180  # a KV-OOM launch of the seed model costs minutes of 8 GPUs, cold
    clear_cache()
