"""The public startup-log data set (tests/data/public_logs) stays consistent with itself and with the parser.

Each manifest entry names a real SGLang startup log posted publicly (its ``source``), a verbatim excerpt
of it (``server.log``) and, where a public copy was found, the model's config files. The figures in
``logged`` were read from the lines by hand; the project's parser must read the same ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from autotune.sglang.logparse import parse_log, summarize

ROOT = Path(__file__).parent / "data" / "public_logs"
MANIFEST: list[dict[str, Any]] = json.loads((ROOT / "manifest.json").read_text())
KEYS = {"id", "source", "sglang_version", "release", "build", "gpu", "gpu_inferred", "gpu_memory_gib", "num_gpus", "tp", "dp", "ep",
        "enable_dp_attention", "model", "family", "architecture", "quantization", "kv_cache_dtype",
        "mem_fraction_static", "page_size", "context_length", "server_args", "config", "config_source",
        "hf_quant_config", "config_model", "logged", "failure_kind", "notes", "log", "log_date"}
LOGGED = {"weight_gib_per_gpu", "avail_before_load_gib", "avail_after_load_gib", "kv_tokens", "kv_size_gib",
          "graph_mem_gib"}
FAMILIES = {"gqa", "mla", "dsa", "dsv4", "swa", "mamba_hybrid", "multimodal"}
IDS = [e["id"] for e in MANIFEST]


def _url(text: str | None) -> bool:
    u = urlparse(text or "")
    return u.scheme == "https" and bool(u.netloc) and bool(u.path.strip("/"))


def test_manifest_entries_are_complete_and_unique() -> None:
    assert len(MANIFEST) >= 12
    assert len(set(IDS)) == len(IDS)
    for e in MANIFEST:
        assert set(e) == KEYS, e["id"]
        assert set(e["logged"]) == LOGGED, e["id"]
        assert e["family"] in FAMILIES, e["id"]
        assert e["num_gpus"] >= e["tp"] >= 1 and e["dp"] >= 1 and e["ep"] >= 1, e["id"]
        assert any(v is not None for v in e["logged"].values()), f"{e['id']}: logs nothing the data set uses"


def test_every_log_directory_is_in_the_manifest() -> None:
    assert {p.name for p in ROOT.iterdir() if p.is_dir()} == set(IDS)


@pytest.mark.parametrize("entry", MANIFEST, ids=IDS)
def test_sources_are_urls_and_files_exist(entry: dict[str, Any]) -> None:
    assert _url(entry["source"]), entry["source"]
    assert (ROOT / entry["log"]).is_file()
    assert (ROOT / entry["log"]).read_text().strip()
    for key in ("config", "hf_quant_config"):
        if entry[key] is not None:
            assert isinstance(json.loads((ROOT / entry[key]).read_text()), dict)
    if entry["config"] is not None:
        assert _url(entry["config_source"]), entry["config_source"]
        assert entry["config_model"], "name whose config.json it is (the model's own, or a named sibling's)"
    else:
        assert entry["hf_quant_config"] is None and entry["config_model"] is None


@pytest.mark.parametrize("entry", MANIFEST, ids=IDS)
def test_parser_reads_the_figures_the_manifest_records(entry: dict[str, Any]) -> None:
    events = parse_log((ROOT / entry["log"]).read_text())
    s = summarize(events)
    read = {
        "weight_gib_per_gpu": s["weights_gib"],
        "avail_before_load_gib": s["p_gib"],
        "avail_after_load_gib": s["a_gib"],
        "kv_tokens": s["kv_tokens"],
        "kv_size_gib": None if s["kv_gib"] is None else round(s["kv_gib"], 2),
        "graph_mem_gib": s["graph_gib"],
    }
    assert read == entry["logged"]
    assert s["failure_kind"] == entry["failure_kind"]
    archs = {e.values.get("architecture") for e in events if e.kind == "weights_loaded"} - {None}
    if entry["architecture"] is not None:
        assert archs == {entry["architecture"]}
