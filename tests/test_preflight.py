"""A bad study fails before anything starts: one line, exit 2, no Ray output, nothing created."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.demo import demo_data, write_study

ROOT = Path(__file__).resolve().parents[1]


def _study(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    data = demo_data()
    edit(data)
    return write_study(data, tmp_path)


def _bad_dataset(tmp_path: Path):  # type: ignore[no-untyped-def]
    bad = tmp_path / "prompts.jsonl"
    bad.write_bytes(b"\xff\xfe not utf-8 {\n")

    def edit(d: dict) -> None:
        d["workload"]["dataset_path"] = str(bad)
    return edit


CASES = {
    "unknown gpu": (lambda tmp: lambda d: d["hardware"].update(gpu="voodoo-9000"),
                    "hardware.gpu: unknown GPU kind 'voodoo-9000'"),
    "missing model": (lambda tmp: lambda d: d["server"].update(model_path=str(tmp / "nope")),
                      "server.model_path: "),
    "unreadable dataset": (_bad_dataset, "workload.dataset_path: unreadable"),
    "missing dataset": (lambda tmp: lambda d: d["workload"].update(dataset_path=str(tmp / "none.jsonl")),
                        "workload.dataset_path: no such file"),
    "flag the parser refuses": (lambda tmp: lambda d: d["server"].update(extra_args=["--disable-cuda-grph"]),
                                "server.extra_args: "),
    "storage driver missing": (lambda tmp: lambda d: d.update(storage="mysql+mysqldb://u@127.0.0.1/db"),
                               "storage: mysql+mysqldb needs the MySQLdb driver"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_study_is_one_line_exit_2_before_ray(tmp_path: Path, case: str) -> None:
    make_edit, expected = CASES[case]
    path = _study(tmp_path, make_edit(tmp_path))
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    proc = subprocess.run([sys.executable, "-m", "autotune", "run", str(path), "--no-progress"],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], proc.stderr
    assert proc.stdout == ""
    assert "ray" not in (proc.stdout + proc.stderr).lower().replace("array", "")
    # Nothing was touched: no database, no run directory.
    assert not (tmp_path / "demo-blackwell.db").exists() and not (tmp_path / "runs").exists()
