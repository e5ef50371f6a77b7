"""Benchmark scripts and their harness imported by tests, as ``python benchmarks/<name>.py`` would run
them: with ``benchmarks/`` first on ``sys.path`` (for this test only), so ``harness.*`` resolves."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_script(name: str, monkeypatch: pytest.MonkeyPatch | None = None) -> ModuleType:
    """``benchmarks/<name>.py`` as a fresh module (not run as ``__main__``). Without ``monkeypatch``
    nothing process-wide changes: only for a script that imports no harness and defines no dataclass."""
    module_name = f"{name}_under_test"
    spec = importlib.util.spec_from_file_location(module_name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    if monkeypatch is not None:
        monkeypatch.syspath_prepend(str(BENCHMARKS))
        monkeypatch.setitem(sys.modules, module_name, mod)  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def load_harness(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks/harness/<name>.py`` (``harness.<name>``)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module(f"harness.{name}")
