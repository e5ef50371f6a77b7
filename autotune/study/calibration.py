"""Calibration: the measured P, A, KV tokens and graph memory, stored with the study."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.spec import StudySpec
from autotune.study import attrs


def calibration_from_text(text: str) -> dict[str, Any]:
    from autotune.sglang.logparse import parse_log, summarize

    s = summarize(parse_log(text))
    return {k: s.get(k) for k in ("p_gib", "a_gib", "kv_tokens", "graph_gib")}


def calibrate_from_log(spec: StudySpec, log_path: str) -> dict[str, Any]:
    """Parse ``log_path`` and store what it says with the study (created if new)."""
    from autotune.study.storage import open_study

    path = Path(log_path)
    if not path.is_file():
        raise ConfigError(f"--from-log: no such file {log_path!r}")
    cal = calibration_from_text(path.read_text(errors="replace"))
    if cal["p_gib"] is None or cal["a_gib"] is None:
        raise ConfigError(f"--from-log: {log_path!r} has no SGLang memory lines (need the baseline and "
                          "'Load weight end' lines to learn P and A)")
    cal["source"] = f"log {path.name}"
    open_study(spec).set_user_attr(attrs.CALIBRATION, cal)
    return cal
