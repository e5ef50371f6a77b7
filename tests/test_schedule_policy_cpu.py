"""benchmarks/schedule_policy_cpu.py, the measurement behind the simulator's schedule-policy CPU constants: its
fit, its refusals (one line, exit code 2), and, in the slow tier, SGLang 0.5.9's own ``calc_priority`` timed
end to end in the real SGLang venv (what SGLang's code does is checked, with wide margins, never a time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from support.benchmarks import BENCHMARKS, load_script
from support.real_sglang import need_real_sglang


@pytest.fixture()
def script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_script("schedule_policy_cpu", monkeypatch)


def test_the_fit_recovers_a_per_request_and_a_per_token_cost(script: ModuleType) -> None:
    points = [{"policy": "dfs-weight", "waiting": n, "prompt_len": length, "seconds": n * 3e-6 + n * length * 7e-9}
              for n in (32, 512, 2000) for length in (100, 2000)]
    points.append({"policy": "fcfs", "waiting": 2000, "prompt_len": 2000, "seconds": 0.0})  # not fitted
    line = script.fit(points)
    assert line["per_request_s"] == pytest.approx(3e-6)
    assert line["per_token_s"] == pytest.approx(7e-9)


def test_bad_reps_get_one_line_and_exit_code_2(script: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert script.main(["--reps", "0"]) == 2
    err = capsys.readouterr().err
    assert "--reps: 1 to 1000 (got 0)" in err and err.count("\n") == 1


def test_without_sglang_it_says_so_in_one_line(script: ModuleType, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sglang", None)  # import sglang raises ImportError
    assert script.main(["--quick"]) == 2
    err = capsys.readouterr().err
    assert "run this with an SGLang venv's python" in err and err.count("\n") == 1


@pytest.mark.real_sglang
@pytest.mark.timeout(300)
def test_sglangs_own_policies_match_the_queue_as_the_model_says(tmp_path: Path) -> None:
    env = need_real_sglang("0.5.9")
    out = tmp_path / "policy.json"
    proc = subprocess.run([str(env.python), str(BENCHMARKS / "schedule_policy_cpu.py"), "--quick", "--reps", "3",
                           "--json", str(out)], capture_output=True, text=True, timeout=240, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(BENCHMARKS.parent)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["sglang"].startswith("0.5.9")
    at = {(p["policy"], p["waiting"], p["prompt_len"]): p for p in report["points"]}
    assert len(at) == 3 * 2 * 2
    deep, shallow = at[("dfs-weight", 512, 2000)]["seconds"], at[("dfs-weight", 32, 2000)]["seconds"]
    assert deep > 4 * shallow  # dfs-weight matches every waiting request
    assert at[("lpm", 512, 2000)]["seconds"] < deep / 20  # lpm stops matching above 128 waiting: FCFS
    assert at[("lpm", 32, 2000)]["seconds"] > 20 * at[("fcfs", 32, 2000)]["seconds"]  # ... and matches below
    assert all(p["seconds"] < deep / 20 for p in report["points"] if p["policy"] == "fcfs")
    # the model's figure for each point came with it (the repository on PYTHONPATH), zero where SGLang's is ~zero
    assert all((p["modelled_seconds"] == 0) == (p["policy"] == "fcfs" or (p["policy"] == "lpm" and p["waiting"] > 128))
               for p in report["points"])
    assert "fit (dfs-weight):" in proc.stdout
