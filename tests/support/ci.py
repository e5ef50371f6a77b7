"""What CI means to the suite: ``CI=true`` (or 1), and the markers of the slow tier."""

from __future__ import annotations

import os

# The slow tier: deselected by the default command (pyproject's addopts: -m "not slow_tier"),
# run with `python3 -m pytest -q -m slow_tier`. A test joins it through any of these markers.
SLOW_TIER_MARKERS = ("real_sglang", "postgres", "browser", "faults")


def in_ci() -> bool:
    """CI builds every engine, server and browser the slow tier needs: there a missing one fails."""
    return os.environ.get("CI", "").lower() in ("true", "1")
