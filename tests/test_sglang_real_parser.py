"""autotune's SGLang flag dialects against SGLang's REAL argument parser (optional: marker ``sglang``).

Every argv the demo study can launch (the baseline and every candidate of its
grid, at the study's SGLang version and again at 0.5.9), plus a few knobs the
demo does not search, is fed to the parser of a real SGLang install
(``ServerArgs.add_cli_args`` on a plain ``argparse.ArgumentParser``, then
``parse_args``; see autotune/sglang/_real_parser_script.py). Every one must be accepted.
The flag table autotune models is compared with the real one (names, bool or
value, type, choices, nargs), and autotune's own dialect parser must refuse
exactly what the real one refuses in a handful of known cases.

Which SGLang: ``AUTOTUNE_SGLANG_PYTHON`` (a venv's python), else this
interpreter when ``sglang.srt.server_args`` imports, else the CPU venvs of
``autotune sglang-env install --version V --device cpu`` (a second dialect's
version from ``AUTOTUNE_SGLANG_PYTHON_0_5_9``-style or its cached venv); skipped
otherwise, without installing anything, except under ``CI=true`` where the
versions of ``AUTOTUNE_REAL_SGLANG_VERSIONS`` (default 0.5.23) must be there. A venv that imports the parser on a CPU-only machine
(docs/sglang-releases.md; about 3 minutes each)::

    python3.11 -m venv /tmp/v-sglang-0523
    /tmp/v-sglang-0523/bin/pip install --no-deps sglang==0.5.23
    /tmp/v-sglang-0523/bin/pip install torch==2.13.0 numpy orjson psutil pybase64 requests triton \\
        packaging pillow starlette msgspec pydantic pyzmq tqdm ipython aiohttp uvicorn fastapi pyyaml
    # 0.5.9 (same two steps with sglang==0.5.9 in /tmp/v-sglang-059) also needs these; torchvision
    # replaces the CPU torch with torch 2.14.1 and its CUDA libraries (about 6 GB in all):
    /tmp/v-sglang-059/bin/pip install safetensors openai partial_json_parser huggingface_hub \\
        transformers torchvision dill sentencepiece
    # other versions: pip install whatever `python -c "import sglang.srt.server_args"` names, until it imports
    AUTOTUNE_SGLANG_PYTHON=/tmp/v-sglang-0523/bin/python pytest -m sglang tests/test_sglang_real_parser.py

A study version other than the installed SGLang's is skipped with the reason.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ConfigError
from autotune.sglang.config import ServerConfig, SpeculativeConfig
from autotune.sglang.flags import build_parser, flags_for, render_argv, shell_line
from autotune.sglang.versions import as_version
from autotune.space import iter_grid, to_config
from autotune.spec import StudySpec, load_study_spec

pytestmark = [pytest.mark.sglang, pytest.mark.real_sglang]

REPO = Path(__file__).resolve().parent.parent
HELPER = Path(__file__).resolve().parents[1] / "autotune" / "sglang" / "_real_parser_script.py"
DEMO = REPO / "studies" / "demo.yaml"
MODULE = "sglang.launch_server"
STUDY_VERSIONS = ("demo", "0.5.9")  # "demo": the version the demo study names (0.5.23)
HELPER_TIMEOUT_S = 240  # importing torch + sglang on a loaded 2-core machine (under pytest-timeout 300)


@dataclass(frozen=True)
class RealSglang:
    """An interpreter where SGLang's parser imports, and what it declares."""

    python: str
    version: str
    flags: list[dict[str, Any]]

    def parse(self, argvs: list[list[str]]) -> list[dict[str, Any]]:
        """Each argv's ``{"ok", "error"}`` from the real parser (one subprocess for all)."""
        stdin = "".join(json.dumps(a) + "\n" for a in argvs)
        proc = subprocess.run(
            [self.python, str(HELPER)], input=stdin, capture_output=True, text=True, timeout=HELPER_TIMEOUT_S,
        )
        assert proc.returncode == 0, f"{HELPER.name} failed (rc {proc.returncode}): {proc.stderr[-2000:]}"
        answers = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        assert len(answers) == len(argvs), f"{len(argvs)} argv sent, {len(answers)} answers: {proc.stderr[-2000:]}"
        return answers


def _info(python: str) -> tuple[RealSglang | None, str]:
    try:
        proc = subprocess.run([python, str(HELPER), "--info"], capture_output=True, text=True, timeout=HELPER_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{python}: {exc}"
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or [f"rc {proc.returncode}"]
        return None, f"{python}: sglang.srt.server_args does not import ({tail[0]})"
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    return RealSglang(python=python, version=info["version"], flags=info["flags"]), ""


@functools.lru_cache(maxsize=1)
def _find_real_sglang() -> tuple[RealSglang | None, str]:
    """The SGLang to check against, or why there is none (cached: one --info per session)."""
    explicit = os.environ.get("AUTOTUNE_SGLANG_PYTHON")
    if explicit:
        real, why = _info(explicit)
        if real is None:  # asked for by name: a broken venv is an error, not a skip
            pytest.fail(f"AUTOTUNE_SGLANG_PYTHON={explicit} is unusable: {why}")
        return real, ""
    if importlib.util.find_spec("sglang") is None:  # quick: no import, no install attempt
        for version in ("0.5.23", "0.5.9"):  # else a venv of `autotune sglang-env install --device cpu`
            cached = _cached_python(version)
            if cached is not None:
                return _info(cached)
        return None, "SGLang is not importable here (set AUTOTUNE_SGLANG_PYTHON to a venv's python that has it)"
    return _info(sys.executable)


def _cached_python(version: str) -> str | None:
    from autotune.sglang_env.install import default_prefix

    python = default_prefix(version, "cpu") / "bin" / "python"
    return str(python) if python.exists() else None


@functools.cache
def _for_version(version: str) -> tuple[RealSglang | None, str]:
    """A second SGLang for another dialect: ``AUTOTUNE_SGLANG_PYTHON_0_5_9``-style, or the cached CPU venv."""
    python = os.environ.get(f"AUTOTUNE_SGLANG_PYTHON_{version.replace('.', '_')}") or _cached_python(version)
    if python is None:
        return None, f"no SGLang {version} venv (autotune sglang-env install --version {version} --device cpu)"
    return _info(python)


def _ci_required() -> set[str]:
    """Versions CI promises to check (it builds their venvs); missing ones fail there instead of skipping."""
    if os.environ.get("CI", "").lower() not in ("true", "1"):
        return set()
    return set(filter(None, os.environ.get("AUTOTUNE_REAL_SGLANG_VERSIONS", "0.5.23").split(",")))


@pytest.fixture(scope="module")
def real() -> RealSglang:
    found, why = _find_real_sglang()
    if found is None:
        if _ci_required():
            pytest.fail(f"CI=true but no real SGLang: {why}")
        pytest.skip(why)
    return found


def _demo_spec(version: str) -> StudySpec:
    spec = load_study_spec(DEMO)
    if version == "demo":
        return spec
    return spec.model_copy(update={"server": spec.server.model_copy(update={"sglang_version": version})})


def _require_version(real: RealSglang, version: str) -> RealSglang:
    """The SGLang that speaks ``version``: ``real``, or another venv of that version when there is one."""
    if as_version(real.version) == as_version(version):
        return real
    other, why = _for_version(version)
    if other is not None and as_version(other.version) == as_version(version):
        return other
    if version in _ci_required():
        pytest.fail(f"CI=true but no SGLang {version} to check: {why}")
    if as_version(real.version) != as_version(version):
        pytest.skip(f"the SGLang at {real.python} is {real.version}, not {version}: point AUTOTUNE_SGLANG_PYTHON "
                    f"at a venv with sglang=={version} to check that dialect")


def _extra_configs(base: ServerConfig, draft: str | None) -> list[ServerConfig]:
    """Knobs of ServerConfig the demo grid does not search, one at a time and all at once."""
    one_each = [
        replace(base, disable_cuda_graph=True),
        replace(base, enable_torch_symm_mem=True),
        replace(base, enable_symm_mem=True),
        replace(base, flashinfer_allreduce_fusion=True),
        replace(base, kv_cache_dtype="fp8_e4m3"),
        replace(base, kv_cache_dtype="fp8_e5m2"),
        replace(base, chunked_prefill_size=4096),
        replace(base, chunked_prefill_size=-1),
        replace(base, max_running_requests=256),
        replace(base, max_total_tokens=200000),
        replace(base, attention_backend="flashinfer"),
        replace(base, attention_backend="triton"),
        replace(base, context_length=8192),
        replace(base, load_format="dummy"),
        replace(base, trust_remote_code=True),
        replace(base, dp_size=2, tp_size=4),
        replace(base, ep_size=8),
        replace(base, speculative=SpeculativeConfig(algorithm="NGRAM", num_draft_tokens=8)),
        replace(base, speculative=SpeculativeConfig(
            algorithm="EAGLE", draft_model_path=draft, num_steps=3, eagle_topk=4, num_draft_tokens=8)),
        replace(base, speculative=SpeculativeConfig(algorithm="EAGLE3", draft_model_path=draft)),
    ]
    everything = replace(
        base, mem_fraction_static=0.85, cuda_graph_max_bs=256, custom_allreduce=False, flashinfer_allreduce_fusion=True,
        enable_torch_symm_mem=True, enable_symm_mem=True, chunked_prefill_size=8192, max_running_requests=512,
        max_total_tokens=300000, kv_cache_dtype="fp8_e4m3", attention_backend="flashinfer", context_length=32768,
        load_format="dummy", trust_remote_code=True,
        speculative=SpeculativeConfig(algorithm="EAGLE3", draft_model_path=draft, num_steps=2, eagle_topk=2,
                                      num_draft_tokens=6),
    )
    return [*one_each, everything]


def _dest_map(real: RealSglang, version: str) -> dict[str, str]:
    """SGLang's dest -> ours, for flags that share a spelling (0.5.9 declares --tensor-parallel-size
    first, so its dest is tensor_parallel_size where autotune's is tp_size; argv is unaffected)."""
    ours_by_name = {n: f.dest for f in flags_for(version) for n in f.names}
    return {f["dest"]: ours_by_name[n] for f in real.flags for n in f["names"] if n in ours_by_name}


def _study_argvs(spec: StudySpec, version: str) -> list[list[str]]:
    """The baseline, every grid candidate and the extra knobs, as argv after ``python -m module``."""
    draft = spec.resolve_path(spec.search_space.speculative.draft_model_path) if spec.search_space.speculative else None
    base = to_config(spec, {}, baseline=True)
    configs = [base, *(to_config(spec, params) for params in iter_grid(spec)), *_extra_configs(base, draft)]
    argvs: dict[tuple[str, ...], None] = {}  # searched env vars repeat an argv: each distinct one once
    for cfg in configs:
        argv = render_argv(cfg, version, python="python", module=MODULE, check=False)
        assert argv[:3] == ["python", "-m", MODULE]
        argvs[tuple(argv[3:])] = None
    return [list(a) for a in argvs]


@pytest.mark.parametrize("study_version", STUDY_VERSIONS)
def test_every_demo_candidate_is_accepted_by_the_real_parser(real: RealSglang, study_version: str) -> None:
    spec = _demo_spec(study_version)
    version = spec.server.sglang_version
    real = _require_version(real, version)
    argvs = _study_argvs(spec, version)
    assert len(argvs) > 100  # the demo grid, not just the baseline
    answers = real.parse(argvs)
    refused = [f"{shell_line(a)}\n    -> {r['error']}" for a, r in zip(argvs, answers, strict=False) if not r["ok"]]
    assert not refused, f"SGLang {real.version} refuses {len(refused)} of {len(argvs)} argv:\n" + "\n".join(refused[:10])
    # and each argv means to SGLang what it means to autotune's dialect (same flags, same values)
    ours = build_parser(version)
    to_our_dest = _dest_map(real, version)
    differ = []
    for argv, answer in zip(argvs, answers, strict=False):
        ns = ours.parse_args(argv)
        our_set = {k: v for k, v in vars(ns).items() if v != ours.get_default(k)}
        their_set = {to_our_dest.get(k, k): v for k, v in answer["set"].items()}
        if json.loads(json.dumps(our_set)) != their_set:
            differ.append(f"{shell_line(argv)}\n    ours {our_set}\n    SGLang's {their_set}")
    assert not differ, f"{len(differ)} argv parse differently:\n" + "\n".join(differ[:5])


# (version, argv after --model-path m, does SGLang accept it)
KNOWN_CASES: list[tuple[str, list[str], bool]] = [
    ("0.5.23", ["--cuda-graph-max-bs", "128"], False),  # ambiguous: -decode / -prefill
    ("0.5.23", ["--cuda-graph-max-bs-decode", "128"], True),
    ("0.5.23", ["--cuda-graph-bs", "1", "2", "4"], False),  # ambiguous too
    ("0.5.23", ["--attn-dp-size", "2"], True),
    ("0.5.23", ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"], True),
    ("0.5.23", ["--kv-cache-dtype", "fp4_e2m1"], False),
    ("0.5.23", ["--context-length", "32k", "--max-total-tokens", "1.5M"], True),  # human_readable_int
    ("0.5.23", ["--attention-backend", "cutlass_mla"], False),  # dropped after 0.5.9
    ("0.5.23", ["--attention-backend", "dsa"], True),
    ("0.5.23", ["--stream-output"], False),
    ("0.5.23", ["--enable-piecewise-cuda-graph"], False),
    ("0.5.23", ["--speculative-algorithm", "DFLASH"], True),
    ("0.5.23", ["--cuda-graph-max-bz", "64"], False),  # a typo: "unrecognized arguments", the words sim and plan use
    # the real release refuses a flag it lacks: with a real parser it decides (the simulator's table parser
    # takes this one for a newer build's only on top of build_parser, autotune/sglang/unknown_flags.py)
    ("0.5.23", ["--some-new-flag", "fast"], False),
    ("0.5.9", ["--cuda-graph-max-bs-decode", "128"], False),  # unrecognized
    ("0.5.9", ["--cuda-graph-max-bs", "128"], True),
    ("0.5.9", ["--attn-dp-size", "2"], False),
    ("0.5.9", ["--kv-cache-dtype", "mxfp8"], False),
    ("0.5.9", ["--speculative-algorithm", "DFLASH"], False),
    ("0.5.9", ["--context-length", "32k"], False),  # a plain int there
    ("0.5.9", ["--attention-backend", "dsa"], False),
    ("0.5.9", ["--enable-hicache"], False),
    ("0.5.9", ["--speculative-ngram-match-type", "DFS"], False),
    ("0.5.9", ["--enable-flashinfer-allreduce-fusion"], True),
    ("0.5.9", ["--tp", "8", "--mem-frac", "0.8"], True),  # unique prefixes, as argparse allows
    ("0.5.9", ["--mem-fraction-static", "high"], False),  # not a float
]


def _our_error(version: str, argv: list[str]) -> str | None:
    """What autotune's dialect parser says about ``argv``: None when it accepts it."""

    class Raising(argparse.ArgumentParser):
        def error(self, message: str) -> Any:
            raise ConfigError(message)

    try:
        build_parser(version, parser_class=Raising).parse_args(argv)
    except ConfigError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("version", sorted({v for v, _, _ in KNOWN_CASES}))
def test_our_dialect_refuses_exactly_what_sglang_refuses(real: RealSglang, version: str) -> None:
    real = _require_version(real, version)
    cases = [(["--model-path", "m", *argv], ok) for v, argv, ok in KNOWN_CASES if v == version]
    cases.append((["--tp-size", "2"], False))  # --model-path is required
    answers = real.parse([argv for argv, _ in cases])
    for (argv, expected), answer in zip(cases, answers, strict=False):
        assert answer["ok"] == expected, f"SGLang {real.version} on {shell_line(argv)}: {answer}"
        # the same verdict, and the same words (the simulated server prints them as SGLang would)
        assert _our_error(version, argv) == answer["error"], f"autotune's {version} dialect disagrees on {argv}"


def _type_name(t: Any) -> str | None:
    return getattr(t, "__name__", None)


def test_our_flag_table_matches_the_real_parser(real: RealSglang) -> None:
    """Every flag autotune models for the installed version exists there, with the same shape."""
    by_name = {name: f for f in real.flags for name in f["names"]}
    problems = []
    for flag in flags_for(real.version):
        theirs = [by_name.get(n) for n in flag.names]
        if any(t is None for t in theirs):
            missing = [n for n, t in zip(flag.names, theirs, strict=False) if t is None]
            problems.append(f"{flag.name}: SGLang {real.version} has no {', '.join(missing)}")
            continue
        t = theirs[0]
        assert t is not None
        if t["kind"] != flag.kind:
            problems.append(f"{flag.name}: ours is {flag.kind}, SGLang's is {t['kind']}")
            continue
        if flag.kind == "bool":
            continue
        if flag.type in (int, float) and t["type"] != _type_name(flag.type):
            problems.append(f"{flag.name}: type {_type_name(flag.type)}, SGLang's {t['type']}")
        ours_choices = set(flag.choices) if flag.choices is not None else None
        their_choices = set(t["choices"]) if t["choices"] is not None else None
        if ours_choices is not None and ours_choices != their_choices:
            problems.append(f"{flag.name}: choices differ: only ours {sorted(ours_choices - (their_choices or set()))},"
                            f" only SGLang's {sorted((their_choices or set()) - ours_choices)}")
        if (flag.nargs or None) != (t["nargs"] or None):
            problems.append(f"{flag.name}: nargs {flag.nargs!r}, SGLang's {t['nargs']!r}")
    assert not problems, f"autotune's flag table vs SGLang {real.version}:\n" + "\n".join(problems)
