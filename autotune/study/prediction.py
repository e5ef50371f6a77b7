"""Memory predictions for a study's candidates: the model and GPU profiles, read once, and the
calibration the prediction is made with (the study file's, else the study's learnt one).

A model whose profile is ``unknown`` (an architecture outside the families autotune derives:
:attr:`ModelProfile.is_unknown`) is not judged by the formula before a launch has calibrated it:
its verdict is ``unknown`` ("unknown: calibrated from the first launch"), never a prune. The study
launches SGLang's own defaults first, learns P and A from their log, and judges by the calibrated
formula from then on (:mod:`autotune.study.candidates`, :mod:`autotune.study.search.policy`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from autotune.errors import ConfigError
from autotune.sglang.hardware.gpus import GpuKind, get_gpu
from autotune.sglang.knobs.config import ServerConfig
from autotune.sglang.memory.predictor import Calibration, Prediction, calibration_problem, predict
from autotune.sglang.models.profile import ModelProfile, load_model_profile
from autotune.spec import StudySpec

CalibrationSource = Callable[[], dict[str, Any] | None]
#: The verdict (and the reason's start) of a candidate on an unknown profile before calibration.
UNKNOWN_VERDICT = "unknown"
UNKNOWN_REASON = "unknown: calibrated from the first launch"


class Predictor:
    """``predict(cfg)`` as the driver and ``autotune plan`` both see it."""

    def __init__(self, spec: StudySpec, calibration: CalibrationSource) -> None:
        self.spec = spec
        self._calibration = calibration
        self._profiles: tuple[ModelProfile, GpuKind, ModelProfile | None] | None = None

    def calibration(self) -> dict[str, Any] | None:
        if self.spec.calibration is not None:
            return {**self.spec.calibration.model_dump(exclude_none=True), "source": "study file"}
        cal = self._calibration()
        if cal:  # stored by an earlier run or calibrate (or an older autotune that checked less)
            problem = calibration_problem(cal, get_gpu(self.spec.hardware.gpu).memory_gib)
            if problem:
                raise ConfigError(f"calibration stored with study {self.spec.name!r} ({cal.get('source', '?')}): "
                                  f"{problem}; give calibration: in the study file, or run autotune calibrate "
                                  "with a log of this study")
        return cal

    def profiles(self) -> tuple[ModelProfile, GpuKind, ModelProfile | None]:
        """(model, GPU, draft model or None), read on first use."""
        if self._profiles is None:
            spec = self.spec
            model = load_model_profile(spec.resolve_path(spec.server.model_path))
            sp = spec.search_space.speculative
            draft = load_model_profile(spec.resolve_path(sp.draft_model_path)) \
                if sp is not None and sp.draft_model_path else None
            self._profiles = (model, get_gpu(spec.hardware.gpu), draft)
        return self._profiles

    def calibrated(self) -> bool:
        """Whether P and A were measured (study file, ``calibrate``, or a launch of the study)."""
        cal = self.calibration() or {}
        return cal.get("p_gib") is not None and cal.get("a_gib") is not None

    def awaits_calibration(self) -> bool:
        """An unknown profile nothing has calibrated yet: no candidate is condemned by the formula."""
        return self.profiles()[0].is_unknown and not self.calibrated()

    def predict(self, cfg: ServerConfig) -> Prediction:
        pred = self._predict(cfg)
        if not self.awaits_calibration():
            return pred
        model = self.profiles()[0]
        why = f" ({model.unknown_reason})" if model.unknown_reason else ""
        return replace(pred, verdict=UNKNOWN_VERDICT, uncertain=True,
                       reason=f"{UNKNOWN_REASON}{why}; the generic formula alone: {pred.verdict}, {pred.reason}")

    def _predict(self, cfg: ServerConfig) -> Prediction:
        model, gpu, draft = self.profiles()
        cal = self.calibration()
        return predict(
            model, gpu, cfg,
            version=self.spec.server.sglang_version,
            num_gpus=self.spec.hardware.num_gpus,
            interconnect=self.spec.hardware.interconnect,
            calibration=Calibration.from_dict(cal) if cal else None,
            draft=draft if cfg.speculative.enabled else None,
        )
