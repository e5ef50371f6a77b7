"""The throughput-latency trade-off: which (trial, load point) pairs no other beats on both."""

from __future__ import annotations

from typing import Any, TypeVar

from autotune.study import attrs

T = TypeVar("T")


def front(items: list[tuple[float, float, T]]) -> list[tuple[float, float, T]]:
    """Items ``(latency, throughput, payload)`` not dominated when lower latency and higher
    throughput are better, in order of latency."""
    out: list[tuple[float, float, T]] = []
    for item in sorted(items, key=lambda p: (p[0], -p[1])):
        if not out or item[1] > out[-1][1]:
            out.append(item)
    return out


def trial_front(trials: list[Any], latency: str, throughput: str = "output_throughput") -> list[dict[str, Any]]:
    """The front over every load point of completed trials (their ``metrics`` user attribute)."""
    items = []
    for t in trials:
        for point, m in (t.user_attrs.get(attrs.METRICS) or {}).items():
            x, y = m.get(latency), m.get(throughput)
            if isinstance(x, (int, float)) and isinstance(y, (int, float)):
                items.append((float(x), float(y), (t.number, point)))
    return [{"number": n, "point": p, latency: x, throughput: y} for x, y, (n, p) in front(items)]
