"""What a load point returns: :class:`LoadResult`, :class:`Snapshot` and the failure it may raise."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.errors import LoadGenError


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Progress of a running load point, in modelled time (see ``LoadResult.time_scale``).

    Handed to ``on_snapshot`` every ``snapshot_interval_s``; returning ``False`` stops
    the load point early. ``output_throughput`` counts tokens as they stream, in-flight
    requests included, so it is meaningful long before the first request completes.
    """

    elapsed_s: float
    completed: int
    failed: int
    in_flight: int
    output_tokens: int
    output_throughput: float
    request_throughput: float
    mean_ttft_ms: float | None


@dataclass(slots=True, repr=False)
class LoadResult:
    """The outcome of one load point.

    ``metrics`` carries bench_serving's key names (``output_throughput``,
    ``mean_ttft_ms``, ...) plus autotune's extras (``client_cpu_s``,
    ``event_loop_lag_p99_ms``, ``client_bound``, ``errors``, ...). ``records`` holds one
    dict per measured request (warm-up excluded). Durations and rates are in modelled
    time: ``time_scale`` is the simulated server's factor (1.0 for a real server).
    """

    metrics: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)
    time_scale: float = 1.0
    stopped_early: bool = False
    server_info: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:  # short: asyncio and logging may repr it, and records can be huge
        m = self.metrics
        return (
            f"LoadResult(completed={m.get('completed')}, failed={m.get('failed')}, "
            f"output_throughput={m.get('output_throughput')}, time_scale={self.time_scale}, "
            f"stopped_early={self.stopped_early}, records={len(self.records)})"
        )


class LoadPointFailed(LoadGenError):
    """The load point could not be measured: server unreachable or died, warm-up failed,
    or too many requests failed in a row. ``result`` holds what was measured before."""

    def __init__(self, message: str, *, result: LoadResult | None = None) -> None:
        super().__init__(message)
        self.result = result
