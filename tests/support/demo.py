"""``studies/demo.yaml`` for tests that run or check a variant of it.

The demo names its models relative to ``studies/``; ``demo_data()`` makes them absolute, so a
copy written anywhere (a test's ``tmp_path``) loads the same models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from autotune.spec import StudySpec, load_study_spec

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "studies" / "demo.yaml"
MODELS = REPO / "studies" / "models"


def demo_data() -> dict[str, Any]:
    """The demo study as data, its model and draft model paths absolute."""
    data: dict[str, Any] = yaml.safe_load(DEMO.read_text())
    data["server"]["model_path"] = str(MODELS / "kimi-k2-class")
    data["search_space"]["speculative"]["draft_model_path"] = str(MODELS / "kimi-k2-class-eagle3")
    return data


def write_study(data: dict[str, Any], directory: Path, name: str = "study.yaml") -> Path:
    """``data`` as the study file ``directory/name``."""
    path = directory / name
    path.write_text(yaml.safe_dump(data))
    return path


def demo_spec(directory: Path, data: dict[str, Any] | None = None) -> StudySpec:
    """The demo (or ``data``, an edited ``demo_data()``) written to ``directory`` and loaded."""
    return load_study_spec(write_study(demo_data() if data is None else data, directory))
