"""autotune's load generator: bench_serving's metrics from one fast asyncio client.

Public surface::

    spec = LoadSpec(backend="sglang", concurrency=64, num_prompts=512, input_len=1024, output_len=256)
    result = run_load("http://127.0.0.1:30000", spec, on_snapshot=lambda s: s.output_throughput > 100)
    result.metrics["output_throughput"], result.records, result.time_scale

See docs/ARCHITECTURE.md (``autotune.load``) and ``autotune bench --help``.

Modules:

- ``run``: ``run_load`` / ``run_load_async``, one load point. ``runner``: ``LoadRunner``, the asyncio loop
  and its connection pool. ``transport/``: the HTTP/1.1 client, arrival timestamps, the stream parser.
- ``spec``: ``LoadSpec``, ``LoadTimeouts``. ``workloads``: one model per workload kind.
- ``sources``: the requests of each workload kind; ``prompts``: synthetic prompts and JSONL datasets;
  ``formats``: dataset and trace readers; ``tokens``: token counts; ``samples``: sample files of each format.
- ``metrics``: bench_serving's metrics. ``result``: ``LoadResult``, ``Snapshot``, ``LoadPointFailed``.
  ``report``: bench_serving's console table and JSONL lines.
"""

from autotune.load.result import LoadPointFailed, LoadResult, Snapshot
from autotune.load.run import run_load, run_load_async
from autotune.load.spec import LoadSpec, LoadTimeouts, build_spec

__all__ = [
    "LoadPointFailed",
    "LoadResult",
    "LoadSpec",
    "LoadTimeouts",
    "Snapshot",
    "build_spec",
    "run_load",
    "run_load_async",
]
