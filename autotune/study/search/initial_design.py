"""Designed starting points: what the search launches right after the baseline.

Optuna's samplers start from random draws (TPE: 8 of them). A designed start spends
those launches where they say the most:

1. **Memory boundaries** (the largest predicted KV pool first while the workload's live
   tokens do not fit it). ``mem_fraction_static`` has monotone feasibility for fixed
   other knobs: below the lowest feasible f the KV pool formula goes negative
   (``rest = A - P x (1 - f)``), above the highest one the slack left for CUDA graphs
   and activations is too small. Both edges are found by bisection on the memory
   model's verdict (no launch), so the interval costs ~2 log2(steps) predictions per
   CUDA-graph size. The highest ``fits`` f (largest KV pool that keeps the slack the
   model asks for) is launched for the graph size that covers the workload's decode batch
   (:func:`graph_size_for`), the smallest and the largest ``cuda_graph_max_bs``, and for every other ``kv_cache_dtype`` of the space.
   A searched flag or variable the knob catalogue gives a memory effect gets a boundary per
   other value where its window is not the baseline's own (DP attention: at the graph size that
   covers a rank's decode batch). On the demo, the optimum lies in DP attention 8's narrow window
   (f 0.91-0.93 at graph bs 64); sampling alone found it in 6 of 10 seeds, with this boundary in
   20 of 20 (``benchmarks/warm_start.py``'s demo check).
2. **One speculative probe per algorithm**, first of all: the baseline's boundary point
   with that algorithm at the settings SGLang picks for the architecture, so the data says at once whether the
   "speculative decoding after the base knobs" prior holds (see
   :mod:`autotune.study.search.policy`; a probe that fails is taken again on the best base
   measured, once the boundaries below are; at a small decode batch a probe that ran is followed
   by its chain one step deeper: ``SearchPolicy._spec_step``).
   When the workload's live tokens (concurrency x (input + output)) do not fit the
   baseline's KV pool at its largest f, the ``kv_cache_dtype`` of the space that holds the
   most tokens there is used instead.
3. **A space-filling set**: scrambled Sobol points over the base knobs, with f mapped
   into each point's predicted-feasible interval, so no designed launch is a predicted OOM.

Every point is snapped to the space (stepped floats, choices) and de-duplicated.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autotune import space
from autotune.spec import (
    BoolChoices,
    FloatRange,
    IntChoices,
    IntRange,
    StrChoices,
    StudySpec,
    parse_layout,
)

#: The memory model's verdict for one candidate's params (a Prediction as a dict).
Predictor = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class DesignPoint:
    params: dict[str, Any]
    why: str  # "boundary", "speculative probe", "space-filling"


def design_size(n_trials: int, requested: int | None) -> int:
    """Designed points after the baseline: a fifth of the budget, 3 to 10 (``requested`` wins)."""
    if requested is not None:
        return requested
    return max(3, min(10, n_trials // 5))


def _axis_values(dom: Any) -> list[Any]:
    """The axis's values the design picks from: all of them, or (an axis of more than
    :data:`~autotune.limits.GRID_AXIS`: a range with a tiny step) that many evenly spaced over it."""
    if isinstance(dom, FloatRange) and dom.step is None:
        return [dom.low, (dom.low + dom.high) / 2, dom.high]
    return space.sample_values(dom)


def base_axes(spec: StudySpec) -> dict[str, list[Any]]:
    """Every non-speculative knob of the space with its values (floats stepped), the node layout
    (``tp4-dp2``) first when the space searches it, and the flags and environment variables the
    space searches by name: a designed point sets them too (at the baseline's values unless the
    design varies them), or the sampler would fill them in after the memory model judged the
    point without them (DP attention, say, changes what fits)."""
    sp = spec.search_space
    out: dict[str, list[Any]] = {}
    if sp.layout is not None:
        out["layout"] = list(sp.layout.choices)
    for name in ("mem_fraction_static", "cuda_graph_max_bs", "custom_allreduce", *space._SIMPLE_KNOBS):
        dom = getattr(sp, name)
        if isinstance(dom, (FloatRange, IntRange, IntChoices, BoolChoices, StrChoices)):
            out[name] = _axis_values(dom)
    for named in (sp.flags, sp.env):
        out.update({name: list(dom.choices) for name, dom in named.items()})
    return out


def _memory_field(name: str) -> str | None:
    """The catalogue's field of the searched flag or variable ``name`` when it has a memory effect."""
    from autotune.sglang.knobs import catalogue

    knob = catalogue.lookup(name)
    return (knob.field or knob.name) if knob is not None and knob.reads_memory else None


def _feasible(pred: dict[str, Any], strict: bool) -> bool:
    if strict:
        return pred.get("verdict") == "fits"
    return not pred.get("should_prune", False)


def f_interval(fs: list[float], feasible: Callable[[float], bool]) -> tuple[int, int] | None:
    """Indices (lo, hi) of the feasible run of the sorted ``fs``, by bisection on each edge.

    Assumes monotone feasibility on each side of a feasible point (KV pool grows with f,
    slack shrinks with f). A feasible anchor is looked for coarse to fine (the middle, then
    the quarters, the eighths, ...), so a window of w values costs about n / w probes."""
    n = len(fs)
    if n == 0:
        return None
    anchor = next((i for i in _coarse_to_fine(n) if feasible(fs[i])), None)
    if anchor is None:
        return None
    lo_bad, lo_ok = -1, anchor  # lowest feasible index in (lo_bad, lo_ok]
    while lo_ok - lo_bad > 1:
        mid = (lo_bad + lo_ok) // 2
        if feasible(fs[mid]):
            lo_ok = mid
        else:
            lo_bad = mid
    hi_ok, hi_bad = anchor, n  # highest feasible index in [hi_ok, hi_bad)
    while hi_bad - hi_ok > 1:
        mid = (hi_ok + hi_bad) // 2
        if feasible(fs[mid]):
            hi_ok = mid
        else:
            hi_bad = mid
    return lo_ok, hi_ok


def _coarse_to_fine(n: int) -> list[int]:
    """Indices 0..n-1, the middle first, then each halving's midpoints."""
    order: list[int] = []
    seen: set[int] = set()
    parts = 2
    while len(order) < n:
        for k in range(1, parts, 2):
            i = min(n - 1, (k * n) // parts)
            if i not in seen:
                seen.add(i)
                order.append(i)
        parts *= 2
        if parts > 4 * n:
            order.extend(i for i in range(n) if i not in seen)
            break
    return order


def _sobol(dims: int, n: int, seed: int | None) -> list[list[float]]:
    if dims == 0 or n <= 0:
        return []
    from scipy.stats import qmc

    m = max(1, math.ceil(math.log2(max(2, n))))
    pts = qmc.Sobol(d=dims, scramble=True, seed=seed).random_base2(m)
    return [list(map(float, p)) for p in pts[:n]]


def _spec_probe(spec: StudySpec, algo: str, architecture: str | None = None) -> dict[str, Any]:
    """The settings SGLang itself picks for ``algo`` on this architecture when only the algorithm
    is given (``auto_choose_speculative_params`` in its server_args.py:
    :func:`autotune.sglang.defaults.auto_speculative_params`, e.g. 3 steps, top-k 1, 4 draft
    tokens for DeepSeek-V3-class models), snapped to the space: the maintainers' tuned default
    is a better first guess than the middle of whatever range the user wrote (topk 1, the chain
    form, where the space allows it and the default is not tree-shaped)."""
    from autotune.sglang.defaults import auto_speculative_params

    sp = spec.search_space.speculative
    out: dict[str, Any] = {"speculative_algorithm": algo}
    if sp is None:
        return out
    steps0, topk0, draft0 = auto_speculative_params(algo, architecture or "")
    if algo == "NGRAM":
        if sp.num_draft_tokens is not None:
            out["speculative_num_draft_tokens"] = space.nearest_value(sp.num_draft_tokens, draft0)
        return out
    if sp.num_steps is None:
        return out
    steps = space.nearest_value(sp.num_steps, steps0)
    topk = space.nearest_value(sp.eagle_topk, topk0) if sp.eagle_topk is not None else 1
    out.update(speculative_num_steps=steps, speculative_eagle_topk=topk)
    if topk == 1:
        out["speculative_num_draft_tokens"] = steps + 1
    elif sp.num_draft_tokens is not None:
        out["speculative_num_draft_tokens"] = space.nearest_value(sp.num_draft_tokens, draft0)
    return out


def decode_batch(spec: StudySpec, max_running: Any = None, layout: str | None = None, attn_dp: int = 1) -> int:
    """Running requests per rank at the workload's highest concurrency: ceil(concurrency / (dp_size x
    attn_dp)), with the dp of ``layout`` when given, capped by a running-request limit when one is set."""
    dp = parse_layout(layout)[1] if layout else spec.server.dp_size
    batch = math.ceil(max(spec.workload.concurrency) / max(1, dp * attn_dp))
    if isinstance(max_running, int) and max_running > 0:
        batch = min(batch, max_running)
    return batch


def graph_size_for(spec: StudySpec, sizes: list[Any], max_running: Any = None, layout: str | None = None,
                   attn_dp: int = 1) -> Any:
    """The design's ``cuda_graph_max_bs``: the smallest size of the space that covers a rank's
    decode batch at the workload's concurrency (ceil(concurrency / (dp_size x attn_dp)), with the dp
    of ``layout`` when given; DP attention's ranks capture their graphs for their own batch; capped by
    the running-request limit when the design sets one), else the largest. SGLang replays a captured
    graph only for batches up to the size; a smaller size runs the larger batches eagerly, a larger
    one captures graphs (time at every launch, and memory) that are never replayed."""
    batch = decode_batch(spec, max_running, layout, attn_dp)
    ordered = sorted(sizes)
    return next((v for v in ordered if v >= batch), ordered[-1])


def _tokens(pred: dict[str, Any]) -> int:
    """KV tokens of the whole server (every DP rank and ``--dp-size`` replica): what the workload's
    live tokens (:func:`kv_demand`, over all replicas) are compared with. Where the family's rule varies
    by build (``kv_range``) the low end counts: the top is not known to hold anything until a launch."""
    server = int(pred.get("server_kv_tokens") or pred.get("kv_tokens") or 0)
    if pred.get("kv_range") and pred.get("kv_tokens"):
        low = pred.get("kv_tokens_low")
        return int(server * (low or 0) / int(pred["kv_tokens"]))
    return server


def kv_demand(spec: StudySpec) -> int:
    """KV tokens the workload keeps live at its highest concurrency (every request's prompt and output)."""
    wl = spec.workload
    return max(wl.concurrency) * (wl.input_len + wl.output_len)


def build(spec: StudySpec, baseline: dict[str, Any], predict: Predictor, n: int,
          seed: int | None = 0, architecture: str | None = None) -> list[DesignPoint]:
    """Up to ``n`` designed points (module docstring), best-informed first.

    ``spec`` is the study's own search space; ``baseline`` trial 0's params;
    ``predict(params)`` the memory model's verdict.

    Space-filling points draw f from the part of the feasible interval whose predicted KV
    pool holds the workload's live tokens (:func:`kv_demand`; the KV pool grows with f, so
    that edge is bisected too): below it requests queue for KV space, throughput collapses
    and, with a fixed number of prompts, the launch also runs longest.

    In steps (:class:`_Design`): the base point, the KV cache dtype that holds the most when
    the base's does not hold the demand, the variants that move the memory boundary, their
    boundaries (largest pool first), a speculative probe per algorithm before them, then the
    space-filling points."""
    if n <= 0:
        return []
    design = _Design(spec, baseline, predict, n)
    design.widest_kv_dtype()
    design.add_boundaries(design.boundaries(design.variants()), architecture)
    design.fill(seed)
    return design.points


def _base_point(spec: StudySpec, axes: dict[str, list[Any]], baseline: dict[str, Any]) -> dict[str, Any]:
    """The baseline on the study's axes. Its automatic values (max_running_requests 2048, ...) are
    SGLang's, not the user's: a knob whose baseline value is not one of the study's own choices starts
    mid-range; the graph size is the one that covers the workload's decode batch."""
    base = {k: v for k, v in baseline.items() if k in axes and (k == "mem_fraction_static" or v in axes[k])}
    for k, vals in axes.items():
        base.setdefault(k, vals[len(vals) // 2])
    if "cuda_graph_max_bs" in axes:
        base["cuda_graph_max_bs"] = graph_size_for(spec, axes["cuda_graph_max_bs"], base.get("max_running_requests"),
                                                   base.get("layout"))
    return base


class _Design:
    """One design under way: the study's axes and base point, the memory model's verdicts (each
    candidate predicted once), and the points chosen so far (de-duplicated, the baseline excluded)."""

    def __init__(self, spec: StudySpec, baseline: dict[str, Any], predict: Predictor, n: int) -> None:
        self.spec, self.predict, self.n = spec, predict, n
        self.axes = base_axes(spec)
        self.base = _base_point(spec, self.axes, baseline)
        self.fs = sorted(self.axes.get("mem_fraction_static", []))
        self.cache: dict[str, dict[str, Any]] = {}
        self.demand = kv_demand(spec)
        self.points: list[DesignPoint] = []
        self.seen = {json.dumps(baseline, sort_keys=True, default=str)}
        self.spec_none: dict[str, Any] = \
            {"speculative_algorithm": "none"} if spec.search_space.speculative is not None else {}
        self.bs_vals: list[Any] = self.axes.get("cuda_graph_max_bs", [None])

    # ---- the memory model, and the points -----------------------------------------------
    def verdict(self, params: dict[str, Any]) -> dict[str, Any]:
        key = json.dumps(params, sort_keys=True, default=str)
        if key not in self.cache:
            self.cache[key] = self.predict(params)
        return self.cache[key]

    def interval(self, others: dict[str, Any]) -> tuple[float, float] | None:
        """The feasible f of ``others`` (``fits``; else not pruned), as (lowest, highest)."""
        fs = self.fs
        if not fs:
            return None
        for strict in (True, False):
            def ok(f: float, strict: bool = strict) -> bool:
                return _feasible(self.verdict({**others, "mem_fraction_static": f}), strict)

            got = f_interval(fs, ok)
            if got is not None:
                return fs[got[0]], fs[got[1]]
        return None

    def roomy(self, others: dict[str, Any], iv: tuple[float, float]) -> tuple[float, float]:
        """``iv`` with its low edge raised to the first f whose KV pool holds the demand."""
        fs = self.fs
        lo, hi = fs.index(iv[0]), fs.index(iv[1])

        def enough(i: int) -> bool:
            return _tokens(self.verdict({**others, "mem_fraction_static": fs[i]})) >= self.demand

        if not enough(hi):
            return iv
        bad, ok = lo - 1, hi
        while ok - bad > 1:
            mid = (bad + ok) // 2
            if enough(mid):
                ok = mid
            else:
                bad = mid
        return fs[ok], iv[1]

    def add(self, params: dict[str, Any], why: str) -> None:
        key = json.dumps(params, sort_keys=True, default=str)
        if key not in self.seen and len(self.points) < self.n:
            self.seen.add(key)
            self.points.append(DesignPoint(params, why))

    # ---- the steps ------------------------------------------------------------------------
    def widest_kv_dtype(self) -> None:
        """When the workload's live tokens do not fit the base's KV pool even at its largest f, the KV
        cache dtype (when the space has it) that holds the most tokens is the design's base."""
        axes, base = self.axes, self.base
        if not (self.fs and len(axes.get("kv_cache_dtype", [])) > 1):
            return

        def top_tokens(dtype: Any) -> int:
            others = {**base, **self.spec_none, "kv_cache_dtype": dtype}
            iv = self.interval(others)
            if iv is None:
                return -1
            return _tokens(self.verdict({**others, "mem_fraction_static": iv[1]}))

        if top_tokens(base.get("kv_cache_dtype")) < self.demand:
            base["kv_cache_dtype"] = max(axes["kv_cache_dtype"], key=top_tokens)

    def variants(self) -> list[dict[str, Any]]:
        """What moves the memory boundary, each a change to the base: the baseline's, the smallest and
        the largest graph size; every other node layout right after the baseline's, then every other
        KV cache dtype; a searched flag or variable with a memory effect, per value."""
        axes, base, bs_vals = self.axes, self.base, self.bs_vals
        bs_pick = [b for b in dict.fromkeys([base.get("cuda_graph_max_bs"), bs_vals[0], bs_vals[-1]])
                   if b is not None] or [None]
        # ... and at the baseline's graph size, for every other KV cache dtype of the space: the cell
        # size moves the whole feasible interval and what the pool holds (and a narrower cell is less
        # to read per decoded token), a bigger change than the graph size, so it comes second.
        # The node layout (when searched) moves everything at once: per-GPU weights, so the feasible
        # interval and the pool, the replica's decode batch (so its graph size) and the allreduce
        # cost; every other layout's boundary comes right after the baseline's, before the dtypes.
        variants = [{"cuda_graph_max_bs": bs} if bs is not None else {} for bs in bs_pick]
        dtypes = [d for d in axes.get("kv_cache_dtype", []) if d != base.get("kv_cache_dtype")]
        variants[1:1] = [{**variants[0], "kv_cache_dtype": d} for d in dtypes]
        layouts = [lay for lay in axes.get("layout", []) if lay != base.get("layout")]
        variants[1:1] = [{**variants[0], "layout": lay,
                          **({"cuda_graph_max_bs": graph_size_for(self.spec, bs_vals, base.get("max_running_requests"),
                                                                  lay)}
                             if "cuda_graph_max_bs" in axes else {})}
                         for lay in layouts]
        self._memory_variants(variants, len(layouts))
        return variants

    def _memory_variants(self, variants: list[dict[str, Any]], n_layouts: int) -> None:
        """A searched flag or variable whose value moves the memory regime (DP attention: weights kept whole
        per attention-TP group, a KV pool per rank, SGLang's padding reserve) has a feasible window of its
        own, often narrow and at another graph size: each such value gets its boundary too, at the first
        graph size where it has one: for DP attention the size that covers a rank's decode batch
        (concurrency / attention-DP size: graphs are captured per rank), then the baseline's, then
        ascending. A value whose window is the baseline's own (a small buffer) adds nothing a sampler
        would not find. Inserted after the layouts' variants."""
        spec, axes, base, bs_vals = self.spec, self.axes, self.base, self.bs_vals
        base_iv = self.interval({**base, **variants[0], **self.spec_none}) if self.fs else None
        for name in (*spec.search_space.flags, *spec.search_space.env):
            field = _memory_field(name)
            if field is None:
                continue
            for value in axes.get(name, []):
                if value == base.get(name):
                    continue
                sizes: list[Any] = [variants[0].get("cuda_graph_max_bs"), *sorted(b for b in bs_vals if b is not None)]
                if field == "attn_dp_size" and isinstance(value, int) and value > 1 and "cuda_graph_max_bs" in axes:
                    sizes.insert(0, graph_size_for(spec, bs_vals, base.get("max_running_requests"), base.get("layout"),
                                                   attn_dp=value))
                for bs in dict.fromkeys(sizes):
                    moved = {**variants[0], name: value, **({"cuda_graph_max_bs": bs} if bs is not None else {})}
                    iv = self.interval({**base, **moved, **self.spec_none})
                    if iv is not None:
                        if iv != base_iv or bs != variants[0].get("cuda_graph_max_bs"):
                            variants.insert(1 + n_layouts, moved)
                        break

    def boundaries(self, variants: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each variant at the highest f that fits (the largest KV pool that keeps the slack), the largest
        pool first while the workload's live tokens do not fit it."""
        boundaries: list[dict[str, Any]] = []
        for variant in variants:
            others = {**self.base, **variant, **self.spec_none}
            iv = self.interval(others)
            if iv is not None:
                boundaries.append({**others, "mem_fraction_static": iv[1]} if self.fs else others)
        if not self.fs:
            return boundaries
        # The largest pool first while the workload's live tokens do not fit it: below the demand
        # requests queue for KV space and throughput follows the pool (a smaller graph size leaves
        # more of f to the pool); ties (every pool holds the demand) keep the baseline's size first.
        def pool(point: dict[str, Any]) -> int:
            return min(self.demand, _tokens(self.verdict(point)))

        # Among layouts whose pools hold the demand alike, a throughput objective tries the most
        # replicas first (data parallelism adds replicas without allreduces, tensor parallelism
        # adds an allreduce per layer), a latency objective the fewest (TP shortens each step);
        # both are priors the launches after them test. Published: DeepSeek-V3.2 on 8 x H200, 1,000
        # prompts, TP 8 1,427 tok/s, DP attention in one group 1,987, DP attention over 8 replicas
        # 3,482 (gpustack-deepseek-v3.2-h200-dpattn-dp-ep-mtp); DeepSeek-R1-0528 TP 8 3,172 -> DP
        # attention 3,415 (gpustack-dsr1-0528-h200-tp8-sharegpt-options); SGLang's cookbook serves
        # Kimi-K2's throughput point with DP attention over 4 (sgl-cookbook-kimi-k2-b200-dpattn).
        more_replicas = 1 if self.spec.objective.resolved_direction == "maximize" else -1

        def replicas(point: dict[str, Any]) -> int:
            return more_replicas * parse_layout(point["layout"])[1] if point.get("layout") else 0

        boundaries.sort(key=lambda p: (pool(p), replicas(p)), reverse=True)
        # A layout whose largest pool cannot hold the workload's live tokens queues requests for KV
        # space: while another layout holds them, it is left to the sampler, not designed.
        roomy_layouts = {p.get("layout") for p in boundaries if pool(p) >= self.demand}
        if roomy_layouts:
            boundaries = [p for p in boundaries if p.get("layout") in roomy_layouts]
        return boundaries

    def add_boundaries(self, boundaries: list[dict[str, Any]], architecture: str | None) -> None:
        """The boundaries, and before the first of them one speculative probe per algorithm at its base
        knobs: the prior that costs most when wrong ("speculative last") is tested first."""
        sp = self.spec.search_space.speculative
        algos = [a for a in sp.algorithm.choices if a != "none"] if sp is not None else []
        boundary_of_base: dict[str, Any] | None = None
        for point in boundaries:
            if boundary_of_base is None:
                boundary_of_base = point
                for algo in algos:
                    anchor = {k: v for k, v in point.items() if k not in space.SPEC_PARAMS}
                    probe = {**anchor, **_spec_probe(self.spec, algo, architecture)}
                    if self.fs:  # the draft model takes memory: the boundary moves down
                        piv = self.interval({k: v for k, v in probe.items() if k != "mem_fraction_static"})
                        if piv is None:
                            continue
                        probe["mem_fraction_static"] = min(probe.get("mem_fraction_static", piv[1]), piv[1])
                    self.add(probe, "speculative probe")
            self.add(point, "boundary")

    def fill(self, seed: int | None) -> None:
        """Space-filling: scrambled Sobol points over the base knobs, f inside each point's feasible
        interval (where its pool holds the demand, when one does)."""
        axes, fs = self.axes, self.fs
        names = list(axes)
        for u in _sobol(len(names), max(0, self.n - len(self.points)) * 2, seed):
            if len(self.points) >= self.n:
                break
            params = {name: axes[name][min(len(axes[name]) - 1, int(x * len(axes[name])))]
                      for name, x in zip(names, u, strict=True) if name != "mem_fraction_static"}
            params.update(self.spec_none)
            if fs:
                iv = self.interval(params)
                if iv is None:
                    continue
                iv = self.roomy(params, iv)
                i = names.index("mem_fraction_static")
                lo, hi = fs.index(iv[0]), fs.index(iv[1])
                params["mem_fraction_static"] = fs[lo + min(hi - lo, int(u[i] * (hi - lo + 1)))]
            self.add(params, "space-filling")


__all__ = ["DesignPoint", "base_axes", "build", "decode_batch", "design_size", "f_interval"]
