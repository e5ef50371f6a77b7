"""Dead knobs out of the space before the study starts, each with the one line that says why.

A knob that cannot change anything on this node and release (custom allreduce
at TP > 2 on PCIe, FlashInfer allreduce fusion off SM90/SM100, a catalogue
flag or variable the release lacks, an MoE knob on a dense model) is removed;
so is a value that cannot run (a DP-attention size that divides no TP size of
the space, an all-to-all back-end that needs NVLink on a PCIe node; on an AMD
Instinct node the CUDA-only knobs and back-ends, :mod:`autotune.sglang.hardware.rocm`). A knob
autotune does not know stays: the release's parser judges each candidate
(a flag none of autotune's release tables has is taken for a newer build's:
:mod:`autotune.sglang.flags.unknown`).
The rules live in :mod:`autotune.sglang.knobs.rules`; this module applies them
to a :class:`~autotune.spec.StudySpec`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.sglang.knobs.catalogue import lookup
from autotune.sglang.knobs.rules import NodeContext, dead_reason, dead_value_reason
from autotune.spec import StudySpec, parse_layout

__all__ = ["Removed", "prune_space", "space_summary"]

_TYPED = ("custom_allreduce", "flashinfer_allreduce_fusion", "enable_torch_symm_mem", "attention_backend",
          "kv_cache_dtype", "chunked_prefill_size", "max_running_requests", "cuda_graph_max_bs")


@dataclass(frozen=True)
class Removed:
    """A knob (``value`` None) or one value of it taken out of the space, and why."""

    name: str
    reason: str
    value: Any = None

    def line(self) -> str:
        what = self.name if self.value is None else f"{self.name}={self.value}"
        return f"removed {what}: {self.reason}"


def _tp_sizes(spec: StudySpec) -> tuple[int, ...]:
    lay = spec.search_space.layout
    if lay is None:
        return (spec.server.tp_size,)
    return tuple(sorted({parse_layout(x)[0] for x in lay.choices}))


def prune_space(spec: StudySpec, model: Any, gpu: Any) -> tuple[StudySpec, list[Removed]]:
    """The space without dead knobs and values, and what went (in the order of the space)."""
    space = spec.search_space
    ctx = NodeContext.of(spec.server.sglang_version, gpu, spec.hardware.interconnect, spec.server.tp_size, model)
    tps = _tp_sizes(spec)
    removed: list[Removed] = []
    updates: dict[str, Any] = {}
    for name in _TYPED:
        if getattr(space, name) is None:
            continue
        knob = lookup(name)
        why = dead_reason(knob, name, ctx, tps)
        if why:
            removed.append(Removed(name, why))
            updates[name] = None
            continue
        dom = getattr(space, name)
        if hasattr(dom, "choices"):
            keep = []
            for value in dom.choices:
                vwhy = dead_value_reason(knob, value, ctx, tps)
                if vwhy:
                    removed.append(Removed(name, vwhy, value))
                else:
                    keep.append(value)
            if not keep:
                updates[name] = None
            elif len(keep) != len(dom.choices):
                updates[name] = dom.model_copy(update={"choices": keep})
    for group in ("flags", "env"):
        kept: dict[str, Any] = {}
        for name, dom in getattr(space, group).items():
            knob = lookup(name)
            why = dead_reason(knob, name, ctx, tps)
            if why:
                removed.append(Removed(name, why))
                continue
            values = []
            for value in dom.choices:
                vwhy = dead_value_reason(knob, value, ctx, tps)
                if vwhy:
                    removed.append(Removed(name, vwhy, value))
                else:
                    values.append(value)
            if not values:
                removed.append(Removed(name, "no value of it can run here"))
                continue
            kept[name] = dom if len(values) == len(dom.choices) else dom.model_copy(update={"choices": values})
        if kept != getattr(space, group):
            updates[group] = kept
    if not updates:
        return spec, removed
    return spec.model_copy(update={"search_space": space.model_copy(update=updates)}), removed


def space_summary(spec: StudySpec) -> list[str]:
    """One line per axis of the space that remains (``plan``)."""
    from autotune.sglang.flags.unknown import plan_note
    from autotune.sglang.knobs.catalogue import describe

    space = spec.search_space
    lines = []
    for name in ("mem_fraction_static", *_TYPED, "speculative"):
        dom = getattr(space, name)
        if dom is None:
            continue
        if name == "speculative":
            lines.append(f"speculative: {', '.join(dom.algorithm.choices)}")
        elif hasattr(dom, "choices"):
            lines.append(f"{name}: {', '.join(map(str, dom.choices))}")
        else:
            lines.append(f"{name}: {dom.low}..{dom.high}" + (f" step {dom.step}" if dom.step else ""))
    if space.layout is not None:
        lines.append(f"layout: {', '.join(space.layout.choices)}")
    real_parser = spec.server.backend == "sglang"  # the installed SGLang's parser vets every candidate
    for group in ("flags", "env"):
        for name, dom in getattr(space, group).items():
            info = describe(name)
            if info["known"]:
                mem = info["memory"] or "no memory effect"
            elif group == "flags":
                mem = plan_note(name, spec.server.sglang_version, real_parser=real_parser)
            else:
                mem = "unknown variable: no memory effect assumed, set in the server's environment as written"
            lines.append(f"{name}: {', '.join(map(str, dom.choices))}  ({mem})")
    return lines
