"""Helpers of the hostile-input suite (tests/test_hostile_*.py): a small valid study to break one field
of, and the CLI run in-process or in a bounded subprocess, answering (exit code, stderr lines)."""

from __future__ import annotations

import copy
import json
import os
import resource
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "studies" / "models"
QWEN32B = MODELS / "qwen3-32b-class"

#: A study every command accepts: the simulated backend, inline, one knob, short load points.
BASE: dict[str, Any] = {
    "name": "hostile",
    "n_trials": 2,
    "executor": {"kind": "inline"},
    "server": {"backend": "sim", "sglang_version": "0.5.9", "model_path": str(QWEN32B), "startup_timeout_s": 60},
    "hardware": {"gpu": "h100", "num_gpus": 1},
    "search_space": {"mem_fraction_static": {"low": 0.8, "high": 0.9, "step": 0.05},
                     "cuda_graph_max_bs": {"choices": [8, 16]}},
    "workload": {"input_len": 128, "output_len": 32, "num_prompts": 8, "concurrency": [4], "warmup_requests": 0},
    "search": {"confirm_top": 0, "initial_design": 0},
}

#: The bounds a hostile input must stay within (issue 34): a subprocess gets this much address
#: space and this long; a MemoryError or a timeout fails the test. In this process, the Python
#: memory a refusal allocates (tracemalloc's peak) stays under TRACED_BYTES, and each test module
#: runs under pytest-timeout's SECONDS.
MEMORY_BYTES = 2**30
TRACED_BYTES = 128 * 2**20
SECONDS = 10


def study(tmp: Path, edit: Callable[[dict[str, Any]], Any] | None = None) -> Path:
    """``BASE`` with ``edit`` applied, written to ``tmp/study.yaml``."""
    data = copy.deepcopy(BASE)
    if edit is not None:
        edit(data)
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


def setting(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit that sets the dotted ``path`` of the study to ``value``."""
    keys = path.split(".")

    def edit(data: dict[str, Any]) -> None:
        cur = data
        for k in keys[:-1]:
            cur = cur.setdefault(k, {})
        cur[keys[-1]] = value
    return edit


def cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, list[str]]:
    """``autotune ARGV`` in this process: (exit code, non-empty stderr lines), its allocations bounded."""
    from autotune.cli import main

    capsys.readouterr()
    tracemalloc.start()
    try:
        code = main(argv)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert peak < TRACED_BYTES, f"{argv}: {peak / 2**20:.0f} MiB allocated"
    return code, lines


def _bounded() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


_DRIVER = """
import contextlib, io, json, sys
from autotune.cli import main
out = []
for case in json.load(sys.stdin):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        if "argv" in case:
            code = main(case["argv"])
        else:
            exec(case["code"], {})
            code = 0
    out.append({"code": code, "err": err.getvalue()})
print(json.dumps(out))
"""


def cli_bounded(cases: list[dict[str, Any]], cwd: Path) -> list[tuple[int, list[str]]]:
    """Each case (``{"argv": [...]}``: ``autotune ARGV``; ``{"code": "..."}``: Python, exit 0 unless it
    raises) in one subprocess limited to :data:`MEMORY_BYTES` of address space and :data:`SECONDS`
    for them all (an input that eats the machine fails the test instead of the suite; one process
    pays autotune's imports once). (exit code, non-empty stderr lines) per case."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    try:
        proc = subprocess.run([sys.executable, "-c", _DRIVER], cwd=cwd, input=json.dumps(cases),  # noqa: S603
                              capture_output=True, text=True, timeout=SECONDS, preexec_fn=_bounded, env=env,
                              check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {SECONDS} s: {cases}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [(r["code"], [line for line in r["err"].splitlines() if line.strip()])
            for r in json.loads(proc.stdout.splitlines()[-1])]


def one_line(code: int, lines: list[str], *needles: str) -> str:
    """Assert exit code 2 and exactly one stderr line, ``error: ...`` holding every needle."""
    assert code == 2, lines[-5:]
    assert len(lines) == 1, lines[-5:]
    line = lines[0]
    assert line.startswith("error: ") and len(line) < 600, line
    for needle in needles:
        assert needle in line, line
    return line


def nothing_stored(tmp: Path) -> None:
    """No database and no run directory were made next to the study."""
    assert not list(tmp.glob("*.db")), list(tmp.glob("*.db"))
    assert not (tmp / "runs").exists()
