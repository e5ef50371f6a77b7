"""What PyTorch alone shows on one GPU, held against the simulated server's speed constants.

The simulated server's decode and prefill speed rests on a few per-kind shares of the datasheet
(``autotune/sim/perf/gpu.py``: ``hbm``, ``gemm``, ``prefill``, ``moe``, ``kernel_floor_s``, ``eager``) and two
fixed costs (``autotune/sim/perf/forward.py``: ``GRAPH_REPLAY_S``, ``EAGER_CPU_PER_LAYER_S``); the memory model
takes the CUDA context from ``autotune/sglang/memory/slack.py`` ``CONTEXT_GIB``. Most of them were *fitted* on
published serving runs (``tests/data/published_speed``), so they hold whatever SGLang adds on top of the
kernels; this script measures the kernels alone on the GPU it runs on and prints each next to its constant.
A fitted share well below what a kernel reaches is not an error in itself: it says how much of the served
step is not that kernel. A share *above* what the kernel reaches is one (the model is faster than the GPU).

Usage (on a GPU node; about a minute on one H100 after PyTorch starts)::

    python benchmarks/gpu_constants.py [--kind h100] [--json PATH]
    python benchmarks/gpu_constants.py --device cpu --kind h100 --quick    # wiring only: CPU figures mean nothing
    PYTHONPATH=. python benchmarks/gpu_constants.py    # a bare GPU node: PyTorch there, autotune not installed

Every figure is **measured** here: the median of ``--reps`` timed runs after warm-up (CUDA events around the
region; wall clock after a synchronize for graph replay and eager launch), the spread as [min, max]. Inputs
rotate over buffers several times the L2 so that no repeat reads the cache, and are random (never zeros).

1. **HBM**: a device-to-device copy (bytes read + written) and a GEMV-shaped weight read (an M = 1 bf16 GEMM
   over a 16384 x 16384 weight): achieved bandwidth as a share of the datasheet's, against ``hbm``.
2. **Decode GEMMs** (bf16, K = N = 8192, M = 1 ... 1024; FP8 with per-tensor scales through
   ``torch._scaled_mm`` where the GPU has FP8 tensor cores): the measured time against the speed model's
   roofline for one GEMM: the larger of the weight read at ``hbm``, the FLOPs at ``gemm`` of the peak
   (``gemm_speed_factor``: FP8's block-scaled path at ``FP8_GEMM_RELATIVE``) and the kernel floor.
3. **Prefill GEMM** (M = N = K = 8192): achieved share of the bf16 (FP8) peak, against ``prefill``.
4. **Routed experts**: DeepSeek-V3's MoE layer on one GPU of TP 8 (256 experts, hidden 7168, 256 of the
   2048 intermediate, top-8, random routing) at decode batch sizes: the bytes of the experts the batch touches
   over the time, as a share of the datasheet bandwidth, against ``hbm x moe``. ``torch._grouped_mm`` where
   this PyTorch and GPU have it, else one GEMM per touched expert replayed from a CUDA graph (the output says
   which). SGLang runs its own Triton fused-MoE kernel, so this is PyTorch's grouped GEMM, not SGLang's.
5. **Small kernels** replayed from a CUDA graph (an add, RMSNorm, SiLU-and-mul, a top-8 over 256 router
   logits, each on a decode batch of 64 rows of 7168): time per op, against ``kernel_floor_s``.
6. **Graph replay**: a one-kernel graph's replay and wait, wall clock, against ``GRAPH_REPLAY_S``.
7. **Eager launch**: the CPU time PyTorch takes to issue one small op, against the model's eager CPU time per
   kernel (``EAGER_CPU_PER_LAYER_S x eager`` over a dense GQA layer's kernels): PyTorch's launch is a floor of
   SGLang's Python path, not all of it.
8. **Context memory**: total - free after the CUDA context and the first cuBLAS GEMM, against ``CONTEXT_GIB``
   (SGLang's figure includes its libraries' workspaces: PyTorch's alone is a floor).

Needs PyTorch (any CUDA build) and this repository importable (installed, or ``PYTHONPATH=.`` from its root); no
other package of autotune's dependencies.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError
from autotune.sglang.hardware.gpus import GpuKind, get_gpu
from autotune.sglang.memory.slack import CONTEXT_GIB, context_class
from autotune.sim.perf.forward import (
    EAGER_CPU_PER_LAYER_S,
    GEMM_KERNELS,
    GRAPH_REPLAY_S,
    SMALL_KERNELS,
)
from autotune.sim.perf.gpu import FP8_GEMM_RELATIVE, gpu_speed

GIB = 2**30
#: Decode batch sizes of the GEMM and expert sweeps (SGLang's CUDA graph ladder spans 1 ... 512 and more).
DECODE_M = (1, 8, 32, 64, 128, 256, 512, 1024)
EXPERT_BATCHES = (1, 8, 32, 128)
#: DeepSeek-V3 (config.json): hidden 7168, 256 routed experts of intermediate 2048, 8 per token; at TP 8 each
#: GPU holds 256 columns of every expert's intermediate.
MOE_HIDDEN, MOE_EXPERTS, MOE_INTER_TP8, MOE_TOPK = 7168, 256, 2048 // 8, 8


@dataclass
class Figure:
    """One comparison: what was measured against the constant it checks (``ratio``: measured / constant for
    shares, modelled / measured for times: above 1 the model is slower than the kernel, below 1 faster)."""

    name: str
    measured: float
    constant: float | None
    ratio: float | None
    unit: str
    checks: str  # which constant, in which file
    spread: tuple[float, float] | None = None
    note: str = ""


@dataclass
class Report:
    device: str
    kind: str
    torch: str
    figures: list[Figure] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    def add(self, fig: Figure) -> None:
        self.figures.append(fig)


# ---- the model's side (no torch) -------------------------------------------------------------------------
def modelled_gemm_s(gpu: GpuKind, m: int, k: int, n: int, *, fp8: bool = False) -> float:
    """The speed model's roofline for one GEMM of ``m`` rows over a ``k x n`` weight on ``gpu``: the larger of
    the weight read at the row's ``hbm`` share, the FLOPs at its ``gemm`` share of this precision's peak, and
    the kernel floor (``forward.Forward``'s ``weight_read_s`` / ``compute_s`` / GEMM floor for one GEMM)."""
    speed = gpu_speed(gpu)
    weight_bytes = k * n * (1 if fp8 else 2)
    read = weight_bytes / (gpu.hbm_tb_s * 1e12 * speed.hbm)
    peak = gpu.bf16_tflops * 1e12 * (2.0 * FP8_GEMM_RELATIVE if fp8 else 1.0)
    compute = 2.0 * m * k * n / (peak * speed.gemm)
    return max(read, compute, speed.kernel_floor_s)


def eager_cpu_per_kernel_s(gpu: GpuKind) -> float:
    """The model's eager CPU launch time per kernel of a dense GQA decoder layer."""
    kernels = SMALL_KERNELS["gqa"] + SMALL_KERNELS["dense"] + GEMM_KERNELS["gqa"] + GEMM_KERNELS["dense"]
    return EAGER_CPU_PER_LAYER_S["dense"] * gpu_speed(gpu).eager / kernels


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def share_figure(name: str, achieved_b_s: float, gpu: GpuKind, constant: float, checks: str,
                 spread: tuple[float, float] | None = None, note: str = "") -> Figure:
    """An achieved bandwidth (B/s) as a share of ``gpu``'s datasheet bandwidth, against ``constant``."""
    share = achieved_b_s / (gpu.hbm_tb_s * 1e12)
    sp = None if spread is None else (spread[0] / (gpu.hbm_tb_s * 1e12), spread[1] / (gpu.hbm_tb_s * 1e12))
    return Figure(name, share, constant, _ratio(share, constant), "share of HBM", checks, sp,
                  note or f"{achieved_b_s / 1e12:.2f} TB/s of {gpu.hbm_tb_s:g}")


def time_figure(name: str, measured_s: float, modelled_s: float, checks: str,
                spread: tuple[float, float] | None = None, note: str = "") -> Figure:
    return Figure(name, measured_s * 1e6, modelled_s * 1e6, _ratio(modelled_s, measured_s), "us", checks,
                  None if spread is None else (spread[0] * 1e6, spread[1] * 1e6), note)


def table(report: Report) -> str:
    lines = [f"{report.device} as catalogue kind {report.kind!r}; torch {report.torch}",
             f"{'figure':44} {'measured':>10} {'constant':>10} {'ratio':>6}  unit / checks"]
    for f in report.figures:
        const = "-" if f.constant is None else f"{f.constant:.4g}"
        ratio = "-" if f.ratio is None else f"{f.ratio:.2f}"
        sp = "" if f.spread is None else f" [{f.spread[0]:.4g}, {f.spread[1]:.4g}]"
        lines.append(f"{f.name:44} {f.measured:>10.4g} {const:>10} {ratio:>6}  {f.unit}{sp}; {f.checks}"
                     + (f"; {f.note}" if f.note else ""))
    lines.append("ratio: measured / constant for shares and memory; modelled / measured for times "
                 "(< 1: the model is faster than the kernel alone)")
    return "\n".join(lines)


# ---- the GPU's side (torch) --------------------------------------------------------------------------------
class Bench:
    """Timing on one device: CUDA events (or a synchronized wall clock on CPU), median of ``reps``."""

    def __init__(self, torch: Any, device: str, reps: int, quick: bool) -> None:
        self.torch, self.device, self.reps, self.quick = torch, device, reps, quick
        self.cuda = device.startswith("cuda")

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def time(self, fn: Callable[[int], Any], warmup: int = 3) -> tuple[float, tuple[float, float]]:
        """Median seconds of ``fn(i)`` over ``reps`` calls (``i`` picks the rotated buffer), and [min, max]."""
        for i in range(warmup):
            fn(i)
        self.sync()
        samples = []
        for i in range(self.reps):
            if self.cuda:
                start = self.torch.cuda.Event(enable_timing=True)
                end = self.torch.cuda.Event(enable_timing=True)
                start.record()
                fn(i)
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                fn(i)
                samples.append(time.perf_counter() - t0)
        return statistics.median(samples), (min(samples), max(samples))

    def wall(self, fn: Callable[[], Any], inner: int) -> tuple[float, tuple[float, float]]:
        """Median wall seconds per call of ``fn`` (``inner`` calls per sample, then a synchronize)."""
        fn()
        self.sync()
        samples = []
        for _ in range(self.reps):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            self.sync()
            samples.append((time.perf_counter() - t0) / inner)
        return statistics.median(samples), (min(samples), max(samples))

    def rotation(self, bytes_each: int, floor_bytes: int) -> int:
        """How many copies of a ``bytes_each`` input keep the rotation above ``floor_bytes`` (L2 several times)."""
        return max(1, math.ceil(floor_bytes / max(bytes_each, 1)))

    def randn(self, *shape: int, dtype: Any = None) -> Any:
        return self.torch.randn(*shape, device=self.device, dtype=dtype or self.torch.bfloat16)


def l2_floor(torch: Any, device: str) -> int:
    """Bytes a rotation must exceed: four times the L2 (50 MB on H100, 60 MB on H200) or 256 MiB."""
    if device.startswith("cuda"):
        l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 0)
        return max(4 * l2, 256 * 2**20)
    return 64 * 2**20


def measure_hbm(b: Bench, gpu: GpuKind, report: Report) -> None:
    torch = b.torch
    n = (64 if b.quick else 1024) * 2**20  # elements: 2 GiB of bf16 per buffer on a GPU
    src, dst = b.randn(n), torch.empty(n, device=b.device, dtype=torch.bfloat16)
    t, sp = b.time(lambda i: dst.copy_(src))
    moved = 2 * n * 2
    row = gpu_speed(gpu)
    report.add(share_figure("HBM: device-to-device copy", moved / t, gpu, row.hbm,
                            "gpu.py hbm", (moved / sp[1], moved / sp[0]), "bytes read + written"))
    side = 4096 if b.quick else 16384
    copies = b.rotation(side * side * 2, l2_floor(torch, b.device))
    ws = [b.randn(side, side) for _ in range(copies)]
    x = b.randn(1, side)
    t, sp = b.time(lambda i: x @ ws[i % copies])
    w_bytes = side * side * 2
    report.add(share_figure("HBM: GEMV weight read (M=1 bf16)", w_bytes / t, gpu, row.hbm, "gpu.py hbm",
                            (w_bytes / sp[1], w_bytes / sp[0]), f"{side}x{side} weight, {copies} rotated"))
    report.raw["hbm"] = {"copy_s": t, "gemv_side": side}


def measure_gemms(b: Bench, gpu: GpuKind, report: Report) -> None:
    torch = b.torch
    k = n = 2048 if b.quick else 8192
    copies = b.rotation(k * n * 2, l2_floor(torch, b.device))
    ws = [b.randn(k, n) for _ in range(copies)]
    raw: dict[str, Any] = {}
    for m in DECODE_M:
        x = b.randn(m, k)
        t, sp = b.time(lambda i, x=x: x @ ws[i % copies])
        model = modelled_gemm_s(gpu, m, k, n)
        raw[f"bf16_m{m}"] = t
        report.add(time_figure(f"decode GEMM bf16 M={m} ({k}x{n})", t, model, "roofline: hbm, gemm, floor", sp))
    m = 1024 if b.quick else 8192
    x = b.randn(m, k)
    t, sp = b.time(lambda i: x @ ws[i % copies])
    flops = 2.0 * m * k * n
    share = flops / t / (gpu.bf16_tflops * 1e12)
    row = gpu_speed(gpu)
    report.add(Figure(f"prefill GEMM bf16 M={m}", share, row.prefill, _ratio(share, row.prefill),
                      "share of bf16 peak", "gpu.py prefill", note=f"{flops / t / 1e12:.0f} TFLOP/s "
                      f"of {gpu.bf16_tflops:g}; gemm share {row.gemm}"))
    raw[f"bf16_m{m}"] = t
    fp8 = getattr(torch, "float8_e4m3fn", None)
    if not b.cuda or fp8 is None or not hasattr(torch, "_scaled_mm") or torch.cuda.get_device_capability(0) < (8, 9):
        report.raw["gemm"] = raw
        return
    one = torch.ones((), device=b.device, dtype=torch.float32)
    wq = [w.to(fp8).t().contiguous().t() for w in ws]  # column-major B, as _scaled_mm wants
    for m in (16, 64, 512, 1024 if b.quick else 8192):  # _scaled_mm: M a multiple of 16
        xq = b.randn(m, k).to(fp8)
        t, sp = b.time(lambda i, xq=xq: torch._scaled_mm(xq, wq[i % copies], one, one, out_dtype=torch.bfloat16))
        raw[f"fp8_m{m}"] = t
        report.add(time_figure(f"GEMM fp8 per-tensor M={m}", t, modelled_gemm_s(gpu, m, k, n, fp8=True),
                               "roofline at FP8_GEMM_RELATIVE", sp,
                               "torch._scaled_mm; SGLang's block-FP8 path is another kernel"))
    bf16_big, fp8_big = raw[f"bf16_m{m}"], raw[f"fp8_m{m}"]
    report.add(Figure("FP8 / BF16 speed at prefill size", bf16_big / fp8_big, 2.0 * FP8_GEMM_RELATIVE,
                      _ratio(bf16_big / fp8_big, 2.0 * FP8_GEMM_RELATIVE), "x", "gpu.py FP8_GEMM_RELATIVE x 2"))
    report.raw["gemm"] = raw


def _route(torch: Any, tokens: int, gen: Any, device: str) -> tuple[Any, Any, int]:
    """Random top-k routing of ``tokens`` tokens: the token index of every routed copy sorted by expert, the
    rows per expert, and how many experts were touched."""
    scores = torch.rand(tokens, MOE_EXPERTS, generator=gen)
    experts = scores.topk(MOE_TOPK, dim=1).indices.flatten()
    order = torch.argsort(experts, stable=True)
    token_of = (order // MOE_TOPK).to(device)
    counts = torch.bincount(experts, minlength=MOE_EXPERTS)
    return token_of, counts, int((counts > 0).sum())


def measure_experts(b: Bench, gpu: GpuKind, report: Report) -> None:
    torch = b.torch
    hidden, inter = (1024, 128) if b.quick else (MOE_HIDDEN, MOE_INTER_TP8)
    w1 = b.randn(MOE_EXPERTS, 2 * inter, hidden)  # gate_up, [E, N, K] (K-major, as the grouped GEMM wants it)
    w2 = b.randn(MOE_EXPERTS, hidden, inter)  # down
    per_expert = (hidden * 2 * inter + inter * hidden) * 2
    gen = torch.Generator().manual_seed(0)
    silu = torch.nn.functional.silu

    def per_expert_body(rows: Any, spans: list[tuple[int, int, int]]) -> Callable[[], Any]:
        def body() -> Any:
            outs = []
            for e, s, c in spans:
                h = rows[s:s + c] @ w1[e].t()
                outs.append((silu(h[:, :inter]) * h[:, inter:]) @ w2[e].t())
            return torch.cat(outs)
        return body

    def grouped_body(rows: Any, offs: Any) -> Callable[[], Any]:
        def body() -> Any:
            h = torch._grouped_mm(rows, w1.transpose(-2, -1), offs=offs)
            return torch._grouped_mm(silu(h[:, :inter]) * h[:, inter:], w2.transpose(-2, -1), offs=offs)
        return body

    grouped = hasattr(torch, "_grouped_mm") and (not b.cuda or torch.cuda.get_device_capability(0) >= (9, 0))
    raw: dict[str, Any] = {}
    row = gpu_speed(gpu)
    for tokens in EXPERT_BATCHES:
        token_of, counts, touched = _route(torch, tokens, gen, b.device)
        rows = b.randn(tokens, hidden)[token_of]
        starts = (torch.cumsum(counts, 0) - counts).tolist()
        spans = [(e, int(s), int(c)) for e, (s, c) in enumerate(zip(starts, counts.tolist(), strict=True)) if c > 0]
        loop = per_expert_body(rows, spans)
        body, how = loop, "one GEMM per touched expert"
        if grouped:
            try:  # checked against the per-expert loop before it is timed (bf16: within 2 %)
                offs = torch.cumsum(counts, 0).to(device=b.device, dtype=torch.int32)
                cand = grouped_body(rows, offs)
                ref, got = loop().float(), cand().float()
                err = float((got - ref).norm() / ref.norm())
                if not err < 2e-2:
                    raise ValueError(f"relative error {err:.3g} against the per-expert loop")
                body, how = cand, "torch._grouped_mm"
            except Exception as exc:  # noqa: BLE001 (any failure: the loop is timed instead, and says why)
                raw[f"grouped_mm_t{tokens}"] = f"not used: {type(exc).__name__}: {exc}"[:300]
        run, mode = _replayed(b, body)
        how = f"{how}, {mode}" if b.cuda else how
        t, sp = b.time(run)
        read = touched * per_expert
        raw[f"t{tokens}"] = {"s": t, "touched": touched, "how": how}
        report.add(share_figure(f"routed experts, {tokens} token(s) ({touched} touched)", read / t, gpu,
                                row.hbm * row.moe, "gpu.py hbm x moe", (read / sp[1], read / sp[0]), how))
    report.raw["experts"] = raw


def _graphed(b: Bench, body: Callable[[], Any]) -> Callable[[int], Any]:
    """``body`` captured once in a CUDA graph; the returned callable replays it."""
    torch = b.torch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            body()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return lambda _i: graph.replay()


def _replayed(b: Bench, body: Callable[[], Any]) -> tuple[Callable[[int], Any], str]:
    """``body`` as timed: replayed from a CUDA graph on a GPU (eager where the capture fails, saying why; on a
    CPU, eager), and how."""
    if not b.cuda:
        return (lambda _i: body()), "eager"
    try:
        return _graphed(b, body), "graph-replayed"
    except Exception as exc:  # noqa: BLE001 (timed eagerly instead; the figure says so)
        b.sync()
        return (lambda _i: body()), f"eager: graph capture failed ({type(exc).__name__}: {str(exc)[:120]})"


def measure_small_kernels(b: Bench, gpu: GpuKind, report: Report) -> None:
    torch = b.torch
    f = torch.nn.functional
    x, y = b.randn(64, MOE_HIDDEN), b.randn(64, MOE_HIDDEN)
    gate = b.randn(64, 2 * 2048)
    logits = b.randn(64, MOE_EXPERTS, dtype=torch.float32)
    weight = b.randn(MOE_HIDDEN)
    out = torch.empty_like(x)
    ops: dict[str, Callable[[], Any]] = {
        "add": lambda: torch.add(x, y, out=out),
        "rms_norm": lambda: f.rms_norm(x, (MOE_HIDDEN,), weight),
        "silu_and_mul": lambda: f.silu(gate[:, :2048]) * gate[:, 2048:],
        "top-8 of 256": lambda: logits.topk(8, dim=1),
    }
    floor = gpu_speed(gpu).kernel_floor_s
    inner = 10 if b.quick else 100
    raw = {}
    for name, op in ops.items():
        def body(op: Callable[[], Any] = op) -> None:
            for _ in range(inner):
                op()
        run, mode = _replayed(b, body)
        t, sp = b.time(run)
        raw[name] = t / inner
        report.add(time_figure(f"small op ({mode.split(':')[0]}): {name}", t / inner, floor, "gpu.py kernel_floor_s",
                               (sp[0] / inner, sp[1] / inner), f"64 x 7168 decode rows; one op may be several kernels; "
                               f"{mode}"))
    report.raw["small_ops_s"] = raw


def measure_launch(b: Bench, gpu: GpuKind, report: Report) -> None:
    x = b.randn(64, 64)
    if b.cuda:
        replay = _graphed(b, lambda: x.add_(1.0))
        t, sp = b.wall(lambda: replay(0), inner=1)
        report.add(time_figure("graph replay, one kernel, + wait", t, GRAPH_REPLAY_S, "forward.py GRAPH_REPLAY_S",
                               sp, "wall clock per replay and synchronize"))
    inner = 1000
    t, sp = b.wall(lambda: x.add_(1.0), inner=inner)  # issued back to back: the CPU's launch rate
    report.add(time_figure("eager: one small op issued", t, eager_cpu_per_kernel_s(gpu),
                           "forward.py EAGER_CPU_PER_LAYER_S x eager / kernels", sp,
                           "PyTorch's launch alone; SGLang's Python path adds to it"))


def context_first(torch: Any) -> float:
    """Total - free right after the CUDA context and one cuBLAS GEMM, before any buffer of the script."""
    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    del a
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    return (total - free) / GIB


def _error(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def _memory_mib(torch: Any) -> int:
    """The GPU's memory as nvidia-smi prints it (what the catalogue holds), else PyTorch's total."""
    exe = shutil.which("nvidia-smi")
    if exe:
        try:
            out = subprocess.run([exe, "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"],
                                 capture_output=True, text=True, timeout=30, check=True).stdout
            return int(out.split()[0])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            pass
    return int(torch.cuda.get_device_properties(0).total_memory // 2**20)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (a wiring check only)")
    ap.add_argument("--kind", help="the catalogue kind to compare with (default: the GPU's own, from its name)")
    ap.add_argument("--reps", type=int, default=20, help="timed runs per figure (default 20)")
    ap.add_argument("--quick", action="store_true", help="small sizes (a wiring check)")
    ap.add_argument("--json", type=Path, help="write every figure and raw timing here")
    args = ap.parse_args(argv)
    cuda = args.device.startswith("cuda")
    if args.device != "cpu" and not cuda:
        return _error(f"--device: cuda or cpu (got {args.device!r})")
    if args.reps < 1 or args.reps > 10_000:
        return _error(f"--reps: 1 to 10000 (got {args.reps})")
    if not cuda and args.kind is None:
        return _error("--kind: needed with --device cpu (which catalogue kind to compare with)")
    try:
        gpu = get_gpu(args.kind) if args.kind is not None else None
    except AutotuneError as exc:
        return _error(f"--kind: {exc}")
    try:
        import torch
    except ImportError as exc:
        return _error(f"PyTorch is needed here and could not be imported ({exc})")
    if cuda and not torch.cuda.is_available():
        return _error("--device cuda: no CUDA device is visible to PyTorch")
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    if gpu is None:
        from autotune.node.auto import catalogue_name

        kind = catalogue_name(name, _memory_mib(torch))
        if kind is None:
            return _error(f"--kind: {name!r} is not in the GPU catalogue; name the kind to compare with")
        gpu = get_gpu(kind)
    torch.manual_seed(0)
    report = Report(name, gpu.name, torch.__version__)
    bench = Bench(torch, args.device, args.reps, args.quick)
    t0 = time.monotonic()
    if bench.cuda:
        props = torch.cuda.get_device_properties(0)
        report.raw["device"] = {"name": name, "capability": list(torch.cuda.get_device_capability(0)),
                                "multiprocessors": props.multi_processor_count,
                                "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0),
                                "total_bytes": props.total_memory, "cuda": torch.version.cuda}
        report.raw["context_first_gib"] = context_first(torch)
        const = CONTEXT_GIB.get(context_class(gpu), CONTEXT_GIB["other"])[0]
        report.add(Figure("memory used: CUDA context + cuBLAS", report.raw["context_first_gib"], const,
                          _ratio(report.raw["context_first_gib"], const), "GiB",
                          f"slack.py CONTEXT_GIB[{context_class(gpu)!r}]",
                          note="SGLang's figure adds its libraries' workspaces"))
    failed = []
    for step in (measure_hbm, measure_gemms, measure_experts, measure_small_kernels, measure_launch):
        try:  # one step that breaks on this GPU or PyTorch must not cost the others (a lease is short)
            step(bench, gpu, report)
        except Exception as exc:  # noqa: BLE001 (reported, and the exit code says so)
            failed.append(step.__name__)
            report.raw[f"{step.__name__}_error"] = f"{type(exc).__name__}: {exc}"[:500]
            print(f"{step.__name__} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        if bench.cuda:
            torch.cuda.empty_cache()
    report.raw["elapsed_s"] = time.monotonic() - t0
    print(table(report))
    print(f"{len(report.figures)} figures in {report.raw['elapsed_s']:.1f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(asdict(report), indent=1, default=str))
    if failed:
        print(f"failed steps: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["Figure", "Report", "eager_cpu_per_kernel_s", "modelled_gemm_s", "share_figure", "table", "main"]
