"""Every SGLang release autotune has a table for: the argv it renders are accepted and mean what autotune meant.

For each release (0.5.9 .. 0.5.23), a grid of candidates (every knob of
ServerConfig, TP 4 and 8, speculative decoding off / EAGLE / EAGLE3 / NGRAM)
is rendered and parsed

* by the dialect parser built from the release's table (always), and
* by the release's REAL parser in a parser-only environment
  (:mod:`autotune.sglang.flags.parser_env`, cached under ~/.cache/autotune/parsers):
  ``AUTOTUNE_REAL_PARSERS=all`` or ``=0.5.9,0.5.23`` builds what is missing;
  in CI (CI=true) the releases of :data:`CI_RELEASES` are built and a failure
  to build FAILS; otherwise releases whose environment is already cached are
  checked and the others skip, saying how to build them.

Zero rejections, and the parsed values, folded back into knobs
(:func:`config_from_namespace`), must equal the candidate.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ConfigError
from autotune.sglang.flags import parser_env
from autotune.sglang.flags.argv import (
    build_parser,
    config_from_namespace,
    render_argv,
    shell_line,
)
from autotune.sglang.flags.release_tables import known_versions, table_for
from autotune.sglang.knobs.config import ServerConfig, SpeculativeConfig

SCRIPT = Path(__file__).resolve().parents[1] / "autotune" / "sglang" / "flags" / "_real_parser_script.py"
CI_RELEASES = ("0.5.9", "0.5.14", "0.5.22", "0.5.23")
DRAFT = "/models/draft"


def _knob_variants(base: ServerConfig) -> list[ServerConfig]:
    tp = base.tp_size
    return [
        base,
        replace(base, mem_fraction_static=0.85),
        replace(base, cuda_graph_max_bs=1),
        replace(base, cuda_graph_max_bs=128),
        replace(base, cuda_graph_max_bs=512),
        replace(base, disable_cuda_graph=True),
        replace(base, custom_allreduce=False),
        replace(base, flashinfer_allreduce_fusion=True),
        replace(base, enable_torch_symm_mem=True),
        replace(base, enable_symm_mem=True),
        replace(base, chunked_prefill_size=4096),
        replace(base, chunked_prefill_size=-1),
        replace(base, max_running_requests=256),
        replace(base, max_total_tokens=200000),
        replace(base, kv_cache_dtype="fp8_e4m3"),
        replace(base, kv_cache_dtype="fp8_e5m2"),
        replace(base, attention_backend="flashinfer"),
        replace(base, attention_backend="triton"),
        replace(base, context_length=32768),
        replace(base, load_format="dummy"),
        replace(base, trust_remote_code=True),
        replace(base, dp_size=2),
        replace(base, ep_size=tp),
        replace(base, attn_dp_size=tp),
        replace(base, attn_dp_size=2, ep_size=tp, kv_cache_dtype="fp8_e4m3"),
        replace(base, mem_fraction_static=0.9, cuda_graph_max_bs=256, custom_allreduce=False,
                chunked_prefill_size=8192, max_running_requests=512, max_total_tokens=300000,
                kv_cache_dtype="fp8_e4m3", attention_backend="triton", context_length=8192, trust_remote_code=True),
    ]


SPECS = (
    SpeculativeConfig(),
    SpeculativeConfig(algorithm="EAGLE", draft_model_path=DRAFT, num_steps=3, eagle_topk=1, num_draft_tokens=4),
    SpeculativeConfig(algorithm="EAGLE3", draft_model_path=DRAFT, num_steps=2, eagle_topk=2, num_draft_tokens=6),
    SpeculativeConfig(algorithm="NGRAM", num_draft_tokens=8),
)


def grid() -> list[ServerConfig]:
    out = []
    for tp in (4, 8):
        for spec in SPECS:
            out += _knob_variants(ServerConfig(model_path="/models/m", tp_size=tp, speculative=spec))
    return out


def _argvs(version: str) -> tuple[list[ServerConfig], list[list[str]]]:
    configs = grid()
    argvs = [render_argv(c, version, python="python", check=False)[3:] for c in configs]
    return configs, argvs


def _meant(cfg: ServerConfig) -> ServerConfig:
    return replace(cfg, extra_args=())


def _fold(version: str, changed: dict[str, Any]) -> ServerConfig:
    """A namespace of the release's defaults with what the parser reported as set, folded into knobs."""
    parser = build_parser(version)
    ns = parser.parse_args(["--model-path", "x"])
    rename = {"tensor_parallel_size": "tp_size", "data_parallel_size": "dp_size",
              "expert_parallel_size": "ep_size", "pipeline_parallel_size": "pp_size"}
    for key, value in changed.items():
        setattr(ns, rename.get(key, key), value)
    return config_from_namespace(ns, version)


@pytest.mark.parametrize("version", known_versions())
def test_every_candidate_parses_as_meant_by_the_releases_table(version: str) -> None:
    configs, argvs = _argvs(version)
    assert len(argvs) >= 200
    parser = build_parser(version)
    for cfg, argv in zip(configs, argvs, strict=False):
        ns = parser.parse_args(argv)  # exits 2 (fails the test) on a refusal
        assert config_from_namespace(ns, version) == _meant(cfg), shell_line(argv)


def _wanted_real() -> tuple[set[str] | None, bool]:
    """(releases to build when missing, or None for "only what is cached"; must they build)."""
    asked = os.environ.get("AUTOTUNE_REAL_PARSERS", "").strip()
    if asked == "all":
        return set(known_versions()), os.environ.get("CI") == "true"
    if asked:
        return {str(v).strip() for v in asked.split(",") if v.strip()}, os.environ.get("CI") == "true"
    if os.environ.get("CI") == "true":
        return set(CI_RELEASES), True
    return None, False


def _real_python(version: str) -> Path:
    build, must = _wanted_real()
    cached = parser_env.cache_dir() / version / "python"
    if build is not None and version in build:
        try:
            return parser_env.ensure(version).python
        except parser_env.ParserEnvError as exc:
            if must:
                pytest.fail(f"SGLang {version}'s parser-only environment could not be built: {exc}")
            pytest.skip(f"SGLang {version}'s parser-only environment could not be built: {exc}")
    if cached.exists():
        return cached
    pytest.skip(f"no parser-only environment for SGLang {version} (AUTOTUNE_REAL_PARSERS={version} builds it, "
                f"about a minute the first time)")


def _real_versions() -> list[str]:
    """The releases whose real parser is checked: CI's, the asked-for ones, and whatever is cached."""
    build, _must = _wanted_real()
    cached = {v for v in known_versions() if (parser_env.cache_dir() / v / "python").exists()}
    wanted = set(CI_RELEASES) | (build or set()) | cached
    return [v for v in known_versions() if v in wanted]


@pytest.mark.real_sglang
@pytest.mark.parametrize("version", _real_versions())
def test_every_candidate_parses_as_meant_by_the_real_parser(version: str) -> None:
    python = _real_python(version)
    configs, argvs = _argvs(version)
    stdin = "".join(json.dumps(a) + "\n" for a in argvs)
    proc = subprocess.run([str(python), str(SCRIPT)], input=stdin, capture_output=True, text=True, timeout=280,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    answers = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(answers) == len(argvs)
    refused = [f"{shell_line(a)}\n  -> {r['error']}" for a, r in zip(argvs, answers, strict=False) if not r["ok"]]
    assert not refused, f"SGLang {version} refuses {len(refused)} of {len(argvs)}:\n" + "\n".join(refused[:5])
    differ = [f"{shell_line(a)}\n  -> {_fold(version, r['set'])}" for c, a, r in zip(configs, argvs, answers, strict=False)
              if _fold(version, r["set"]) != _meant(c)]
    assert not differ, f"SGLang {version} reads {len(differ)} argv otherwise:\n" + "\n".join(differ[:3])


def test_release_lookup_unknown_newer_older() -> None:
    newest = known_versions()[-1]
    assert table_for(newest).exact and table_for("0.5.9").version == "0.5.9"
    later = table_for("0.5.99")
    assert later.version == newest and not later.exact and "newer than every release" in later.note
    between = table_for("0.5.12.post7")
    assert between.version == "0.5.12.post1" and not between.exact
    with pytest.raises(ConfigError, match=r"0\.5\.8 is older than 0\.5\.9"):
        table_for("0.5.8")


def test_tables_cover_every_release_from_0_5_9_to_0_5_23() -> None:
    expected = {"0.5.9", "0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1",
                "0.5.14", "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21",
                "0.5.22", "0.5.23"}
    assert expected <= set(known_versions())


@pytest.mark.parametrize(("name", "present", "deprecated"), [
    ("--cuda-graph-max-bs", ("0.5.9", "0.5.19"), ("0.5.14", "0.5.19")),
    ("--cuda-graph-max-bs-decode", ("0.5.14", "0.5.23"), None),
    ("--disable-piecewise-cuda-graph", ("0.5.10", "0.5.19"), ("0.5.14", "0.5.19")),
    ("--attn-dp-size", ("0.5.22", "0.5.23"), None),
    ("--enable-dp-attention", ("0.5.9", "0.5.23"), ("0.5.22", "0.5.23")),
])
def test_boundaries_read_from_the_wheels(name: str, present: tuple[str, str], deprecated: tuple[str, str] | None) -> None:
    from autotune.sglang.versions import as_version

    for v in known_versions():
        table = table_for(v)
        inside = as_version(present[0]) <= as_version(v) <= as_version(present[1])
        assert table.has(name) == inside, (name, v)
        if inside:
            dep = deprecated is not None and as_version(deprecated[0]) <= as_version(v) <= as_version(deprecated[1])
            assert table.deprecated(name) == dep, (name, v)


def test_attn_dp_is_spelled_per_release() -> None:
    cfg = ServerConfig(model_path="m", tp_size=8, attn_dp_size=8)
    assert "--attn-dp-size" in render_argv(cfg, "0.5.22")
    old = render_argv(cfg, "0.5.21")
    assert "--enable-dp-attention" in old and old[old.index("--dp-size") + 1] == "8"
    with pytest.raises(ConfigError, match="attn_dp_size"):
        render_argv(replace(cfg, attn_dp_size=3), "0.5.23")


def test_extract_flags_reads_the_version_of_a_wheel_or_a_version() -> None:
    from autotune.sglang.flags import extract

    assert extract._version_of("/x/sglang-0.5.24-cp311-cp311-manylinux_2_34_x86_64.whl")[0] == "0.5.24"
    assert extract._version_of("0.5.24")[1] is None


def test_a_release_newer_than_every_table_is_warned_of_once(monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """Every argv a study renders asks for the table: one warning a process, none in a trial worker."""
    from autotune.sglang.flags import release_tables

    monkeypatch.setattr(release_tables, "_told", set())
    with caplog.at_level("WARNING", logger=release_tables.__name__):
        tables = [table_for("0.5.98") for _ in range(5)] + [table_for("0.5.98.post1")]
        newer = [r for r in caplog.records if "newer than every release" in r.getMessage()]
        assert all("newer than every release" in t.note for t in tables)
        assert [r.getMessage().split(" is ")[0] for r in newer] == ["SGLang 0.5.98", "SGLang 0.5.98.post1"]
        caplog.clear()
        release_tables.told_by_driver("0.5.97")  # what a Ray trial worker does first
        assert table_for("0.5.97").note and not caplog.records
