"""Every command's output piped into a reader that stops early (``autotune plan s.yaml | head -1``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotune.cli import EXIT_BROKEN_PIPE, main

ROOT = Path(__file__).resolve().parents[1]


def _study(tmp_path: Path) -> Path:
    data = {
        "name": "pipe",
        "server": {"backend": "sim", "sglang_version": "0.5.9", "model_path": str(ROOT / "studies" / "models" / "kimi-k2-class"),
                   "tp_size": 8},
        "hardware": {"gpu": "rtx-pro-6000", "num_gpus": 8, "interconnect": "pcie"},
        "search_space": {"mem_fraction_static": {"low": 0.5, "high": 0.95, "step": 0.05}},
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_reader_that_closes_early_ends_the_command_quietly(tmp_path):
    """`autotune plan s.yaml | head -1`: a BrokenPipeError traceback, exit 1, once head had gone.
    Now: nothing on stderr but the log, exit 141 (128 + SIGPIPE, as a shell reports for coreutils
    or git). The pipe's reader is closed before the command starts, so its first write fails,
    however small the output (no race with the reader)."""
    argv = ["plan", str(_study(tmp_path))]
    r, w = os.pipe()
    os.close(r)  # the reader has stopped
    try:
        proc = subprocess.run([sys.executable, "-m", "autotune", *argv], stdout=w, stderr=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=tmp_path, timeout=60)
    finally:
        os.close(w)
    err = proc.stderr.decode()
    assert proc.returncode == EXIT_BROKEN_PIPE, err
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err


def test_a_broken_pipe_that_is_not_the_output_is_still_a_bug(monkeypatch, capsys):
    """A BrokenPipeError from a server's socket while stdout is fine is not a reader that
    stopped: it escapes, with its traceback."""
    import autotune.cli._plan as plan

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe (a server's socket)")

    monkeypatch.setattr(plan, "_plan", broken)
    with pytest.raises(BrokenPipeError):
        main(["plan", str(ROOT / "studies" / "demo.yaml")])
