"""Learning infeasible regions from failures, so the same crash is never paid for twice.

A CUDA-graph capture OOM at (f, bs) means that every candidate with f' >= f and
bs' >= bs and all other knobs equal fails too: a larger ``mem_fraction_static``
leaves less slack ``P x (1 - f)`` for the graphs, and a larger max batch size
captures more graphs. An out-of-memory under load (activations did not fit in
what the graphs left of the slack) implies the same region. A KV-pool OOM at f (the formula went negative) means every
f' <= f with the other knobs equal fails too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.outcome import FailureKind

_MONOTONE = ("mem_fraction_static", "cuda_graph_max_bs")
_SLACK_KINDS = (FailureKind.GRAPH_CAPTURE_OOM.value, FailureKind.RUNTIME_OOM.value)
LEARNED_KINDS = (*_SLACK_KINDS, FailureKind.KV_OOM.value)


@dataclass(frozen=True)
class Failure:
    number: int
    kind: str
    params: dict[str, Any]
    study: str | None = None  # an earlier study's failure, carried by warm start (autotune.study.warm_start)

    @property
    def label(self) -> str:
        return f"trial {self.number}" + (f" of study {self.study}" if self.study else "")


def _others(params: dict[str, Any], inert: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k not in _MONOTONE and k not in inert}


def inert_knobs(tp_size: int, interconnect: str) -> frozenset[str]:
    """Knobs SGLang ignores on this hardware, so they cannot tell two candidates apart:
    custom allreduce is disabled on more than two PCIe-only GPUs (SGLang's
    ``distributed/device_communicators/custom_all_reduce.py``, its "not supported on more than two
    PCIe-only GPUs" warning)."""
    return frozenset({"custom_allreduce"}) if interconnect == "pcie" and tp_size > 2 else frozenset()


def implied_by(params: dict[str, Any], failures: list[Failure],
               inert: frozenset[str] = frozenset()) -> tuple[Failure, str] | None:
    """The earlier failure that proves ``params`` infeasible, with the reason, or None."""
    for fail in failures:
        if _others(fail.params, inert) != _others(params, inert):
            continue
        f0, f1 = fail.params.get("mem_fraction_static"), params.get("mem_fraction_static")
        b0, b1 = fail.params.get("cuda_graph_max_bs"), params.get("cuda_graph_max_bs")
        if fail.kind in _SLACK_KINDS and f0 is not None and f1 is not None:
            if f1 >= f0 and (b0 is None or (b1 is not None and b1 >= b0)):
                what = "failed CUDA graph capture" if fail.kind == FailureKind.GRAPH_CAPTURE_OOM.value \
                    else "ran out of memory under load"
                return fail, (
                    f"{fail.label} {what} at mem_fraction_static={f0:g}"
                    f"{f', cuda_graph_max_bs={b0}' if b0 is not None else ''}; this candidate has less slack"
                    f" (f={f1:g}{f', bs={b1}' if b1 is not None else ''})"
                )
        if fail.kind == FailureKind.KV_OOM.value and f0 is not None and f1 is not None and f1 <= f0:
            return fail, (f"{fail.label} had no KV cache at mem_fraction_static={f0:g}; "
                          f"this candidate has f={f1:g}")
    return None
