"""The simulated server against published real SGLang measurements (issue 32's speed yardstick).

Every set in ``tests/data/published_speed/*.yaml`` (schema: that directory's README) is one
source's points under one setup; each point overrides the set's flags and workload. Per point,
this script builds the :class:`~autotune.trial.contract.TrialRequest` a user would (backend
``sim``, the set's model profile from ``tests/data/published_speed/models/<profile>``, its GPU,
layout and flags through the project's own SGLang parser, its workload), evaluates it offline
(:func:`autotune.trial.offline.evaluate`: the simulated server's parser, memory plan and engine
stepped in modelled time) and prints:

* per point: **modelled** (the simulator) / **measured** (the published figure) for throughput
  (output tokens/s, else total, else requests/s: whichever the source gives), TTFT and TPOT
  (median, else mean; TPOT falls back on ITL);
* per set whose knob varies: each point's relative effect against the set's first point,
  measured against modelled (same direction? within 1.5x? within 2x, on the log scale);
* a summary for the **fitted** and the **held-out** points apart (``holdout.yaml``; before it
  exists every point is "unassigned"): medians of modelled/measured with their spread
  (quartiles, range, n), the share of points within 1.5x and 2x, and the relative effects.

Faithfulness and its limits (printed with each point where they apply):

* The workload is bench_serving's: random prompts with exact token lengths (``--backend sglang``
  sends token ids), the published input/output lengths and range ratio, a closed loop of
  ``max_concurrency`` slots or Poisson arrivals at ``request_rate``, one warm-up request.
* Prompt counts above ``--max-prompts-per-slot`` x the concurrency (default 6; at least 64 where lengths
  are drawn, so that their means settle) are cut to that:
  the closed loop is then in the same steady state (every slot busy, waves desynchronised)
  for most of the run, so throughput, median TTFT and median TPOT are those of the published
  run's steady state; a point whose published count is at or below the cap runs as published
  (a single wave stays a single wave). Request-rate points keep their count up to 2,000.
* A release before the oldest modelled one (0.5.9) is modelled as 0.5.9, a later unknown one
  as the nearest older modelled release; the point says so. A release before 0.4 ran without the
  overlap scheduler (``enable_overlap_schedule: bool = False`` in v0.3.5.post2's ``server_args.py``; on
  by default from v0.4, https://lmsys.org/blog/2024-12-04-sglang-v0-4/): modelled with
  ``--disable-overlap-schedule``, and the point says so.
* Points the simulator cannot model (several nodes, a dataset without lengths, a draft model
  without a profile) are listed as skipped with the reason, never silently dropped.

Usage::

    python benchmarks/sim_vs_published.py [--dir tests/data/published_speed] [--only SET_ID ...]
                                          [--json out.json] [--max-prompts-per-slot 6]

Runs in a few minutes on 2 cores (every figure is modelled time; nothing sleeps).
"""

from __future__ import annotations

import argparse
import atexit
import functools
import json
import math
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import yaml

from autotune.errors import ConfigError
from autotune.load.workloads import FileWorkload
from autotune.objective import Direction, Objective
from autotune.sglang.flags.argv import build_parser, config_from_namespace
from autotune.sglang.flags.release_tables import known_versions
from autotune.sglang.hardware.gpus import get_gpu
from autotune.sglang.models.profile import load_model_profile
from autotune.sglang.versions import parse_version
from autotune.spec import SimSpec, WorkloadSpec
from autotune.trial import offline
from autotune.trial.contract import TrialRequest, TrialState

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "published_speed"
MAX_PROMPTS_PER_SLOT = 6
MAX_RATE_PROMPTS = 2000
MIN_DRAWN_PROMPTS = 64
#: A measured relative effect under this ratio counts as flat (no direction to miss), unless the set shows a wider
#: run-to-run spread of its own (``run_to_run``: two runs of one configuration that measured apart).
FLAT_BAND = 1.03
SHAREGPT_MEAN_IN, SHAREGPT_MEAN_OUT = 229, 196
#: Flags releases before 0.5.9 had, and what 0.5.9 spells instead (value None: the TP size). --enable-ep-moe set
#: ep_size = tp_size; --enable-deepep-moe chose DeepEP; --enable-flashinfer-mla the FlashInfer MLA backend.
RENAMED_FLAGS: dict[str, tuple[str, Any]] = {
    "enable-ep-moe": ("ep-size", None),
    "enable-deepep-moe": ("moe-a2a-backend", "deepep"),
    "enable-flashinfer-mla": ("attention-backend", "flashinfer"),
}
#: The first release whose scheduler overlapped CPU scheduling with the GPU by default (see the docstring).
OVERLAP_DEFAULT_SINCE = "0.4.0"
#: measured key -> the offline metrics key it is compared with, in order of preference per figure.
THROUGHPUT_KEYS = (("output_throughput_tok_s", "output_throughput"), ("total_throughput_tok_s", "total_throughput"),
                   ("request_throughput_req_s", "request_throughput"))
TTFT_KEYS = (("median_ttft_ms", "median_ttft_ms"), ("mean_ttft_ms", "mean_ttft_ms"))
TPOT_KEYS = (("median_tpot_ms", "median_tpot_ms"), ("mean_tpot_ms", "mean_tpot_ms"), ("median_itl_ms", "median_itl_ms"))
E2E_KEYS = (("median_e2e_latency_ms", "median_e2e_latency_ms"), ("e2e_latency_ms", "mean_e2e_latency_ms"),
            ("mean_e2e_latency_ms", "mean_e2e_latency_ms"))
FIGURES = {"throughput": THROUGHPUT_KEYS, "ttft": TTFT_KEYS, "tpot": TPOT_KEYS, "e2e": E2E_KEYS}
#: The figures the summary judges (e2e latency only feeds the relative effects of sets that publish nothing else).
SUMMARY_FIGURES = ("throughput", "ttft", "tpot")
#: ServerConfig fields config_from_namespace fills: a published flag whose dests are all here travels
#: as a knob; any other flag travels verbatim in extra_args (the simulated server parses it itself).
KNOB_DESTS = frozenset({
    "model_path", "tp_size", "dp_size", "ep_size", "attn_dp_size", "enable_dp_attention", "mem_fraction_static",
    "cuda_graph_max_bs", "cuda_graph_max_bs_decode", "disable_cuda_graph", "disable_decode_cuda_graph",
    "cuda_graph_backend_decode", "disable_custom_all_reduce", "enable_flashinfer_allreduce_fusion",
    "flashinfer_allreduce_fusion_backend", "enforce_disable_flashinfer_allreduce_fusion", "enable_torch_symm_mem",
    "enable_symm_mem", "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "chunked_prefill_size", "max_running_requests",
    "max_total_tokens", "kv_cache_dtype", "attention_backend", "context_length", "load_format", "trust_remote_code",
    "host", "port",
})


class SetError(ValueError):
    """A published set that cannot be read: the message names the file, the field and the value."""


@dataclass
class Point:
    """One published point, resolved into a trial request (or the reason it cannot be modelled)."""

    set_id: str
    point_id: str
    knob: str
    measured: dict[str, float]
    request: TrialRequest | None = None
    skipped: str | None = None
    notes: list[str] = field(default_factory=list)
    modelled: dict[str, float] = field(default_factory=dict)
    group: str = "unassigned"
    unseen_source: bool = False  # held out, and no fitted set shares its source
    flat_band: float = FLAT_BAND  # a measured effect within this ratio counts as flat (the set's run_to_run)

    @property
    def key(self) -> str:
        return f"{self.set_id}/{self.point_id}"


# --- reading the sets --------------------------------------------------------------------------


def _need(d: dict[str, Any], key: str, where: str) -> Any:
    if not isinstance(d, dict) or d.get(key) is None:
        raise SetError(f"{where}.{key}: missing")
    return d[key]


def load_sets(directory: Path) -> list[dict[str, Any]]:
    """Every set file (``*.yaml`` but ``holdout.yaml``), safely loaded, sorted by id."""
    sets = []
    for path in sorted(directory.glob("*.yaml")):
        if path.name == "holdout.yaml":
            continue
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise SetError(f"{path.name}: not YAML ({str(exc).splitlines()[0]})") from None
        if not isinstance(data, dict):
            raise SetError(f"{path.name}: not a mapping")
        data.setdefault("id", path.stem)
        if data["id"] != path.stem:
            raise SetError(f"{path.name}: id {data['id']!r} is not the file's name")
        for key in ("model", "hardware", "workload", "points"):
            _need(data, key, path.stem)
        if not isinstance(data["points"], list) or not data["points"]:
            raise SetError(f"{path.stem}.points: no points")
        _run_to_run(data, path.stem)
        sets.append(data)
    return sets


def _run_to_run(data: dict[str, Any], where: str) -> float:
    """The set's measured run-to-run spread (``run_to_run: {ratio, evidence}``) as a ratio, or ``FLAT_BAND``.

    Only where the source itself shows it: two runs of one configuration (by SGLang's code at the set's release)
    that measured apart. An effect within it has no direction to judge: it counts as flat."""
    rr = data.get("run_to_run")
    if rr is None:
        return FLAT_BAND
    ratio = rr.get("ratio") if isinstance(rr, dict) else None
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not FLAT_BAND <= ratio <= 2.0:
        raise SetError(f"{where}.run_to_run.ratio: a number from {FLAT_BAND} to 2.0 (got {ratio!r})")
    if not isinstance(rr.get("evidence"), str) or not rr["evidence"].strip():
        raise SetError(f"{where}.run_to_run.evidence: missing (which runs of one configuration measured apart)")
    return float(ratio)


def load_holdout(directory: Path) -> tuple[set[str], set[str]] | None:
    """The held-out set ids and point keys (``set/point``), or None before holdout.yaml exists.

    Accepted shapes: a list of set ids; or a mapping with ``holdout`` (or ``sets``: ids) and/or ``points``
    (``set_id/point_id``); list items may be mappings with an ``id``."""
    path = directory / "holdout.yaml"
    if not path.exists():
        return None
    data = yaml.safe_load(path.read_text())
    sets: set[str] = set()
    points: set[str] = set()

    def ids(items: Any) -> list[str]:
        return [str(i["id"] if isinstance(i, dict) else i) for i in (items or [])]

    if isinstance(data, list):
        sets.update(ids(data))
    elif isinstance(data, dict):
        sets.update(ids(data.get("holdout") or data.get("sets") or data.get("held_out") or []))
        points.update(ids(data.get("points")))
    else:
        raise SetError(f"holdout.yaml: expected a list or a mapping, got {type(data).__name__}")
    return sets, points


def published_version(release: Any) -> Any | None:
    """The SGLang version a published release names (free text such as "0.3.5.post2 (a fork's dev branch of
    it)"), or None when it names none."""
    m = re.search(r"\d+\.\d+\.\d+(\.post\d+)?", str(release or ""))
    if not m:
        return None
    try:
        return parse_version(m.group(0))
    except ConfigError:
        return None


def modelled_version(release: Any) -> tuple[str, str | None]:
    """The modelled SGLang release for a published one, and a note when it differs."""
    known = sorted(parse_version(v) for v in known_versions())
    v = published_version(release)
    if v is None:
        return str(known[0]), f"release {release!r} unknown: modelled as {known[0]}"
    older = [k for k in known if not v < k]
    chosen = older[-1] if older else known[0]
    note = None if str(chosen) == str(v) else f"release {release} modelled as {chosen}"
    return str(chosen), note


def released_before(release: Any, version: str) -> bool:
    """Whether a published release predates ``version``; False when it names none."""
    v = published_version(release)
    return v is not None and v < parse_version(version)


def _flag_argv(flags: dict[str, Any]) -> list[str]:
    """Published flags (``--x-y``, ``x-y`` or ``x_y``) as argv; True is the bare flag, False omits it."""
    argv: list[str] = []
    for name, value in flags.items():
        flag = "--" + str(name).lstrip("-").replace("_", "-")
        if value is False or value is None:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv


class _Refusing(argparse.ArgumentParser):
    """The release's parser, raising instead of printing and exiting."""

    def error(self, message: str) -> Any:
        raise ConfigError(f"SGLang's parser refuses it: {message}")


@functools.lru_cache(maxsize=8)
def _parser(version: str) -> argparse.ArgumentParser:
    return build_parser(version, parser_class=_Refusing)


def _split_flags(argv: list[str], version: str) -> tuple[Any, list[str]]:
    """Parse the whole launch with the release's parser; return the namespace and the flags (argv) that
    no ServerConfig knob carries (they travel in extra_args)."""
    parser = _parser(version)
    ns = parser.parse_args(argv)
    base = vars(parser.parse_args(["--model-path", "x"]))
    extra: list[str] = []
    i = 0
    while i < len(argv):
        j = i + 1
        while j < len(argv) and not argv[j].startswith("--"):
            j += 1
        one = parser.parse_args(["--model-path", "x", *argv[i:j]])
        changed = {k for k, v in vars(one).items() if v != base.get(k)} - {"model_path"}
        if changed - KNOB_DESTS:
            extra += argv[i:j]
        i = j
    return ns, extra


def _layout_argv(layout: dict[str, Any]) -> list[str]:
    tp, dp, ep = int(layout.get("tp") or 1), int(layout.get("dp") or 1), int(layout.get("ep") or 1)
    argv = ["--tp-size", str(tp)]
    if layout.get("dp_attention"):
        argv += ["--enable-dp-attention", "--dp-size", str(dp)]
    elif dp > 1:
        argv += ["--dp-size", str(dp)]
    if ep > 1:
        argv += ["--ep-size", str(ep)]
    if int(layout.get("pp") or 1) > 1:
        argv += ["--pp-size", str(layout["pp"])]
    return argv


def _workload(wl: dict[str, Any], cap_per_slot: int, notes: list[str]) -> WorkloadSpec | str:
    """bench_serving's workload as the load generator's spec, or why it cannot be modelled."""
    dataset = str(wl.get("dataset") or "random")
    if dataset == "sharegpt":
        mean_in = int(wl.get("input_len") or SHAREGPT_MEAN_IN)
        mean_out = int(wl.get("output_len") or SHAREGPT_MEAN_OUT)
        notes.append(f"sharegpt modelled as log-normal lengths of mean {mean_in}/{mean_out} tokens"
                     + ("" if wl.get("input_len") and wl.get("output_len") else
                        " (bench_serving's published ShareGPT means)"))
        wl = {**wl, "input_len": mean_in, "output_len": mean_out, "range_ratio": 1.0, "sharegpt": True}
    tool = str(wl.get("tool") or "bench_serving")
    if tool.startswith("bench_one_batch"):  # one batch sent at once: a single wave of max_concurrency requests
        batch = int(wl.get("max_concurrency") or wl.get("batch_size") or 1)
        wl = {**wl, "num_prompts": batch, "max_concurrency": batch, "request_rate": None}
    elif tool != "bench_serving":
        notes.append(f"tool {tool} modelled as bench_serving")
    inp, out = wl.get("input_len"), wl.get("output_len")
    if inp is None or out is None:
        return f"dataset {dataset} without input_len/output_len"
    if dataset not in ("random", "sharegpt"):
        notes.append(f"{dataset} modelled as random prompts of its published lengths")
    prompts = int(wl.get("num_prompts") or 0) or None
    conc, rate = wl.get("max_concurrency"), wl.get("request_rate")
    rate = None if rate in (None, "inf", float("inf")) else float(rate)
    if prompts is None and conc:
        prompts = cap_per_slot * int(conc)
        notes.append(f"num_prompts not published: {prompts} ({cap_per_slot} per slot)")
    if prompts is None:
        return "num_prompts missing"
    slots = int(conc) if conc else prompts
    if rate is None:
        # drawn lengths (range ratio < 1, ShareGPT) need enough requests for their means to settle
        cap = max(cap_per_slot * slots, MIN_DRAWN_PROMPTS if ratio_of(wl) < 1.0 else 1)
        if prompts > cap:
            notes.append(f"{prompts} prompts cut to {cap} ({cap_per_slot} per slot: the same steady state)")
            prompts = cap
    elif prompts > MAX_RATE_PROMPTS:
        notes.append(f"{prompts} prompts cut to {MAX_RATE_PROMPTS} (Poisson arrivals: the same steady state)")
        prompts = MAX_RATE_PROMPTS
    ratio = float(wl.get("range_ratio") if wl.get("range_ratio") is not None else 1.0)
    dataset_spec = None
    if wl.get("sharegpt"):
        dataset_spec = FileWorkload(path=sharegpt_like(int(inp), int(out), prompts + 1))
    return WorkloadSpec(backend="sglang", input_len=int(inp), output_len=int(out), range_ratio=max(ratio, 1e-9),
                        num_prompts=prompts, concurrency=[min(slots, prompts)], request_rate=rate,
                        warmup_requests=1, seed=0, dataset=dataset_spec)


_SCRATCH: list[Path] = []


def sharegpt_like(mean_in: int, mean_out: int, n: int) -> Path:
    """A prompt file (token ids, output lengths) with ShareGPT-like lengths: log-normal with sigma 1
    [modelled: ShareGPT's lengths are heavy-tailed, a few answers run to thousands of tokens], pruned as
    bench_serving prunes ShareGPT (prompt and answer of at least 4 tokens, prompt at most 1024, both at most
    2048: sglang bench_serving.py sample_sharegpt_requests [code]). The means are kept after pruning to
    within a few percent. One file per (means, count), in a scratch directory removed at exit."""
    if not _SCRATCH:
        _SCRATCH.append(Path(tempfile.mkdtemp(prefix="sim-vs-published-")))
        atexit.register(shutil.rmtree, _SCRATCH[0], True)
    path = _SCRATCH[0] / f"sharegpt-{mean_in}-{mean_out}-{n}.jsonl"
    if path.exists():
        return path
    rng = np.random.default_rng(mean_in * 100_003 + mean_out * 17 + n)
    sigma = 1.0
    ins = np.clip(rng.lognormal(math.log(mean_in) - sigma**2 / 2, sigma, n), 4, 1024).astype(int)
    outs = rng.lognormal(math.log(mean_out) - sigma**2 / 2, sigma, n).astype(int)
    outs = np.clip(outs, 4, 2048 - ins)
    with path.open("w") as f:
        for i, o in zip(ins, outs, strict=True):
            ids = rng.integers(1000, 30000, int(i)).tolist()
            f.write(json.dumps({"input_ids": ids, "output_len": int(o)}) + "\n")
    return path


def ratio_of(wl: dict[str, Any]) -> float:
    return 0.0 if wl.get("sharegpt") else float(wl.get("range_ratio") if wl.get("range_ratio") is not None else 1.0)


def _profile_dir(directory: Path, name: Any, what: str) -> Path | str:
    """``models/<name>``; a Hugging Face id (``org/Name``) is looked up as ``models/org--name``."""
    for candidate in (str(name), str(name).replace("/", "--").lower()):
        path = directory / "models" / candidate
        if (path / "config.json").exists():
            return path
    return f"{what} profile models/{str(name).replace('/', '--').lower()} missing"


def build_point(s: dict[str, Any], p: dict[str, Any], directory: Path, cap_per_slot: int) -> Point:
    """The trial request of one published point (or why it is skipped)."""
    pid = str(p.get("id") or f"p{s['points'].index(p)}")
    measured = {k: float(v) for k, v in (p.get("measured") or {}).items() if isinstance(v, (int, float))}
    if "mean_e2e_latency_s" in measured:  # a unit change only
        measured.setdefault("mean_e2e_latency_ms", measured["mean_e2e_latency_s"] * 1000.0)
    if "decode_throughput_tok_s" in measured and not any(k in measured for k, _ in TPOT_KEYS):
        # one request's decode speed: its time per output token is the inverse
        measured["median_tpot_ms"] = 1000.0 / measured["decode_throughput_tok_s"]
    point = Point(str(s["id"]), pid, str(s.get("knob") or "none"), measured, flat_band=_run_to_run(s, str(s["id"])))
    hw = s["hardware"]
    if int(hw.get("nodes") or 1) > 1:
        point.skipped = f"{hw['nodes']} nodes: the simulator models one node"
        return point
    flags = {str(k).lstrip("-").replace("_", "-"): v for k, v in {**(s.get("flags") or {}),
                                                                  **(p.get("flags") or {})}.items()}
    model_spec = {**s["model"], **(p.get("model") or {})}  # a point may change the checkpoint (BF16 vs FP8)
    model = _profile_dir(directory, flags.pop("model-path", None) or model_spec.get("profile"), "model")
    if isinstance(model, str):
        point.skipped = model
        return point
    version, vnote = modelled_version(s.get("release"))
    if vnote:
        point.notes.append(vnote)
    if released_before(s.get("release"), OVERLAP_DEFAULT_SINCE) and "enable-overlap-schedule" not in flags:
        flags.setdefault("disable-overlap-schedule", True)
        point.notes.append(f"no overlap scheduler (its default before {OVERLAP_DEFAULT_SINCE})")
    flags.pop("enable-overlap-schedule", None)  # 0.3.x's opt-in: the default since
    for old, (new, value) in RENAMED_FLAGS.items():  # flags older releases had, in 0.5.9's words
        if flags.get(old):
            flags.pop(old)
            flags.setdefault(new, value if value is not None else (s.get("layout") or {}).get("tp", 1))
            point.notes.append(f"--{old} read as --{new}")
    kv = model_spec.get("kv_cache_dtype")
    if kv and kv != "auto":
        flags.setdefault("kv-cache-dtype", kv)
    if flags.get("speculative-draft-model-path"):
        draft = _profile_dir(directory, flags["speculative-draft-model-path"], "draft")
        if isinstance(draft, str) and load_model_profile(str(model)).has_mtp:
            point.notes.append(f"draft {flags.pop('speculative-draft-model-path')}: the checkpoint's own MTP layers")
        elif isinstance(draft, str):
            point.skipped = draft
            return point
        else:
            flags["speculative-draft-model-path"] = str(draft)
    layout = {**(s.get("layout") or {}), **(p.get("layout") or {})}
    argv = ["--model-path", str(model), *_layout_argv(layout), *_flag_argv(flags)]
    try:
        ns, extra = _split_flags(argv, version)
        cfg = config_from_namespace(ns, version)
        gpu = get_gpu(str(hw["gpu"]))
    except (ConfigError, SystemExit) as exc:
        point.skipped = f"flags: {exc}"
        return point
    cfg = replace(cfg, extra_args=tuple(extra))
    wl = _workload({**s["workload"], **(p.get("workload") or {})}, cap_per_slot, point.notes)

    if isinstance(wl, str):
        point.skipped = wl
        return point
    point.request = TrialRequest(
        study_name=f"published-{s['id']}", trial_number=0, config=cfg, backend="sim", sglang_version=version,
        gpu=gpu.name, num_gpus=int(hw.get("num_gpus") or cfg.num_gpus), interconnect=str(hw.get("interconnect")
                                                                                          or "nvlink"),
        workload=wl, objective=Objective("output_throughput", Direction.MAXIMIZE), artifact_dir="/nonexistent/a",
        run_dir="/nonexistent/r", sim=SimSpec(time_scale=1.0, seed=0), env={},
    )
    return point


def evaluate(point: Point) -> None:
    """Fill ``point.modelled`` (or ``point.skipped`` when the simulated launch fails)."""
    assert point.request is not None
    res = offline.evaluate(point.request)
    if res.state != TrialState.COMPLETE or not res.metrics_by_point:
        point.skipped = f"simulated launch failed: {res.failure_kind}: {str(res.evidence)[:160]}"
        return
    metrics = next(iter(res.metrics_by_point.values()))
    point.modelled = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


# --- comparing ---------------------------------------------------------------------------------


def figure(point: Point, name: str) -> tuple[str, float, float] | None:
    """(measured key, modelled, measured) of the first figure the source gives, or None."""
    for measured_key, modelled_key in FIGURES[name]:
        m = point.measured.get(measured_key)
        if m and m > 0 and point.modelled.get(modelled_key):
            return measured_key, point.modelled[modelled_key], m
    return None


def ratio(point: Point, name: str) -> float | None:
    f = figure(point, name)
    return f[1] / f[2] if f else None


def effects(points: list[Point]) -> list[dict[str, Any]]:
    """Each point's relative effect against its set's first evaluated point, measured and modelled."""
    out = []
    by_set: dict[str, list[Point]] = {}
    for p in points:
        if p.modelled:
            by_set.setdefault(p.set_id, []).append(p)
    for set_id, pts in by_set.items():
        if len(pts) < 2 or pts[0].knob == "none":
            continue
        ref = pts[0]
        for p in pts[1:]:
            for name in ("throughput", "tpot", "e2e"):
                a, b = figure(ref, name), figure(p, name)
                if a is None or b is None or a[0] != b[0]:
                    continue
                meas, mod = b[2] / a[2], b[1] / a[1]
                uniform = judge(meas, mod)
                out.append({"set": set_id, "point": p.point_id, "ref": ref.point_id, "figure": name,
                            "measured": meas, "modelled": mod, "group": p.group, "band": ref.flat_band,
                            **judge(meas, mod, ref.flat_band), "direction_uniform": uniform["direction"]})
                break
    return out


def judge(measured: float, modelled: float, band: float = FLAT_BAND) -> dict[str, bool]:
    """Direction and size of a modelled relative effect against the measured one (log scale). A measured
    change under 3 % (or within the set's measured run-to-run spread, ``band``) counts as flat: the model is right
    when its change is under 10 % (or within the same spread). A modelled change under 3 % is flat too: against a
    measured change that is not, it is in the measured direction only where it is also within 1.5x of its size
    (a modelled 1.004x for a measured 2.44x is a tie, not the measured direction)."""
    lm, ls = math.log(measured), math.log(modelled)
    if abs(lm) < math.log(FLAT_BAND) or abs(lm) <= math.log(band):
        flat = abs(ls) < math.log(max(1.10, band))
        return {"direction": flat, "within_1_5x": flat, "within_2x": abs(ls) < math.log(1.25)}
    same = lm * ls > 0
    size = ls / lm if same else 0.0
    within = same and 1 / 1.5 <= size <= 1.5
    return {"direction": same and (abs(ls) >= math.log(FLAT_BAND) or within), "within_1_5x": within,
            "within_2x": same and 0.5 <= size <= 2.0}


def spread(xs: list[float]) -> str:
    if not xs:
        return "n=0"
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) >= 2 else [xs[0]] * 3
    within15 = sum(1 for x in xs if 1 / 1.5 <= x <= 1.5) / len(xs)
    within2 = sum(1 for x in xs if 0.5 <= x <= 2.0) / len(xs)
    return (f"median {statistics.median(xs):.2f} (quartiles {q[0]:.2f}-{q[2]:.2f}, range {xs[0]:.2f}-{xs[-1]:.2f}, "
            f"n={len(xs)}); within 1.5x {within15:.0%}, within 2x {within2:.0%}")


def summary(points: list[Point], effs: list[dict[str, Any]], groups: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    unseen = {p.set_id for p in points if p.unseen_source}
    for g in groups:
        if g == "held-out, unseen source":
            pts = [p for p in points if p.unseen_source and p.modelled]
            es = [e for e in effs if e["set"] in unseen]
        else:
            pts = [p for p in points if p.group == g and p.modelled]
            es = [e for e in effs if e["group"] == g]
        out[g] = {name: [r for p in pts if (r := ratio(p, name)) is not None] for name in SUMMARY_FIGURES}
        out[g]["effects"] = {"n": len(es), "direction": sum(e["direction"] for e in es),
                             "direction_uniform": sum(e["direction_uniform"] for e in es),
                             "within_1_5x": sum(e["within_1_5x"] for e in es), "within_2x": sum(e["within_2x"] for e in es)}
    return out


# --- printing ----------------------------------------------------------------------------------


def _fmt(f: tuple[str, float, float] | None) -> str:
    if f is None:
        return f"{'-':>25}"
    return f"{f[1]:9.1f} /{f[2]:9.1f} ={f[1] / f[2]:5.2f}"


def print_report(points: list[Point], effs: list[dict[str, Any]], summ: dict[str, Any]) -> None:
    print("Figures: modelled = the simulated server (offline, modelled time); measured = published real SGLang.")
    print("Each cell: modelled / measured = ratio. Throughput tok/s (or req/s), TTFT and TPOT in ms.\n")
    print(f"{'set/point':<58} {'group':<10} {'throughput':>25} {'TTFT':>25} {'TPOT':>25}")
    for p in points:
        if p.skipped:
            print(f"{p.key[:58]:<58} {p.group:<10} skipped: {p.skipped}")
            continue
        print(f"{p.key[:58]:<58} {p.group:<10} {_fmt(figure(p, 'throughput'))} {_fmt(figure(p, 'ttft'))} "
              f"{_fmt(figure(p, 'tpot'))}" + (f"  [{'; '.join(p.notes)}]" if p.notes else ""))
    if effs:
        print("\nRelative effects (each point against its set's first point; ratio of the figure):")
        print(f"{'set: point vs ref':<70} {'figure':<10} {'measured':>9} {'modelled':>9}  direction  1.5x  2x")
        for e in effs:
            label = f"{e['set']}: {e['point']} vs {e['ref']}"
            band = f"  (flat within {e['band']:.2f}x: the set's run-to-run spread)" \
                if e["band"] != FLAT_BAND and math.log(FLAT_BAND) <= abs(math.log(e["measured"])) <= math.log(e["band"]) \
                else ""
            print(f"{label[:70]:<70} {e['figure']:<10} {e['measured']:9.2f} {e['modelled']:9.2f}  "
                  f"{'yes' if e['direction'] else 'NO':<9}  {'yes' if e['within_1_5x'] else 'no':<4}  "
                  f"{'yes' if e['within_2x'] else 'no'}{band}")
    for g, s in summ.items():
        print(f"\nSummary, {g} points (modelled/measured):")
        for name in SUMMARY_FIGURES:
            print(f"  {name:<10} {spread(s[name])}")
        e = s["effects"]
        if e["n"]:
            print(f"  effects    {e['direction']}/{e['n']} in the measured direction, {e['within_1_5x']}/{e['n']} within "
                  f"1.5x of its size, {e['within_2x']}/{e['n']} within 2x")
            if e["direction_uniform"] != e["direction"]:
                print(f"             ({e['direction_uniform']}/{e['n']} in the measured direction with a 3 % flat band for "
                      "every set, its sets' measured run-to-run spread ignored)")
        else:
            print("  effects    none")


def run(directory: Path, only: list[str] | None, cap_per_slot: int, *, fitted_only: bool = False,
        ) -> tuple[list[Point], list[dict[str, Any]], dict[str, Any]]:
    """Every point of the sets (``only``: those ids), evaluated; ``fitted_only`` never evaluates a held-out
    point (what a fit of the constants runs on)."""
    sets = load_sets(directory)
    if only:
        sets = [s for s in sets if s["id"] in only]
    holdout = load_holdout(directory)
    points = []
    for s in sets:
        for p in s["points"]:
            pt = build_point(s, p, directory, cap_per_slot)
            if holdout is not None:
                held = pt.set_id in holdout[0] or pt.key in holdout[1]
                pt.group = "held-out" if held else "fitted"
            if fitted_only and pt.group == "held-out":
                pt.request, pt.skipped = None, "held out: not evaluated (--fitted-only)"
            if pt.request is not None:
                evaluate(pt)
            points.append(pt)
    if holdout is not None:
        unseen = unseen_source_sets(sets, holdout[0])
        for pt in points:
            if pt.set_id in unseen:
                pt.unseen_source = True
    effs = effects(points)
    groups = ["unassigned"] if holdout is None else ["fitted", "held-out", "held-out, unseen source"]
    return points, effs, summary(points, effs, groups)


def _origin(s: dict[str, Any]) -> str:
    """A set's source: the host, and on GitHub the owner/repository (one project's PRs, issues and docs)."""
    url = urlparse(str((s.get("source") or {}).get("url") or ""))
    parts = [p for p in url.path.split("/") if p]
    return url.netloc + ("/" + "/".join(parts[:2]) if url.netloc == "github.com" else "")


def unseen_source_sets(sets: list[dict[str, Any]], held: set[str]) -> set[str]:
    """Held-out sets that share no source with a fitted set (the same origin, or ``independent_of`` either
    way): their method is unseen as well as their figures."""
    fitted = {s["id"] for s in sets} - held
    linked: dict[str, set[str]] = {s["id"]: set(map(str, s.get("independent_of") or [])) for s in sets}
    for sid, others in list(linked.items()):
        for o in others:
            linked.setdefault(o, set()).add(sid)
    by_origin: dict[str, set[str]] = {}
    for s in sets:
        if _origin(s):
            by_origin.setdefault(_origin(s), set()).add(s["id"])
    for s in sets:
        linked[s["id"]] |= by_origin.get(_origin(s), set()) - {s["id"]}
    return {sid for sid in held if sid in linked and not (linked[sid] & fitted)}


#: SGLang's docs: DeepSeek V3 MTP "decoding speed can be improved by 1.8x for batch size 1 and 1.5x for batch
#: size 32 respectively on H200 TP8" (docs/basic_usage/deepseek_v3.md, "Multi-token Prediction";
#: https://docs.sglang.io/basic_usage/deepseek_v3.html) [published]
MTP_DOCS = {1: 1.8, 32: 1.5}
DSV3_FALLBACK = ROOT / "tests" / "data" / "public_logs" / "ktransformers-1804-dsv3-kt-tp2"


def mtp_check(directory: Path) -> list[tuple[int, float, float]]:
    """DeepSeek-V3 MTP (1 step, top-k 1, 2 draft tokens) on 8 x H200 TP 8: modelled decoding speed-up (median
    TPOT off / on) at batch 1 and 32, one wave of 1024-in / 512-out requests, against the docs' figure."""
    profile = directory / "models" / "deepseek-ai--deepseek-v3"
    model = profile if (profile / "config.json").exists() else DSV3_FALLBACK
    wl = {"tool": "bench_one_batch", "dataset": "random", "input_len": 1024, "output_len": 512, "range_ratio": 1.0}
    out = []
    for batch, docs in MTP_DOCS.items():
        tpots = []
        for spec in ({}, {"--speculative-algorithm": "EAGLE", "--speculative-num-steps": 1,
                          "--speculative-eagle-topk": 1, "--speculative-num-draft-tokens": 2}):
            s = {"id": "mtp-check", "release": "0.5.9", "model": {"profile": str(model)},
                 "hardware": {"gpu": "h200", "num_gpus": 8, "interconnect": "nvlink"}, "layout": {"tp": 8},
                 "flags": {"--trust-remote-code": True, **spec}, "workload": {**wl, "max_concurrency": batch},
                 "points": [{"id": f"b{batch}", "measured": {}}]}
            pt = build_point(s, s["points"][0], directory, MAX_PROMPTS_PER_SLOT)
            if pt.request is not None:
                evaluate(pt)
            tpots.append(pt.modelled.get("median_tpot_ms") or math.nan)
        out.append((batch, tpots[0] / tpots[1], docs))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=DATA, help="the published sets (default: %(default)s)")
    ap.add_argument("--only", nargs="*", default=None, help="set ids to run (default: all)")
    ap.add_argument("--json", type=Path, default=None, help="also write every figure here as JSON")
    ap.add_argument("--max-prompts-per-slot", type=int, default=MAX_PROMPTS_PER_SLOT,
                    help="cap on prompts per concurrency slot (default: %(default)s)")
    ap.add_argument("--check", action="store_true",
                    help="only say which points the simulator runs and why others are skipped (no figures: for "
                         "working on the model without looking at how far off any point is)")
    ap.add_argument("--fitted-only", action="store_true", help="evaluate the fitted points only (never a held-out one)")
    args = ap.parse_args(argv)
    if args.max_prompts_per_slot < 2:
        print(f"--max-prompts-per-slot: must be >= 2, got {args.max_prompts_per_slot}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    try:
        points, effs, summ = run(args.dir, args.only, args.max_prompts_per_slot, fitted_only=args.fitted_only)
    except SetError as exc:
        print(f"published set: {exc}", file=sys.stderr)
        return 2
    if args.check:
        for p in points:
            print(f"{p.key:<70} " + (f"skipped: {p.skipped}" if p.skipped else "runs")
                  + (f"  [{'; '.join(p.notes)}]" if p.notes else ""))
    else:
        print_report(points, effs, summ)
    if not args.check:
        print("\nDeepSeek-V3 MTP (1 step, top-k 1, 2 draft tokens), 8 x H200 TP 8: decoding speed-up, modelled "
              "(median TPOT off/on) vs SGLang's docs (published):")
        for batch, modelled, docs in mtp_check(args.dir):
            print(f"  batch {batch:>2}: modelled {modelled:.2f}x, docs {docs:.1f}x, ratio {modelled / docs:.2f}")
    print(f"\n{sum(1 for p in points if p.modelled)} points modelled, {sum(1 for p in points if p.skipped)} skipped, "
          f"in {time.monotonic() - t0:.0f} s")
    if args.json and not args.check:
        args.json.write_text(json.dumps({
            "points": [{"set": p.set_id, "point": p.point_id, "group": p.group, "skipped": p.skipped,
                        "notes": p.notes, "measured": p.measured,
                        "modelled": {k: p.modelled.get(k) for _, keys in FIGURES.items() for _, k in keys}}
                       for p in points],
            "effects": effs, "summary": summ}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
