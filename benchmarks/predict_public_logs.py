"""The memory model against real SGLang startup logs posted publicly (issue 23's yardstick).

For each log of ``tests/data/public_logs/manifest.json`` (sources named there), it prints the weights
per GPU and the KV tokens the real server logged next to what autotune predicts:

* **cold**: from the published config.json only (plus ``hf_quant_config.json`` where the checkpoint has
  one) and the log's own server arguments (mem_fraction_static, tp, dp / DP attention, kv dtype, page
  size, context length), with P and A estimated from the GPU's memory, as ``autotune plan`` does before
  any launch. The weights figure is "Load weight end ... mem usage": weights plus the loader residue.
* **calibrated**: P and A taken from the log itself (``Load weight begin`` / ``end`` avail mem, as
  ``autotune calibrate`` learns them), so the weights are the log's by construction and only the KV
  sizing (the family's cell, its pools, the reserve) is tested.

Each log is predicted with its release's rules: the version its line or post names, else its date (a log
from before February 2026 with 0.5.9's, the oldest modelled, plus the older rules of :func:`release_overrides`),
else 0.5.23 assumed; the launch's own ``server_args=ServerArgs(...)`` line, where logged, overrides the
manifest's arguments (it is resolved before the weights load, so a cold figure may use it).

A log whose architecture or quantization the profiles do not know prints ``unknown`` with the cold
verdict, which must never be a confident (pruning) out-of-memory. Logs from forks that move the experts
off the GPU (ktransformers' kt-kernel) are listed but not comparable; a build the manifest marks as not
stock SGLang (``build``: a PR's patched pool, weights held in another dtype than the config says) keeps its
figures but is excluded from the supported count, its reason printed. Nothing here is timed.

Usage::

    python benchmarks/predict_public_logs.py [--dir tests/data/public_logs] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.sglang import _slack
from autotune.sglang.config import ServerConfig
from autotune.sglang.dp_attention import replicated_weight_gib
from autotune.sglang.gpus import GpuKind, custom_gpu_name, get_gpu
from autotune.sglang.memory import LOADER_RESIDUE_GIB, Calibration, predict
from autotune.sglang.models import ModelProfile, profile_from_config
from autotune.sglang.profiles.sizing import weight_bytes_per_gpu
from autotune.sglang.releases import mxfp4_pad_align
from autotune.sglang.versions import parse_version

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT / "tests" / "data" / "public_logs"
KV_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "fp8": "fp8_e4m3", None: "auto", "auto": "auto"}


#: SGLang 0.5.9, the oldest release the predictor models, came out in February 2026: a log dated before
#: that comes from an older release and is predicted with 0.5.9's rules (and the older rules below).
FIRST_MODELLED_DATE = "2026-02-01"
#: MiMo-V2-Flash ignored --swa-full-tokens-ratio until SGLang PR #15488 ("[MiMoV2Flash] fix: respect
#: --swa-full-tokens-ratio arg", merged 2025-12-25): builds before it size the SWA pool as large as the full
#: one (ratio 1.0), as the PR #15464 log shows ("swa size: 1496958, full size: 1496958").
MIMO_RATIO_FIX_DATE = "2025-12-25"


#: Logs a pre-load overhead figure of the memory model is read from (:mod:`autotune.sglang._slack`).
FITTED_LOGS = frozenset(m.group(0) for table in (_slack.CONTEXT_GIB, _slack.NVLINK_COMM_GIB)
                        for _, src in table.values() for m in re.finditer(r"[a-z]+-(?:pr)?\d+-[a-z0-9.-]+", src))


def release_of(entry: dict[str, Any]) -> tuple[str, str]:
    """(the release whose rules predict this log, how it was determined): the version the log or its
    post names, else the log's date (before 0.5.9 -> 0.5.9's rules), else 0.5.23 assumed."""
    m = re.search(r"(\d+\.\d+\.\d+)", entry.get("sglang_version") or "")
    date = str(entry.get("log_date") or "")
    if m:
        if not parse_version(m.group(1)).at_least("0.5.9"):  # the predictor's oldest release
            return "0.5.9", f"{m.group(1)} predicted with 0.5.9's rules"
        return m.group(1), ""
    if date and date < FIRST_MODELLED_DATE:
        return "0.5.9", f"dated {date}, a release before 0.5.9: 0.5.9's rules"
    if date:
        return "0.5.23", f"dated {date}, release not logged: 0.5.23 assumed"
    if str(entry.get("release") or "").startswith("before 0.5.9"):  # an undated excerpt, its post's date
        return "0.5.9", f"{entry['release']}: 0.5.9's rules"
    return "0.5.23", "version not logged: 0.5.23 assumed"


def release_overrides(entry: dict[str, Any], model: ModelProfile) -> tuple[dict[str, Any], list[str]]:
    """Launch facts a pre-0.5.9 build resolved differently from 0.5.9's rules (server_args keys), with why."""
    date = str(entry.get("log_date") or "")
    if model.architecture == "MiMoV2FlashForCausalLM" and date and date < MIMO_RATIO_FIX_DATE:
        return {"swa_full_tokens_ratio": 1.0}, [f"dated {date}, before SGLang PR #15488: MiMo-V2's SWA pool "
                                                "as large as the full pool (--swa-full-tokens-ratio ignored)"]
    return {}, []


#: server_args fields read from a logged ``server_args=ServerArgs(...)`` line: what SGLang resolved before
#: the weights load (the automatic mem_fraction_static included), never a figure measured after.
_LOGGED_ARGS = ("mem_fraction_static", "context_length", "max_total_tokens", "chunked_prefill_size",
                "cuda_graph_max_bs", "kv_cache_dtype", "page_size", "swa_full_tokens_ratio", "max_running_requests")


def logged_server_args(text: str) -> dict[str, Any]:
    """The launch's own resolved arguments from its ``server_args=ServerArgs(...)`` line (empty if none)."""
    line = next((ln for ln in text.splitlines() if "server_args=ServerArgs(" in ln), "")
    out: dict[str, Any] = {}
    for key in _LOGGED_ARGS:
        m = re.search(rf"[(, ]{key}=('[^']*'|[^,)]+)", line)
        if not m or m.group(1) == "None":
            continue
        raw = m.group(1).strip("'")
        try:
            out[key] = float(raw) if "." in raw else int(raw)
        except ValueError:
            out[key] = raw
    return out


def _gpu(entry: dict[str, Any]) -> GpuKind | None:
    name = str(entry.get("gpu") or "")
    try:
        return get_gpu(name) if name else None
    except ConfigError:
        mem = entry.get("gpu_memory_gib")
        return get_gpu(custom_gpu_name(name, int(float(mem) * 1024))) if mem else None


def _profile(base: Path, entry: dict[str, Any]) -> ModelProfile | None:
    if not entry.get("config"):
        return None
    cfg = json.loads((base / entry["config"]).read_text())
    hf = json.loads((base / entry["hf_quant_config"]).read_text()) if entry.get("hf_quant_config") else None
    return profile_from_config(cfg, path=str(base / entry["config"]), hf_quant=hf)


def _server(entry: dict[str, Any], model: ModelProfile, logged_args: dict[str, Any] | None = None) -> ServerConfig:
    """The launch as SGLang resolved it before loading: the manifest's fields, overridden by the log's own
    ``server_args`` line where it has one."""
    args = {**(entry.get("server_args") or {}), **(logged_args or {})}
    tp, dp = int(entry.get("tp") or 1), int(entry.get("dp") or 1)
    dp_attn = bool(entry.get("enable_dp_attention"))
    page = args.get("page_size") or entry.get("page_size")
    extra: list[str] = ["--page-size", str(page)] if page else []
    if args.get("swa_full_tokens_ratio") is not None:
        extra += ["--swa-full-tokens-ratio", str(args["swa_full_tokens_ratio"])]
    kv = str(args.get("kv_cache_dtype") or entry.get("kv_cache_dtype") or "auto").lower()
    f = args.get("mem_fraction_static", entry.get("mem_fraction_static"))
    return ServerConfig(
        model_path=model.path, tp_size=tp, dp_size=1 if dp_attn else dp, ep_size=int(entry.get("ep") or 1),
        attn_dp_size=dp if dp_attn else 1, mem_fraction_static=f,
        kv_cache_dtype=KV_DTYPES.get(kv, kv), context_length=args.get("context_length") or entry.get("context_length"),
        chunked_prefill_size=args.get("chunked_prefill_size"), max_running_requests=args.get("max_running_requests"),
        cuda_graph_max_bs=args.get("cuda_graph_max_bs"), max_total_tokens=args.get("max_total_tokens"),
        extra_args=tuple(extra),
    )


def cold_weights_gib(model: ModelProfile, cfg: ServerConfig, version: str = "0.5.23", gpu: GpuKind | None = None) -> float:
    """"Load weight end ... mem usage" as predicted: the rank's weights (+ DP attention's whole copies)
    plus the loader residue, with the release's MXFP4 padding on this GPU."""
    rep = replicated_weight_gib(model, cfg.tp_size, cfg.attn_dp_size)
    align = mxfp4_pad_align(version, sm_family=gpu.sm_family if gpu else 0, rocm=bool(gpu and gpu.rocm))
    return weight_bytes_per_gpu(model, cfg.tp_size, mxfp4_align=align) / 2**30 + rep + LOADER_RESIDUE_GIB


def _err(pred: float | None, logged: float | None) -> float | None:
    if pred is None or not logged:
        return None
    return 100.0 * (pred - logged) / logged


def evaluate(base: Path, entry: dict[str, Any]) -> dict[str, Any]:
    """One log's row: logged vs cold vs calibrated (``status`` says why a figure is missing)."""
    logged = entry.get("logged") or {}
    row: dict[str, Any] = {"id": entry["id"], "source": entry.get("source"), "logged_w": logged.get("weight_gib_per_gpu"),
                           "logged_kv": logged.get("kv_tokens"), "notes": []}
    if "ktransformers" in str(entry.get("source") or "") + entry["id"]:
        return {**row, "status": "n/a: kt-kernel fork (routed experts on the CPU)"}
    row["failure_kind"] = entry.get("failure_kind")
    try:
        model = _profile(base, entry)
    except (ConfigError, OSError, ValueError) as e:
        return {**row, "status": f"config unreadable: {e}"}
    if model is None:
        return {**row, "status": "no published config.json in the set"}
    row["family"] = model.family
    quant = str(entry.get("quantization") or "").lower()
    if quant and quant not in ("none", "bf16", "bfloat16") and not model.quant_method:
        row["notes"].append(f"config lacks the checkpoint's {quant} quantization: W not comparable")
        row["w_incomparable"] = True
    version, note = release_of(entry)
    if note:
        row["notes"].append(note)
    gpu = _gpu(entry)
    log = base / entry["log"] if entry.get("log") else None
    from_log = logged_server_args(log.read_text(errors="replace")) if log is not None and log.is_file() else {}
    if from_log:
        row["notes"].append("launch from the log's server_args line")
    if entry["id"] in FITTED_LOGS:
        row["notes"].append("the pre-load overhead is fitted on this log: its cold KV is no independent check")
        row["fitted"] = True
    overrides, why = release_overrides(entry, model)
    row["notes"] += why
    cfg = _server(entry, model, {**overrides, **from_log})
    row["cold_w"] = cold_weights_gib(model, cfg, version, gpu)
    p, a, w = logged.get("avail_before_load_gib"), logged.get("avail_after_load_gib"), logged.get("weight_gib_per_gpu")
    if p is None and a is not None and w is not None:
        p = a + w
    gpu_from_log = gpu is None and p is not None
    if gpu_from_log:  # no GPU of known memory: its memory taken as the log's P + 1 GiB (so no cold KV figure)
        gpu = get_gpu(custom_gpu_name("from-log", int((float(p) + 1.0) * 1024)))
        what = f"GPU {entry['gpu']!r} of unknown memory" if entry.get("gpu") else "GPU not named"
        row["notes"].append(f"{what}: memory from the log's P, calibrated figures only")
    if gpu is None:
        return {**row, "status": f"gpu {entry.get('gpu')!r} unknown (no memory figure): weights only"
                + (f"; unknown ({model.unknown_reason})" if model.is_unknown else "")}
    # The catalogue's NVLink / xGMI parts (SXM, OAM) sit on their fabric in every multi-GPU log of the set;
    # an entry's own "interconnect" says otherwise where a post does.
    interconnect = entry.get("interconnect") or ("nvlink" if gpu.has_nvlink and cfg.tp_size > 1 else "pcie")
    row["interconnect"] = interconnect
    try:
        cold = predict(model, gpu, cfg, version=version, interconnect=interconnect)
    except ConfigError as e:
        return {**row, "status": f"refused: {e}"}
    row.update(cold_verdict=cold.verdict, cold_prunes=cold.should_prune, cell=cold.cell_bytes)
    if not gpu_from_log:
        row["cold_kv"] = cold.kv_tokens
    if model.family == "swa":
        row["notes"].append("hybrid SWA: the log's #tokens / KV size may be one pool's (full or SWA), cell not compared")
    elif logged.get("kv_size_gib") and logged.get("kv_tokens"):  # the cell the log implies (KV GiB are 2^30 B)
        row["logged_cell"] = float(logged["kv_size_gib"]) * 2**30 / float(logged["kv_tokens"])
    if model.is_unknown:
        return {**row, "status": f"unknown ({model.unknown_reason})"}
    if entry.get("build"):  # figures kept, but out of the supported count, with the reason printed
        row["status"] = f"excluded (not stock SGLang): {entry['build']}"
    if p is not None and a is not None:
        cal = Calibration(p_gib=float(p), a_gib=float(a), tp_size=cfg.tp_size, attn_dp_size=cfg.attn_dp_size,
                          mem_fraction_static=cfg.mem_fraction_static, f_is_auto=cfg.mem_fraction_static is None,
                          source="public log")
        calibrated = predict(model, gpu, cfg, version=version, calibration=cal, interconnect=interconnect)
        row["cal_kv"] = calibrated.kv_tokens
    return {"status": "supported", **row}


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the public-log set (manifest.json inside)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ns = ap.parse_args(argv)
    manifest = ns.dir / "manifest.json"
    if not manifest.is_file():
        print(f"error: --dir: {ns.dir} has no manifest.json", file=sys.stderr)
        return 2
    rows = [evaluate(ns.dir, e) for e in json.loads(manifest.read_text())]
    for r in rows:
        r["cold_w_err"] = None if r.get("w_incomparable") else _err(r.get("cold_w"), r.get("logged_w"))
        r["cell_err"] = _err(r.get("cell"), r.get("logged_cell"))
        r["cold_kv_err"] = _err(r.get("cold_kv"), r.get("logged_kv"))
        r["cal_kv_err"] = _err(r.get("cal_kv"), r.get("logged_kv"))
    if ns.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'log':44} {'family':7} {'W logged':>9} {'W cold':>8} {'err%':>6} {'KV logged':>10} {'KV cold':>10} "
          f"{'err%':>6} {'KV cal':>10} {'err%':>6} {'cell B':>7} {'err%':>6}  status")
    for r in rows:
        print(f"{r['id'][:44]:44} {r.get('family', '-'):7} {_fmt(r.get('logged_w'), '9.2f')} "
              f"{_fmt(r.get('cold_w'), '8.2f')} {_fmt(r.get('cold_w_err'), '+6.1f')} {_fmt(r.get('logged_kv'), '10,d')} "
              f"{_fmt(r.get('cold_kv'), '10,d')} {_fmt(r.get('cold_kv_err'), '+6.1f')} {_fmt(r.get('cal_kv'), '10,d')} "
              f"{_fmt(r.get('cal_kv_err'), '+6.1f')} {_fmt(r.get('cell'), '7,d')} {_fmt(r.get('cell_err'), '+6.1f')}"
              f"  {r['status']}"
              + (f" [{'; '.join(r['notes'])}]" if r["notes"] else ""))
    sup = [r for r in rows if r["status"] == "supported" or (r.get("family") not in (None, "unknown")
                                                            and "weights only" in str(r["status"]))]
    unknown = [r for r in rows if r.get("family") == "unknown"]
    excluded = [r for r in rows if str(r["status"]).startswith("excluded")]
    print(f"\n{len(rows)} logs: {len(sup)} of a supported family with a config, {len(unknown)} unknown, "
          f"{len(excluded)} excluded (not stock SGLang, reason per row), "
          f"{len(rows) - len(sup) - len(unknown) - len(excluded)} without a comparable config (no config, kt-kernel fork)")
    for key, what in (("cold_w_err", "weights per GPU, cold"), ("cold_kv_err", "KV tokens, cold"),
                      ("cal_kv_err", "KV tokens, calibrated"), ("cell_err", "KV cell vs the log's KV size / tokens")):
        errs = sorted(((abs(r[key]), r["id"]) for r in sup if r.get(key) is not None), reverse=True)
        worst = f", worst {errs[0][0]:.1f} % ({errs[0][1]})" if errs else ""
        fitted = [i for _, i in errs if i in FITTED_LOGS] if key == "cold_kv_err" else []
        own = f" ({len(fitted)} of them fitted on: {', '.join(fitted)})" if fitted else ""
        print(f"  {what}: {len(errs)} compared, {sum(e <= 5 for e, _ in errs)} within 5 %{worst}{own}")
    oom = [r for r in sup if str(r.get("failure_kind") or "").endswith("oom")]
    print(f"  logs that ended in out-of-memory: {len(oom)}, predicted cold as a pruning out-of-memory: "
          f"{sum(bool(r.get('cold_prunes')) for r in oom)}"
          + "".join(f"; {r['id']}: {r.get('cold_verdict', '-')}" for r in oom if not r.get("cold_prunes")))
    print(f"unknown profiles predicted as a pruning out-of-memory: {sum(bool(r.get('cold_prunes')) for r in unknown)}")
    print("'KV cal' uses P and A from the log itself (calibrated); 'cold' uses the config and the GPU's memory only.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
