"""autotune's load generator: bench_serving's metrics from one fast asyncio client.

Public surface::

    spec = LoadSpec(backend="sglang", concurrency=64, num_prompts=512, input_len=1024, output_len=256)
    result = run_load("http://127.0.0.1:30000", spec, on_snapshot=lambda s: s.output_throughput > 100)
    result.metrics["output_throughput"], result.records, result.time_scale

See docs/ARCHITECTURE.md (``autotune.load``) and ``autotune bench --help``.
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
