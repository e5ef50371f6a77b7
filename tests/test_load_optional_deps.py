"""uvloop and orjson are optional: without them the load generator falls back to asyncio and json."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import sys
sys.modules["uvloop"] = None  # makes `import uvloop` raise ImportError
sys.modules["orjson"] = None
from autotune.testing.loadgen_fake_server import running
from autotune.load import LoadSpec, run_load
import autotune.load.run as run_mod, autotune.load.transport.stream as stream_mod
assert run_mod._loop_factory is None and stream_mod.loads.__module__ == "json"
with running("--ttft-ms", "1", "--token-delay-ms", "1") as server:
    for backend in ("sglang", "openai"):
        spec = LoadSpec(backend=backend, concurrency=2, num_prompts=4, output_len=5, input_len=4)
        result = run_load(server.url, spec)
        assert result.metrics["total_output_tokens"] == 20, result.metrics
print("ok")
"""


def test_runs_without_uvloop_and_orjson() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok"
