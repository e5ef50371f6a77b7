"""Against REAL SGLang on CPU: a shared-prefix workload gets ``cached_tokens > 0`` from the
server, and autotune's hit rate equals the server's own count (its ``Prefill batch.`` log
lines: ``#cached-token`` over ``#cached-token + #new-token``) within 1 %.

Runs on the suite's shared real server (tests/support/real_sglang.py ``real_server``: SGLang 0.5.23
on CPU, the tiny Llama, ``--enable-cache-report``); without the venv it is skipped, except under
``CI=true`` where it fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotune.launch import ServerProcess
from autotune.load import LoadSpec, run_load
from autotune.load.workloads import validate_workload
from autotune.testing.real_cpu_study import TINY_LLAMA

pytestmark = pytest.mark.real_sglang

_PREFILL = re.compile(r"Prefill batch.*?#new-token: (\d+), #cached-token: (\d+)")


def test_real_sglang_reports_cached_tokens_and_autotunes_hit_rate_is_the_servers(real_server: ServerProcess) -> None:
    log_path = Path(real_server.log_path)
    gsp = {"kind": "generated-shared-prefix", "num_groups": 2, "prompts_per_group": 8, "system_prompt_len": 128,
           "question_len": 16, "output_len": 4}
    results = {}
    for backend in ("sglang", "openai"):
        before = len(log_path.read_text(errors="replace").splitlines())
        spec = LoadSpec(backend=backend, concurrency=4, warmup_requests=0, flush_cache=True,
                        dataset=validate_workload(gsp), tokenizer=TINY_LLAMA)
        m = run_load(real_server.url, spec).metrics
        lines = log_path.read_text(errors="replace").splitlines()[before:]
        new = cached = 0
        for line in lines:
            if (hit := _PREFILL.search(line)) is not None:
                new += int(hit.group(1))
                cached += int(hit.group(2))
        results[backend] = (m, cached, new)
    for backend, (m, cached, new) in results.items():
        assert m["completed"] == 16 and m["failed"] == 0, backend
        assert m["total_cached_tokens"] > 0 and cached > 0, backend
        assert m["cache_hit_rate"] == pytest.approx(cached / (cached + new), abs=0.01), (backend, m, cached, new)
