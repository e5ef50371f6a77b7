"""The published-speed yardstick (tests/data/published_speed) stays loadable and in its schema.

Each set file holds the points one source published (schema: the directory's README.md). This checks the
form only: every file parses, names a known GPU and a loadable model profile, has the keys the schema
requires, and every point carries at least one measured figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from autotune.sglang.gpus import get_gpu
from autotune.sglang.models import load_model_profile

ROOT = Path(__file__).parent / "data" / "published_speed"
FILES = sorted(p for p in ROOT.glob("*.yaml") if p.name != "holdout.yaml")
TOP = {"id", "source", "independent_of", "release", "model", "hardware", "layout", "flags", "workload", "knob",
       "points", "notes"}
SOURCE = {"url", "kind", "title", "published", "where"}
KINDS = {"docs", "blog", "issue", "pr", "paper", "vendor", "dashboard"}
WORKLOAD = {"tool", "dataset", "input_len", "output_len", "range_ratio", "num_prompts", "max_concurrency",
            "request_rate"}
LAYOUT = {"tp", "dp", "ep", "dp_attention", "pp"}


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), path.name
    return data


SETS = {p.stem: _load(p) for p in FILES}


def test_there_are_sets_and_ids_are_file_names() -> None:
    assert SETS
    for stem, s in SETS.items():
        assert s["id"] == stem


@pytest.mark.parametrize("sid", sorted(SETS))
def test_set_follows_the_schema(sid: str) -> None:
    s = SETS[sid]
    assert TOP <= set(s), f"{sid}: missing {TOP - set(s)}"
    src = s["source"]
    assert SOURCE <= set(src), f"{sid}: source lacks {SOURCE - set(src)}"
    assert src["kind"] in KINDS, f"{sid}: source.kind {src['kind']!r}"
    url = urlparse(src["url"])
    assert url.scheme == "https" and url.netloc, f"{sid}: source.url {src['url']!r}"
    assert str(src["where"]).strip(), f"{sid}: source.where is empty"
    assert isinstance(s["independent_of"], list)
    assert all(o in SETS and o != sid for o in s["independent_of"]), f"{sid}: independent_of {s['independent_of']}"
    assert LAYOUT <= set(s["layout"]), f"{sid}: layout lacks {LAYOUT - set(s['layout'])}"
    assert WORKLOAD <= set(s["workload"]), f"{sid}: workload lacks {WORKLOAD - set(s['workload'])}"
    hw = s["hardware"]
    get_gpu(hw["gpu"])  # raises ConfigError on an unknown name
    assert int(hw["num_gpus"]) >= 1 and int(hw["nodes"]) >= 1
    assert str(s["release"]).strip() and str(s["knob"]).strip()


@pytest.mark.parametrize("sid", sorted(SETS))
def test_points_are_unique_and_measured(sid: str) -> None:
    points = SETS[sid]["points"]
    assert points, sid
    ids = [p["id"] for p in points]
    assert len(ids) == len(set(ids)), f"{sid}: duplicate point ids"
    for p in points:
        assert {"id", "flags", "workload", "measured"} <= set(p), f"{sid}/{p.get('id')}"
        assert set(p["workload"]) <= WORKLOAD, f"{sid}/{p['id']}: workload keys {set(p['workload']) - WORKLOAD}"
        figures = [v for v in p["measured"].values() if v is not None]
        assert figures, f"{sid}/{p['id']}: no measured figure"
        assert all(isinstance(v, (int, float)) and v > 0 for v in figures), f"{sid}/{p['id']}: {p['measured']}"


def test_every_set_names_a_profile_directory() -> None:
    for sid, s in SETS.items():
        assert (ROOT / "models" / s["model"]["profile"] / "config.json").is_file(), f"{sid}: {s['model']['profile']}"


@pytest.mark.parametrize("profile", sorted(p.name for p in (ROOT / "models").iterdir() if p.is_dir()))
def test_model_profiles_load(profile: str) -> None:
    prof = load_model_profile(ROOT / "models" / profile)
    assert not prof.is_unknown, f"{profile}: {prof.unknown_reason}"
    assert prof.num_layers > 0 and prof.weight_bytes > 0
