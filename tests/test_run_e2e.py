"""A whole sweep end to end on the simulated backend: real processes, HTTP, optuna storage."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from autotune.cli import main

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "studies" / "models"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("cli_signal_handlers")]


def _study(tmp_path: Path, **over) -> Path:
    data = {
        "name": "e2e",
        "n_trials": 5,
        "sampler": {"kind": "grid", "seed": 0},
        "executor": {"kind": "inline"},
        "server": {
            "backend": "sim",
            "sglang_version": "0.5.9",
            "model_path": str(MODELS / "kimi-k2-class"),
            "tp_size": 8,
            "startup_timeout_s": 60,
            "sim": {"time_scale": 50, "seed": 0},
        },
        "hardware": {"gpu": "rtx-pro-6000", "num_gpus": 8, "interconnect": "pcie"},
        "search_space": {
            "mem_fraction_static": {"low": 0.55, "high": 0.90, "step": 0.35},
            "cuda_graph_max_bs": {"choices": [64, 128]},
        },
        "workload": {"input_len": 128, "output_len": 32, "num_prompts": 48, "concurrency": [16],
                     "warmup_requests": 2},
        "objective": {"metric": "output_throughput"},
        "search": {"confirm_top": 1, "repeats": 1},
    }
    for k, v in over.items():
        data[k] = v
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _json_out(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _sim_trial_request(tmp_path: Path, number: int, f: float, sim: Any, env: dict[str, str] | None = None) -> Any:
    """A TrialRequest for one launch of the e2e study's seed node on the simulator, at ``f``."""
    from autotune import space
    from autotune.spec import load_study_spec
    from autotune.trial.contract import TrialRequest

    spec = load_study_spec(_study(tmp_path))
    return TrialRequest(
        study_name="e2e", trial_number=number, config=space.to_config(spec, {"mem_fraction_static": f}),
        backend="sim", sglang_version="0.5.9", gpu="rtx-pro-6000", num_gpus=8, interconnect="pcie",
        workload=spec.workload, objective=spec.objective.as_objective(),
        artifact_dir=str(tmp_path / f"t{number}"), run_dir=str(tmp_path / "runs"), startup_timeout_s=60,
        sim=sim, env=env or {},
    )


def _sim_servers(root: int | None = None) -> list[psutil.Process]:
    """Simulated servers (and their watchdogs) under ``root`` (default: this test process)."""
    out = []
    for p in psutil.Process(root or os.getpid()).children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "autotune.sim" in cmd or "autotune.launch.watchdog" in cmd:
            out.append(p)
    return out


def test_sweep_end_to_end(tmp_path: Path, capsys):
    study = _study(tmp_path)
    data = yaml.safe_load(study.read_text())
    data["server"]["sim"]["time_scale"] = 100  # 50: each of the 5 launches spent 1 s of its ~2 s in startup sleeps
    study.write_text(yaml.safe_dump(data))
    assert main(["run", str(study), "--no-progress"]) == 0
    capsys.readouterr()
    status = _json_out(capsys, ["status", str(study), "--json"])
    assert status["study"] == "e2e"
    states = status["states"]
    assert states["COMPLETE"] >= 3
    assert states["PRUNED"] + states["FAIL"] >= 1
    assert status["failure_kinds"].get("predicted_oom", 0) + status["failure_kinds"].get("kv_oom", 0) >= 1
    assert status["calibration"]["p_gib"] == pytest.approx(94.0, abs=0.05)

    best = _json_out(capsys, ["best", str(study), "--json"])
    for key in ("number", "params", "value", "metrics", "command", "baseline_value", "gain_pct"):
        assert key in best
    assert best["command"][1:3] == ["-m", "sglang.launch_server"]
    assert best["value"] > 0 and best["baseline_value"] > 0
    # The winner and the baseline were run again: median and spread of their runs.
    assert len(best["confirmation"]["values"]) == 2
    assert len(best["baseline_confirmation"]["values"]) == 2
    assert status["budget_used"] == 5

    import optuna

    st = optuna.load_study(study_name="e2e", storage=f"sqlite:///{tmp_path / 'e2e.db'}")
    t0 = st.trials[0]
    assert t0.user_attrs.get("baseline") is True
    # Trial 0 launched SGLang's defaults: none of the searched knobs on its command line.
    assert "--mem-fraction-static" not in t0.user_attrs["command"]
    assert "--cuda-graph-max-bs" not in t0.user_attrs["command"]
    pruned = [t for t in st.trials if t.state.name == "PRUNED"]
    assert pruned and "rest = " in pruned[0].user_attrs["reason"]
    launched = [t for t in st.trials if t.state.name == "COMPLETE"]
    for t in launched:
        err = t.user_attrs.get("kv_tokens_error_pct")
        assert err is not None and abs(err) <= 1.0, (t.number, err)
    assert not _sim_servers()


@pytest.mark.faults  # kill -9 of the orchestrator mid-study: fault injection, 80 s, the slow tier
def test_kill_9_then_resume(tmp_path: Path, capsys):
    study = _study(tmp_path, n_trials=4, search={"confirm_top": 0},
                   workload={"input_len": 128, "output_len": 256, "num_prompts": 400, "concurrency": [8],
                             "warmup_requests": 1})
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = (tmp_path / "run.log").open("w")  # a file, not a pipe: nobody drains a pipe here
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "run", str(study), "--no-progress"],
                            stdout=log, stderr=log, env=env, text=True)
    try:
        # Wait until the second trial's server is up (so one trial is already complete). The
        # run dir is watched, not the study: opening the storage here would race its creation.
        deadline = time.monotonic() + 120
        victims: list[psutil.Process] = []
        trials_dir = tmp_path / "runs" / "e2e" / "trials"
        while time.monotonic() < deadline:
            victims = _sim_servers(proc.pid)
            later = [d for d in trials_dir.glob("0*") if d.name != "00000" and (d / "server.log").exists()]
            if later and victims:
                break
            time.sleep(0.2)
        assert victims, "no server to kill under: " + (tmp_path / "run.log").read_text()[-2000:]
        import optuna

        st = optuna.load_study(study_name="e2e", storage=f"sqlite:///{tmp_path / 'e2e.db'}")
        completed_before = {t.number for t in st.trials if t.state.name == "COMPLETE"}
        assert completed_before, "a trial completed before the kill"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    # The killed run's servers do not outlive it for long (watchdog).
    gone, alive = psutil.wait_procs(victims, timeout=15)
    assert not alive, [p.pid for p in alive]

    assert main(["run", str(study), "--no-progress"]) == 0
    capsys.readouterr()
    status = _json_out(capsys, ["status", str(study), "--json"])
    assert status["budget_used"] >= 4
    assert status["failure_kinds"].get("interrupted") == 1
    import optuna

    st = optuna.load_study(study_name="e2e", storage=f"sqlite:///{tmp_path / 'e2e.db'}")
    still = {t.number for t in st.trials if t.state.name == "COMPLETE"}
    assert completed_before <= still
    interrupted = [t for t in st.trials if t.user_attrs.get("failure_kind") == "interrupted"][0]
    rerun = [t for t in st.trials if t.user_attrs.get("retry_of") == interrupted.number]
    assert rerun and rerun[0].params == interrupted.params
    assert not _sim_servers()


def test_live_kill_when_the_weights_loaded_line_proves_the_formula_negative(tmp_path: Path):
    """A launch the estimate could not condemn (f just under the boundary, P and A only estimated)
    is killed at the weights-loaded line, with the formula as evidence, not at the pool's failure."""
    from autotune.spec import SimSpec
    from autotune.trial.live import run_trial_body

    # slow enough that the kill lands between the weights line and the pool's failure (0.1 s apart);
    # the checkpoint read warm (~48 modelled s, autotune.sim.weight_load) keeps the launch under a minute
    req = _sim_trial_request(tmp_path, 7, 0.765, SimSpec(time_scale=3.0, seed=0),
                             env={"AUTOTUNE_SIM_PAGE_CACHE": "warm"})
    result = run_trial_body(req)
    assert result.state == "failed" and result.failure_kind == "kv_oom"
    assert result.evidence.startswith("rest = 21.71 - 94.00 x (1 - 0.765)"), result.evidence
    log = (tmp_path / "t7" / "server.log").read_text()
    assert "Load weight end" in log and "Not enough memory" not in log, "killed before the pool failed"
    assert not _sim_servers()


def test_a_ctrl_c_swallowed_inside_the_load_point_still_stops_the_trial(tmp_path: Path, monkeypatch):
    """uvloop reports a KeyboardInterrupt raised in a transport callback as that connection's
    error, so the load point merely fails. The signal handler also records the signal, and the
    trial body raises it again instead of recording a load failure (the study then exits 130)."""
    from autotune.errors import LoadGenError
    from autotune.launch import cleanup
    from autotune.spec import SimSpec
    from autotune.trial import live

    def swallowed(*_a, **_k):
        cleanup.note_interrupt(signal.SIGINT)  # what the handler records before its raise is lost
        raise LoadGenError("load point failed: connection closed")

    monkeypatch.setattr(live, "run_load", swallowed)
    # the load is never run: time scale 200 only shortens the two startups (at 20 they took ~2 s each)
    req = _sim_trial_request(tmp_path, 3, 0.88, SimSpec(time_scale=200.0, seed=0))
    try:
        with pytest.raises(KeyboardInterrupt):
            live.run_trial_body(req)
        assert not _sim_servers()  # the server was still stopped on the way out
    finally:
        cleanup.clear_interrupt()
    # without a recorded signal the same failure is a load failure, as before
    monkeypatch.setattr(live, "run_load", lambda *_a, **_k: (_ for _ in ()).throw(LoadGenError("boom")))
    # the server lives on: the trial waits DYING_GRACE_S (5 s) for it to die before calling it a load failure
    monkeypatch.setattr(live, "DYING_GRACE_S", 0.2)
    res = live.run_trial_body(dataclasses.replace(req, trial_number=4, artifact_dir=str(tmp_path / "t4")))
    assert res.state == "failed" and res.failure_kind == "load_failed"
