"""The study file as the commands load it: its hardware block read from this node (``hardware: auto``)
or from the figures describing a GPU outside the catalogue, then validated by :mod:`autotune.spec`.

Here, above the study model, because reading the node (NVML, AMD SMI, ``nvidia-smi topo -m``) is no
business of the ground floor: :mod:`autotune.spec` takes the resolution as a hook and imports nothing
of the node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.node.auto import resolve_study_data
from autotune.spec import StudySpec, load_study_spec, parse_study


def load_study(path: str | Path) -> StudySpec:
    """Load and validate a study file, its ``hardware: auto`` (or described GPU) resolved on this node."""
    return load_study_spec(path, hardware=resolve_study_data)


def study_from_data(data: Any, *, source_path: str | None = None) -> StudySpec:
    """:func:`load_study` for already-loaded YAML data."""
    return parse_study(data, source_path=source_path, hardware=resolve_study_data)
