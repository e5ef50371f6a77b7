"""Real SGLang 0.5.23 on CPU, the session's shared server (tests/real_sglang.py), driven by autotune's own launcher and load generator.

What the simulator only imitates, shown on the real engine: the CPU flags are
accepted, readiness comes from the real endpoints, the real startup log is
parsed (and on CPU "avail mem" is host RAM), the three endpoints stream with
token counts equal to the server's own ``meta_info``/``usage`` (and to the
requested length, with ignore_eos), synthetic ``/generate`` ids stay inside a
384-token vocabulary so the server survives, and teardown ends the launcher,
scheduler and detokenizer (SGLang's own SIGTERM drain: rc 0, not a SIGKILL).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import pytest

from autotune.launch import ServerProcess
from autotune.load import LoadSpec, run_load
from autotune.sglang.logparse import parse_line, summarize

pytestmark = [pytest.mark.real_sglang, pytest.mark.timeout(600)]


@pytest.fixture
def server(real_server: ServerProcess) -> ServerProcess:
    return real_server  # the session's shared real server (tests/real_sglang.py)


def _load(server: ServerProcess, backend: str, **kw: Any) -> Any:
    fields: dict[str, Any] = {"concurrency": 8, "num_prompts": 16, "input_len": 24, "output_len": 16,
                              "range_ratio": 0.5, "warmup_requests": 2, **kw}
    spec = LoadSpec(backend=backend, **fields)
    return run_load(server.url, spec)


def test_real_startup_log_is_parsed(server: ServerProcess) -> None:
    lines = Path(server.log_path).read_text(errors="replace").splitlines()
    events = [e for e in (parse_line(line) for line in lines) if e is not None]
    obs = summarize(events)
    assert obs.get("kv_tokens") == 8192, obs  # --max-total-tokens caps the pool on CPU
    # On CPU "avail mem" is psutil's available RAM of the whole machine, not a device budget.
    host_gib = psutil.virtual_memory().total / 2**30
    assert obs.get("p_gib") is not None and 0 < obs["p_gib"] <= host_gib, obs
    assert obs.get("a_gib") is not None and 0 < obs["a_gib"] <= host_gib, obs
    assert any(e.kind == "ready" for e in events), [e.kind for e in events]


@pytest.mark.parametrize("backend", ["sglang", "openai", "openai-chat"])
def test_streams_count_exactly_what_the_server_reports(server: ServerProcess, backend: str) -> None:
    res = _load(server, backend)
    m = res.metrics
    assert m["completed"] == 16 and m["failed"] == 0, m.get("errors")
    recs = res.records
    assert len(recs) == 16
    for r in recs:
        # ignore_eos: the server generates exactly what was asked; the stream delivered all of it.
        assert r["completion_tokens"] == r["output_len"] == r["streamed_tokens"], r
    assert m["total_output_tokens"] == sum(r["completion_tokens"] for r in recs)
    assert m["output_throughput"] > 0 and m["median_ttft_ms"] > 0


def test_sglang_ids_stay_inside_a_tiny_vocabulary(server: ServerProcess) -> None:
    """Before: ids 1000-30000 against a 384-token model killed the scheduler (IndexError in the embedding)."""
    res = _load(server, "sglang", input_len=64)
    assert res.metrics["failed"] == 0 and server.returncode is None
    again = _load(server, "sglang")
    assert again.metrics["completed"] == 16 and server.returncode is None


def test_teardown_ends_the_whole_real_tree_gracefully(real_server: ServerProcess) -> None:
    """The shared server's own teardown, checked here: a second real startup just to stop it costs a minute.
    In the default order this is the last test to use it; in any other, the next one starts it again."""
    proc = real_server
    assert proc.returncode is None, "the shared real server was already stopped"
    try:
        tree = [proc.pid, *(p.pid for p in psutil.Process(proc.pid).children(recursive=True))]
        names = " ".join(psutil.Process(p).name() + " " + " ".join(psutil.Process(p).cmdline()) for p in tree)
        assert "sglang::scheduler" in names and "sglang::detokenizer" in names, names
    finally:
        proc.stop()
    alive = [p for p in tree if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    # SGLang's own drain finished inside the grace period: the launcher exited 0, no SIGKILL.
    assert proc.returncode == 0, (proc.returncode, proc.timings)
