"""Memory predictions for a study's candidates: the model and GPU profiles, read once, and the
calibration the prediction is made with (the study file's, else the study's learnt one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotune.sglang.config import ServerConfig
from autotune.sglang.gpus import GpuKind, get_gpu
from autotune.sglang.memory import Calibration, Prediction, predict
from autotune.sglang.models import ModelProfile, load_model_profile
from autotune.spec import StudySpec

CalibrationSource = Callable[[], dict[str, Any] | None]


class Predictor:
    """``predict(cfg)`` as the driver and ``autotune plan`` both see it."""

    def __init__(self, spec: StudySpec, calibration: CalibrationSource) -> None:
        self.spec = spec
        self._calibration = calibration
        self._profiles: tuple[ModelProfile, GpuKind, ModelProfile | None] | None = None

    def calibration(self) -> dict[str, Any] | None:
        if self.spec.calibration is not None:
            return {**self.spec.calibration.model_dump(exclude_none=True), "source": "study file"}
        return self._calibration()

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

    def predict(self, cfg: ServerConfig) -> Prediction:
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
