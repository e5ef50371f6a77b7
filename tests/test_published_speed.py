"""The published-speed yardstick (tests/data/published_speed) parses against its schema.

Each ``*.yaml`` there is one set of real SGLang serving measurements that one source published
(the schema is in that directory's README.md). Nothing here judges the figures; it only keeps the
files usable: required keys present, ids unique and equal to the file names, every GPU known to the
catalogue, every model profile loadable, every point carrying at least one measured figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from autotune.errors import ConfigError
from autotune.sglang.gpus import get_gpu
from autotune.sglang.models import load_model_profile

ROOT = Path(__file__).parent / "data" / "published_speed"
SET_FILES = sorted(p for p in ROOT.glob("*.yaml") if p.name != "holdout.yaml")
TOP = {"id", "source", "independent_of", "release", "model", "hardware", "layout", "flags", "workload", "knob",
       "points", "notes"}
SOURCE = {"url", "kind", "title", "published", "where"}
KINDS = {"docs", "blog", "issue", "pr", "paper", "vendor", "dashboard"}
MODEL = {"name", "profile", "quantization", "kv_cache_dtype"}
HARDWARE = {"gpu", "num_gpus", "interconnect", "nodes"}
LAYOUT = {"tp", "dp", "ep", "dp_attention", "pp"}
WORKLOAD = {"tool", "dataset", "input_len", "output_len", "range_ratio", "num_prompts", "max_concurrency",
            "request_rate"}
POINT = {"id", "measured"}
POINT_OPTIONAL = {"flags", "workload", "model", "note"}


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path.name}: not a mapping"
    return data


def _missing(want: set[str], have: dict[str, Any], where: str) -> None:
    assert isinstance(have, dict), f"{where}: not a mapping"
    assert want <= set(have), f"{where}: missing {sorted(want - set(have))}"


def test_the_data_set_has_sets() -> None:
    assert SET_FILES, f"no set files under {ROOT}"


@pytest.mark.parametrize("path", SET_FILES, ids=[p.stem for p in SET_FILES])
def test_set_file_matches_the_schema(path: Path) -> None:
    s = _load(path)
    _missing(TOP, s, path.name)
    assert s["id"] == path.stem
    _missing(SOURCE, s["source"], f"{path.name}: source")
    url = urlparse(s["source"]["url"])
    assert url.scheme == "https" and url.netloc and url.path.strip("/"), f"{path.name}: source.url {s['source']['url']!r}"
    assert s["source"]["kind"] in KINDS, f"{path.name}: source.kind {s['source']['kind']!r}"
    assert s["source"]["where"], f"{path.name}: source.where is empty"
    assert isinstance(s["independent_of"], list)
    others = {q.stem for q in SET_FILES} - {path.stem}
    assert set(s["independent_of"]) <= others, f"{path.name}: independent_of names no set: {s['independent_of']}"
    _missing(MODEL, s["model"], f"{path.name}: model")
    _missing(HARDWARE, s["hardware"], f"{path.name}: hardware")
    _missing(LAYOUT, s["layout"], f"{path.name}: layout")
    _missing(WORKLOAD, s["workload"], f"{path.name}: workload")
    assert isinstance(s["flags"], dict)
    assert isinstance(s["hardware"]["num_gpus"], int) and s["hardware"]["num_gpus"] >= 1
    try:
        get_gpu(s["hardware"]["gpu"])
    except ConfigError as exc:
        pytest.fail(f"{path.name}: hardware.gpu {s['hardware']['gpu']!r}: {exc}")
    assert isinstance(s["points"], list) and s["points"], f"{path.name}: no points"
    ids = [p.get("id") for p in s["points"]]
    assert len(set(ids)) == len(ids), f"{path.name}: duplicate point ids {ids}"
    for p in s["points"]:
        _missing(POINT, p, f"{path.name}: point {p.get('id')}")
        assert set(p) <= POINT | POINT_OPTIONAL, f"{path.name}: point {p['id']}: unknown keys {set(p) - POINT - POINT_OPTIONAL}"
        figures = [v for v in (p["measured"] or {}).values() if v is not None]
        assert figures, f"{path.name}: point {p['id']} has no measured figure"
        assert all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in figures), \
            f"{path.name}: {p['id']}: {p['measured']}"
        assert set(p.get("workload") or {}) <= WORKLOAD, f"{path.name}: point {p['id']}: unknown workload keys"


def _profiles_used() -> set[str]:
    """The profile directories the sets name, the set-level ``model`` and any point-level override."""
    used = set()
    for path in SET_FILES:
        s = _load(path)
        used.add(s["model"]["profile"])
        used.update(p["model"]["profile"] for p in s["points"] if "profile" in (p.get("model") or {}))
    return used


def test_every_profile_loads() -> None:
    for name in sorted(_profiles_used()):
        profile = load_model_profile(ROOT / "models" / name)
        assert not profile.is_unknown, f"models/{name}: {profile.unknown_reason}"
        assert profile.num_layers > 0 and profile.weight_bytes > 0, name


def test_every_profile_directory_is_used() -> None:
    used = _profiles_used()
    on_disk = {p.name for p in (ROOT / "models").iterdir() if p.is_dir()}
    assert on_disk <= used, f"profiles no set uses: {sorted(on_disk - used)}"


def test_the_holdout_names_whole_sets_and_at_least_a_quarter_of_the_points() -> None:
    held = [h["id"] for h in yaml.safe_load((ROOT / "holdout.yaml").read_text())["holdout"]]
    stems = {p.stem for p in SET_FILES}
    assert len(set(held)) == len(held) and set(held) <= stems, sorted(set(held) - stems)
    points = {p.stem: len(_load(p)["points"]) for p in SET_FILES}
    assert sum(points[h] for h in held) >= sum(points.values()) / 4
