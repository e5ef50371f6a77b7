"""A finished study built directly with optuna (no simulated server), for the results tests.

``make_finished_study(tmp_path)`` writes a small study file, creates its optuna
study and tells trials the way the driver does (docs/ARCHITECTURE.md, "What a
finished optuna trial carries"): a baseline trial 0, COMPLETE trials with metrics
at two load points, a PRUNED predicted_oom trial, FAIL kv_oom and
graph_capture_oom trials, and artifacts on the completed trials. ``replay_progress`` drives
the progress hooks over such a study the way the driver does.
"""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.artifacts import FileSystemArtifactStore, upload_artifact
from optuna.trial import TrialState

from autotune.spec import StudySpec, load_study_spec

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "studies" / "models" / "kimi-k2-class"
POINTS = ("c64", "c256")

STUDY_YAML = """\
name: results-test
n_trials: {n_trials}
storage: study.db
run_dir: runs
server: {{backend: sim, sglang_version: "0.5.9", model_path: {model}, tp_size: 8}}
hardware: {{gpu: rtx-pro-6000, num_gpus: 8, interconnect: pcie}}
search_space:
  mem_fraction_static: {{low: 0.50, high: 0.95, step: 0.01}}
  cuda_graph_max_bs: {{choices: [64, 128, 256, 512]}}
  custom_allreduce: {{choices: [true, false]}}
workload: {{input_len: 512, output_len: 256, num_prompts: 64, concurrency: [64, 256]}}
objective: {{metric: output_throughput, direction: maximize}}
"""

MIN_VIABLE_F = 0.62


def _metrics(thr: float, conc: int, rng: random.Random) -> dict[str, Any]:
    ttft = 40.0 + conc * 1.5 + rng.uniform(0, 30)
    itl = 8.0 + conc * 0.05 + rng.uniform(0, 2)
    return {
        "completed": 64, "failed": 0, "concurrency": conc,
        "output_throughput": thr * (0.6 if conc == 64 else 1.0),
        "total_throughput": thr * 2.5, "request_throughput": thr / 256,
        "mean_ttft_ms": ttft, "median_ttft_ms": ttft * 0.9, "p99_ttft_ms": ttft * 2.2,
        "mean_itl_ms": itl, "median_itl_ms": itl * 0.95, "p99_itl_ms": itl * 3,
        "mean_tpot_ms": itl * 1.05, "p99_tpot_ms": itl * 2,
        "percentiles_ttft_ms": [[50, ttft], [99, ttft * 2.2]],  # a non-scalar, left out of flat views
    }


def _prediction(f: float, verdict: str, kv_tokens: int) -> dict[str, Any]:
    return {
        "verdict": verdict, "reason": f"rest = A - P x (1 - {f:.2f}) ... verdict {verdict}",
        "kv_tokens": kv_tokens, "kv_gib": kv_tokens * 70e3 / 2**30, "p_gib": 94.97, "a_gib": 33.6,
        "f": f, "slack_gib": 2.5, "min_viable_mem_fraction": MIN_VIABLE_F, "uncertain": False,
    }


def _upload(store: FileSystemArtifactStore, trial: optuna.Trial, tdir: Path, thr: float) -> None:
    tdir.mkdir(parents=True, exist_ok=True)
    files = {
        "server.log": f"[2026-11-29 10:00:00] Load weight end. avail mem=33.60 GB\nThe server is fired up. thr={thr}\n",
        "command.sh": "#!/bin/sh\npython3 -m sglang.launch_server --model-path m --tp-size 8\n",
        "load_c64.json": json.dumps({"output_throughput": thr, "completed": 64}),
        "requests_c64.jsonl": "".join(
            json.dumps({"i": i, "ttft_ms": 40 + i, "output_len": 256}) + "\n" for i in range(5)
        ),
    }
    for name, text in files.items():
        path = tdir / name
        path.write_text(text)
        upload_artifact(artifact_store=store, file_path=str(path), study_or_trial=trial)


def make_finished_study(tmp_path: Path, *, n_complete: int = 6, seed: int = 0) -> StudySpec:
    """Write the study file and its storage under tmp_path; return the loaded spec."""
    rng = random.Random(seed)
    study_file = tmp_path / "study.yaml"
    total = n_complete + 4
    study_file.write_text(STUDY_YAML.format(model=MODEL, n_trials=total))
    spec = load_study_spec(study_file)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=spec.name, storage=spec.storage_url, direction="maximize")
    (spec.run_path / "artifacts").mkdir(parents=True, exist_ok=True)
    store = FileSystemArtifactStore(str(spec.run_path / "artifacts"))
    study.set_user_attr(
        "calibration", {"p_gib": 94.97, "a_gib": 33.6, "kv_tokens": 400000, "graph_gib": 1.2, "source": "trial 0"}
    )
    dists = {
        "mem_fraction_static": optuna.distributions.FloatDistribution(0.5, 0.95, step=0.01),
        "cuda_graph_max_bs": optuna.distributions.CategoricalDistribution([64, 128, 256, 512]),
        "custom_allreduce": optuna.distributions.CategoricalDistribution([True, False]),
    }

    def ask(params: dict[str, Any]) -> optuna.Trial:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study.enqueue_trial(params)
        t = study.ask()
        for k, d in dists.items():
            if isinstance(d, optuna.distributions.FloatDistribution):
                t.suggest_float(k, d.low, d.high, step=d.step)
            else:
                t.suggest_categorical(k, list(d.choices))
        return t

    def complete(params: dict[str, Any], thr: float, *, baseline: bool = False) -> None:
        t = ask(params)
        f = params["mem_fraction_static"]
        kv_pred = int(400000 * (f - 0.55) / 0.3)
        kv_obs = int(kv_pred * rng.uniform(0.97, 1.03))
        metrics = {p: _metrics(thr, int(p[1:]), rng) for p in POINTS}
        t.set_user_attr("prediction", _prediction(f, "fits", kv_pred))
        if baseline:
            t.set_user_attr("baseline", True)
        t.set_user_attr("command", ["python3", "-m", "autotune.sim", "--mem-fraction-static", str(f)])
        t.set_user_attr("shell", f"python3 -m autotune.sim --mem-fraction-static {f}")
        t.set_user_attr("observed", {"p_gib": 94.97, "a_gib": 33.6, "kv_tokens": kv_obs, "graph_gib": 1.1})
        t.set_user_attr("metrics", metrics)
        t.set_user_attr("best_point", "c256")
        for k in ("output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms", "mean_tpot_ms"):
            t.set_user_attr(k, metrics["c256"][k])
        t.set_user_attr("kv_tokens_error_pct", round((kv_pred - kv_obs) / kv_obs * 100, 3))
        t.set_user_attr("gpu_seconds", round(rng.uniform(100, 300), 2))
        t.set_user_attr("timings", {"startup_s": 3.2, "load_s": 5.1, "teardown_s": 0.4})
        t.set_user_attr("note", f"output_throughput={thr:.1f} at c256; KV tokens observed {kv_obs}")
        _upload(store, t, spec.run_path / "trials" / f"{t.number:05d}", thr)
        t.set_constraint("memory", -1.0)
        study.tell(t, metrics["c256"]["output_throughput"])

    def not_complete(params: dict[str, Any], state: TrialState, kind: str, reason: str, verdict: str) -> None:
        t = ask(params)
        f = params["mem_fraction_static"]
        t.set_user_attr("prediction", _prediction(f, verdict, max(0, int(400000 * (f - 0.55) / 0.3))))
        t.set_user_attr("failure_kind", kind)
        t.set_user_attr("reason", reason)
        t.set_user_attr("evidence", reason)
        t.set_user_attr("note", f"{kind}: {reason}")
        if state == TrialState.FAIL:
            t.set_user_attr("observed", {"p_gib": 94.97, "a_gib": 33.6})
            t.set_user_attr("gpu_seconds", 40.0)
        t.set_constraint("memory", 1.0)
        study.tell(t, state=state)

    complete({"mem_fraction_static": 0.83, "cuda_graph_max_bs": 256, "custom_allreduce": True}, 3000.0, baseline=True)
    not_complete(
        {"mem_fraction_static": 0.55, "cuda_graph_max_bs": 512, "custom_allreduce": True},
        TrialState.PRUNED,
        "predicted_oom",
        "KV budget -1.2 GiB < 0 at f=0.55",
        "kv_oom",
    )
    not_complete(
        {"mem_fraction_static": 0.60, "cuda_graph_max_bs": 128, "custom_allreduce": False},
        TrialState.FAIL,
        "kv_oom",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        "fits",
    )
    not_complete(
        {"mem_fraction_static": 0.94, "cuda_graph_max_bs": 512, "custom_allreduce": True},
        TrialState.FAIL,
        "graph_capture_oom",
        "Capture cuda graph failed: CUDA out of memory",
        "fits",
    )
    for _ in range(n_complete - 1):
        f = round(rng.uniform(0.65, 0.92), 2)
        complete(
            {
                "mem_fraction_static": f,
                "cuda_graph_max_bs": rng.choice([64, 128, 256, 512]),
                "custom_allreduce": rng.choice([True, False]),
            },
            2500 + 1500 * (f - 0.65) + rng.uniform(0, 400),
        )
    return spec


_SHARED: dict[str, StudySpec] = {}


@pytest.fixture(scope="session")
def finished_spec(tmp_path_factory: pytest.TempPathFactory) -> StudySpec:
    """One finished study shared by every test module that only reads it (building one takes
    seconds; each module that imports this fixture gets its own fixture object, hence the cache)."""
    if "spec" not in _SHARED:
        _SHARED["spec"] = make_finished_study(tmp_path_factory.mktemp("finished-study"))
    return _SHARED["spec"]


def replay_progress(progress: Any, study: optuna.Study, n_trials: int) -> None:
    """Drive the hooks the way the driver does, over an already finished study."""
    progress.on_start(study, n_trials)
    for t in study.trials:
        if t.user_attrs.get("failure_kind") != "predicted_oom":
            progress.on_launch(t.number, dict(t.params))
        progress.on_trial_end(study, t)
