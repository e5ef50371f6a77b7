"""How many more trials fit on a Ray cluster: first-fit packing of per-trial needs onto nodes.

Pure bookkeeping, no Ray import, so it is cheap to test. The executor keeps its
own ledger of what its trials hold (Ray itself never oversubscribes a node, but
a task that does not fit now would sit in Ray's queue, and one that can never
fit would sit there forever). A trial needs all its GPUs on one node (tensor
parallel ranks share a node), so fitting is decided per node, not on cluster
totals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# One trial's reservation: {"GPU": tp x dp, **executor.resources}.
Need = Mapping[str, float]
# One node's totals: {"GPU": 8.0, "CPU": 2.0, "gpu_arch_blackwell": 8.0, ...}.
NodeTotals = Mapping[str, float]

_EPS = 1e-9


def trial_need(num_gpus: int, resources: Mapping[str, float] | None = None) -> dict[str, float]:
    """The reservation of one trial: its GPUs plus the study's extra node resources."""
    need = {k: float(v) for k, v in (resources or {}).items() if float(v) > 0}
    if num_gpus > 0:
        need["GPU"] = float(num_gpus)
    return need


def _fits(free: Mapping[str, float], need: Need) -> bool:
    return all(free.get(k, 0.0) + _EPS >= v for k, v in need.items())


def _take(free: dict[str, float], need: Need) -> None:
    for k, v in need.items():
        free[k] = free.get(k, 0.0) - v


def fits_anywhere(nodes: Sequence[NodeTotals], need: Need) -> bool:
    """Whether ``need`` fits on some node when that node is empty (else it can never run)."""
    return any(_fits(n, need) for n in nodes)


def place(nodes: Sequence[NodeTotals], held: Sequence[Need]) -> list[dict[str, float]] | None:
    """Free resources per node after first-fit placing ``held`` (in order); None if they do not all fit."""
    free = [dict(n) for n in nodes]
    for need in held:
        for node in free:
            if _fits(node, need):
                _take(node, need)
                break
        else:
            return None
    return free


def how_many_more(nodes: Sequence[NodeTotals], held: Sequence[Need], need: Need, *, limit: int = 1 << 16) -> int:
    """How many more trials of ``need`` fit next to ``held`` (first fit), at most ``limit``.

    When ``held`` itself no longer fits (a node left the cluster), nothing more fits.
    """
    free = place(nodes, held)
    if free is None:
        return 0
    count = 0
    while count < limit:
        for node in free:
            if _fits(node, need):
                _take(node, need)
                break
        else:
            break
        count += 1
    return count


def describe(nodes: Sequence[NodeTotals]) -> str:
    """One line on the cluster's GPUs per node, for error messages."""
    gpus = [int(n.get("GPU", 0)) for n in nodes]
    if not gpus:
        return "no live nodes"
    return f"{len(gpus)} node(s) with {'/'.join(str(g) for g in gpus)} GPU(s), largest {max(gpus)}"
