"""Fit the speed model's free constants on the FITTED published points only (issue 32, phase 2).

The structure of the speed model comes from SGLang's code and microbenchmarks
(``docs/simulator-speed.md``); a few constants stay free: the kernel floor (one for every kind; with
``--per-kind-floor`` each kind's own where it has enough sets, tried and not taken), each GPU kind's achievable HBM share, the routed experts' grouped-GEMM share (one for NVIDIA kinds, one for AMD's), the GEMM and prefill shares, the eager launch, the request
path (fixed and per input token), the scheduler's per-request cost, the speculative cycle's fixed cost, the
attention backends' factors on Hopper, the eager launch's extra per MLA layer and per DSA layer (each
fitted on its family's points only). It starts from the values in the code: the committed ones came out
of successive runs (their grids and results: ``docs/simulator-speed.md``). This script chooses them by coordinate
descent over a grid per constant, minimising the squared log error of throughput, TTFT and TPOT over the
fitted points plus that of every relative effect, each clipped at 4x so that one point the structure
cannot explain does not drag the rest.

Held-out sets (``tests/data/published_speed/holdout.yaml``) are never evaluated here: the harness's
``fitted_only`` mode skips them before anything runs. The result is printed, with the set ids each
constant was fitted on, to be written into ``autotune/sim/perf/gpu.py`` / ``perf_forward.py`` /
``perf.py`` by hand beside the constant (a fitted constant is a calibration, not a validation).

Usage::

    python benchmarks/sim_speed_fit.py [--rounds 2] [--max-prompts-per-slot 3] [--only NAME ...] [--per-kind-floor]

Every evaluation is modelled time; a round takes about ten minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autotune.sglang.hardware.gpus import get_gpu
from autotune.sim.perf import forward as perf_forward
from autotune.sim.perf import gpu as perf_gpu
from autotune.sim.perf import knobs as perf_knobs
from autotune.sim.perf import model as perf
from autotune.sim.perf.fitted import AMD_KINDS, MIN_SETS_PER_GPU  # a kind's HBM share needs that many sets on it
from autotune.trial import offline

HERE = Path(__file__).resolve().parent
CLIP = math.log(4.0)
WEIGHTS = {"throughput": 1.0, "ttft": 0.5, "tpot": 1.0}


def _harness() -> Any:
    name = "sim_vs_published_for_fit"
    spec = importlib.util.spec_from_file_location(name, HERE / "sim_vs_published.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@dataclass
class Param:
    """One free constant: its grid, how to set it, and which points it can change."""

    name: str
    grid: list[float]
    value: float
    apply: Callable[[float], None]
    scope: Callable[[Any], bool]


def _set_rows(field: str, value: float, names: list[str] | None = None) -> None:
    rows = perf_gpu.GPU_SPEED
    for name in (names if names is not None else [n for n in rows if n not in perf_gpu.SEED_CALIBRATED]):
        rows[name] = replace(rows.get(name, perf_gpu.DEFAULT), **{field: value})
    if names is None:
        perf_gpu.DEFAULT = replace(perf_gpu.DEFAULT, **{field: value})


def _set_moe_nvidia(value: float) -> None:
    _set_rows("moe", value, [n for n in perf_gpu.GPU_SPEED if n not in perf_gpu.SEED_CALIBRATED | AMD_KINDS])
    perf_gpu.DEFAULT = replace(perf_gpu.DEFAULT, moe=value)


def _set_moe_amd(value: float) -> None:
    _set_rows("moe", value, [n for n in perf_gpu.GPU_SPEED if n in AMD_KINDS])
    perf_gpu.MOE_SHARE_AMD = value


def _gpu_of(point: Any) -> str:
    return get_gpu(point.request.gpu).name if point.request is not None else ""


def params(points: list[Any], per_kind_floor: bool = False) -> list[Param]:
    gpus = sorted({_gpu_of(p) for p in points if p.request is not None})
    moe = {p.key for p in points if p.request is not None and _is_moe(p)}
    spec = {p.key for p in points if p.request is not None and p.request.config.speculative.enabled}
    out = [
        Param("kernel_floor_s", [2e-6, 3e-6, 4.5e-6, 6e-6, 9e-6, 13e-6], perf_gpu.DEFAULT.kernel_floor_s,
              lambda v: _set_rows("kernel_floor_s", v), lambda p: True),
        Param("moe", [0.9, 0.8, 0.65, 0.5, 0.4, 0.3], perf_gpu.DEFAULT.moe, _set_moe_nvidia,
              lambda p: p.key in moe and _gpu_of(p) not in AMD_KINDS),
        Param("moe[amd]", [0.8, 0.65, 0.5, 0.4, 0.3, 0.2], perf_gpu.MOE_SHARE_AMD, _set_moe_amd,
              lambda p: p.key in moe and _gpu_of(p) in AMD_KINDS),
        Param("gemm", [0.2, 0.25, 0.3, 0.4, 0.55, 0.7], perf_gpu.DEFAULT.gemm, lambda v: _set_rows("gemm", v), lambda p: True),
        Param("prefill", [0.25, 0.35, 0.45, 0.6, 0.75], perf_gpu.DEFAULT.prefill, lambda v: _set_rows("prefill", v),
              lambda p: True),
        Param("REQUEST_PATH_S", [1e-3, 2e-3, 4e-3, 8e-3, 16e-3], perf.REQUEST_PATH_S,
              lambda v: setattr(perf, "REQUEST_PATH_S", v), lambda p: True),
        Param("REQUEST_PATH_PER_TOKEN_S", [0.0, 3e-6, 10e-6, 20e-6, 40e-6], perf.REQUEST_PATH_PER_TOKEN_S,
              lambda v: setattr(perf, "REQUEST_PATH_PER_TOKEN_S", v), lambda p: True),
        Param("STEP_PER_REQ_S", [0.4e-6, 5e-6, 15e-6, 30e-6, 60e-6], perf.STEP_PER_REQ_S,
              lambda v: setattr(perf, "STEP_PER_REQ_S", v), lambda p: True),
        Param("eager", [1.0, 1.5, 2.0, 3.0, 4.0, 6.0], perf_gpu.DEFAULT.eager, lambda v: _set_rows("eager", v),
              lambda p: True),
        Param("EAGER_CPU_MLA_EXTRA_S", [0.0, 50e-6, 100e-6, 150e-6, 200e-6, 300e-6], perf_forward.EAGER_CPU_MLA_EXTRA_S,
              lambda v: setattr(perf_forward, "EAGER_CPU_MLA_EXTRA_S", v), lambda p: _family(p) in ("mla", "dsa")),
        Param("EAGER_CPU_DSA_EXTRA_S", [0.0, 100e-6, 200e-6, 300e-6, 500e-6], perf_forward.EAGER_CPU_DSA_EXTRA_S,
              lambda v: setattr(perf_forward, "EAGER_CPU_DSA_EXTRA_S", v), lambda p: _family(p) == "dsa"),
        Param("FP8_GEMM_RELATIVE", [0.5, 0.6, 0.7, 0.85, 1.0], perf_gpu.FP8_GEMM_RELATIVE,
              lambda v: setattr(perf_gpu, "FP8_GEMM_RELATIVE", v), _is_fp8),
        Param("SPEC_CYCLE_FIXED_S", [0.25e-3, 0.5e-3, 1e-3, 2e-3, 4e-3], perf.SPEC_CYCLE_FIXED_S,
              lambda v: setattr(perf, "SPEC_CYCLE_FIXED_S", v), lambda p: p.key in spec),
    ]
    attn = {p.key for p in points if p.request is not None and p.request.config.attention_backend}
    for backend in ("flashinfer", "triton"):
        out.append(Param(f"ATTENTION_BACKEND_SPEED[{backend}]", [1.0, 1.25, 1.5, 2.0, 2.5],
                         perf_knobs.ATTENTION_BACKEND_SPEED_SM90[backend],
                         lambda v, b=backend: perf_knobs.ATTENTION_BACKEND_SPEED_SM90.__setitem__(b, v),
                         lambda p: p.key in attn))
    sets_on = {g: {p.set_id for p in points if p.request is not None and _gpu_of(p) == g} for g in gpus}
    for g in [g for g in gpus if len(sets_on[g]) >= MIN_SETS_PER_GPU]:
        row = perf_gpu.GPU_SPEED.get(g, perf_gpu.DEFAULT)
        out.append(Param(f"hbm[{g}]", [0.45, 0.55, 0.65, 0.75, 0.85, 0.92], row.hbm,
                         lambda v, g=g: _set_rows("hbm", v, [g]), lambda p, g=g: _gpu_of(p) == g))
        if per_kind_floor:  # tried and not taken (docs/simulator-speed.md): H100 and H200 came out 6 and 9 us
            out.append(Param(f"kernel_floor_s[{g}]", [3e-6, 4.5e-6, 6e-6, 9e-6, 13e-6], row.kernel_floor_s,
                             lambda v, g=g: _set_rows("kernel_floor_s", v, [g]), lambda p, g=g: _gpu_of(p) == g))
    return out


def _family(point: Any) -> str:
    """The model's family ("mla", "dsa", "mha", ...); an MLA model reads ``is_mla`` too (a DSA one is MLA)."""
    if point.request is None:
        return ""
    prof = offline._profile(point.request.config.model_path)
    fam = str(getattr(prof, "family", "") or "")
    return "mla" if fam != "dsa" and getattr(prof, "is_mla", False) else fam


def _is_moe(point: Any) -> bool:
    return offline._profile(point.request.config.model_path).num_experts > 0


def _is_fp8(point: Any) -> bool:
    return point.request is not None and offline._profile(point.request.config.model_path).quant_method in \
        perf_gpu.FP8_METHODS


def loss(h: Any, points: list[Any]) -> float:
    total = 0.0
    for name, w in WEIGHTS.items():
        errs = [min(abs(math.log(r)), CLIP) ** 2 for p in points if p.modelled and (r := h.ratio(p, name))]
        total += w * (sum(errs) / len(errs) if errs else 0.0)
    effs = [min(abs(math.log(e["modelled"]) - math.log(e["measured"])), CLIP) ** 2 for e in h.effects(points)]
    return total + (sum(effs) / len(effs) if effs else 0.0)


def evaluate(h: Any, points: list[Any], which: Callable[[Any], bool]) -> None:
    offline.clear_cache()
    for p in points:
        if p.request is not None and which(p):
            p.modelled, p.skipped = {}, None
            h.evaluate(p)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-prompts-per-slot", type=int, default=3)
    ap.add_argument("--only", nargs="*", default=None, help="parameter names to fit (default: all)")
    ap.add_argument("--per-kind-floor", action="store_true",
                    help="also fit a kernel floor per GPU kind (after the global one; a second round would overwrite it)")
    args = ap.parse_args(argv)
    h = _harness()
    points, _, _ = h.run(h.DATA, None, args.max_prompts_per_slot, fitted_only=True)
    points = [p for p in points if p.group == "fitted"]
    fitted_sets = sorted({p.set_id for p in points if p.modelled})
    ps = [p for p in params(points, args.per_kind_floor) if not args.only or p.name in args.only]
    best = loss(h, points)
    print(f"fitted points: {sum(1 for p in points if p.modelled)} of {len(fitted_sets)} sets; start loss {best:.4f}")
    for rnd in range(args.rounds):
        for par in ps:
            scores = {}
            for v in par.grid:
                par.apply(v)
                evaluate(h, points, par.scope)
                scores[v] = loss(h, points)
            chosen = min(scores, key=lambda v: (scores[v], abs(v - par.value)))  # ties: the nearest to the start
            par.apply(chosen)
            evaluate(h, points, par.scope)
            print(f"round {rnd + 1} {par.name:<22} " + " ".join(f"{v:g}:{s:.4f}" for v, s in scores.items())
                  + f"  -> {chosen:g}", flush=True)
            par.value, best = chosen, scores[chosen]
    print(f"\nloss {best:.4f}. Fitted constants:")
    for par in ps:
        sets = sorted({p.set_id for p in points if p.modelled and par.scope(p)})
        print(f"  {par.name} = {par.value:g}  (fitted on {len(sets)} sets: {', '.join(sets)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
