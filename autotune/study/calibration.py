"""Calibration: the measured P, A, KV tokens and graph memory, stored with the study."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.files import read_text
from autotune.limits import LOG_BYTES, clip, shown
from autotune.sglang.memory.predictor import CAPACITY_TOLERANCE_GIB, calibration_problem
from autotune.spec import StudySpec
from autotune.study import attrs


def calibration_from_text(text: str) -> dict[str, Any]:
    from autotune.sglang.logparse import parse_log, summarize

    s = summarize(parse_log(text))
    return {k: s.get(k) for k in ("p_gib", "a_gib", "kv_tokens", "graph_gib", "log_wording")}


def _study_profiles(spec: StudySpec) -> tuple[Any, Any]:
    """(model profile or None when its config cannot be read, GPU kind) of the study."""
    from autotune.sglang.hardware.gpus import get_gpu
    from autotune.sglang.models.profile import load_model_profile

    try:
        model = load_model_profile(spec.resolve_path(spec.server.model_path))
    except (ConfigError, OSError, ValueError):
        model = None
    return model, get_gpu(spec.hardware.gpu)


def calibrate_from_log(spec: StudySpec, log_path: str, *, force: bool = False) -> dict[str, Any]:
    """Parse ``log_path`` and store what it says with the study (created if new).

    A partial log calibrates what it shows and leaves the rest None (the
    predictor uses P and A only together). ``log_wording`` records which
    generation's wording was read. The log is first held against the study
    (:mod:`autotune.study.log_check`): a contradiction raises ConfigError naming
    both sides and stores nothing, unless ``force`` (then ``forced`` lists them).
    """
    from autotune.sglang.logparse import figure_past, parse_log, summarize
    from autotune.study.log_check import contradictions
    from autotune.study.storage.opening import open_study

    path = Path(log_path)
    name = clip(path.name)  # a log's name, in every message and in the stored source
    text = read_text(path, "--from-log", LOG_BYTES, errors="replace")  # a regular file, bounded
    events = parse_log(text)
    summary = summarize(events)
    cal = {k: summary.get(k) for k in ("p_gib", "a_gib", "kv_tokens", "graph_gib", "log_wording")}
    if all(cal[k] is None for k in ("p_gib", "a_gib", "kv_tokens", "graph_gib")):
        raise ConfigError(f"--from-log: {shown(log_path, 200)} has no SGLang memory lines ('Load weight begin/end', "
                          "'KV Cache is allocated', the graph capture lines)")
    model, gpu = _study_profiles(spec)
    figure = figure_past(events, gpu.memory_gib + CAPACITY_TOLERANCE_GIB)
    if figure:  # read as inf or past the GPU: no measurement, and never used (the weights check, --force)
        raise ConfigError(f"--from-log: {name}: {figure} is not a finite number of GiB within the GPU's memory "
                          f"({gpu.memory_gib:.2f} GiB) ({spec.hardware.gpu}); nothing stored")
    problem = calibration_problem(cal, gpu.memory_gib)
    if problem:  # not a measurement of any GPU of this study: never stored, --force or not
        raise ConfigError(f"--from-log: {name}: {problem} ({spec.hardware.gpu}); nothing stored")
    against = contradictions(spec, text, summary, events, model, gpu, where=f"--from-log: {name}")
    if against and not force:
        raise ConfigError(f"--from-log: {name} contradicts study {spec.name!r}: {'; '.join(against)} "
                          "(nothing stored; --force stores it anyway)")
    cal["source"] = f"log {name}" + (" (forced)" if against else "")
    if against:
        cal["forced"] = against
    open_study(spec).set_user_attr(attrs.CALIBRATION, cal)
    return cal
