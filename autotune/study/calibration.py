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
    return {k: s.get(k) for k in ("p_gib", "a_gib", "kv_tokens", "graph_gib", "log_wording")}


def calibrate_from_log(spec: StudySpec, log_path: str) -> dict[str, Any]:
    """Parse ``log_path`` and store what it says with the study (created if new).

    A partial log calibrates what it shows and leaves the rest None (the
    predictor uses P and A only together). ``log_wording`` records which
    generation's wording was read.
    """
    from autotune.study.storage import open_study

    path = Path(log_path)
    if not path.is_file():
        raise ConfigError(f"--from-log: no such file {log_path!r}")
    cal = calibration_from_text(path.read_text(errors="replace"))
    if all(cal[k] is None for k in ("p_gib", "a_gib", "kv_tokens", "graph_gib")):
        raise ConfigError(f"--from-log: {log_path!r} has no SGLang memory lines ('Load weight begin/end', "
                          "'KV Cache is allocated', the graph capture lines)")
    cal["source"] = f"log {path.name}"
    open_study(spec).set_user_attr(attrs.CALIBRATION, cal)
    return cal
