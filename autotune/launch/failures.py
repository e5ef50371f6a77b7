"""Turn the tail of a dead server's log into a failure kind and its evidence line.

``classify`` asks :mod:`autotune.sglang.logparse` first (its ``parse_line``
returns a ``LogEvent`` whose ``kind == "failure"`` carries ``failure_kind``),
and falls back to the patterns below for lines the parser does not flag (or
when the parser is not importable). The fallback covers what a launcher sees
that is not an SGLang startup-log line: argparse usage errors and a port that
is already bound.

When several failures show in one log (a scheduler traceback, then the
launcher's "Received sigquit", then the torch OOM repeated per rank), the most
specific kind wins, in the order of ``KIND_PRIORITY``; within a kind the line
matched by the earliest pattern in ``_PATTERNS`` wins, then the first such line.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Iterable
from typing import Any

from autotune.outcome import FailureKind
from autotune.sglang.logparse import parse_line

KIND_PRIORITY: tuple[FailureKind, ...] = (
    FailureKind.KV_OOM,
    FailureKind.GRAPH_CAPTURE_OOM,
    FailureKind.MEMORY_IMBALANCE,
    FailureKind.PORT_IN_USE,
    FailureKind.INVALID_ARGS,
    FailureKind.CUDA_OOM,
    FailureKind.RUNTIME_OOM,
    FailureKind.CRASHED,
)
"""Most specific first: a KV OOM also prints generic scheduler failures, and so on."""

# (kind, pattern), most telling first within a kind (SGLang's own messages: ``model_runner_kv_cache_mixin.py``'s
# "Not enough memory" at 0.5.9, ``kv_cache_configurator.py`` at 0.5.23, ``cuda_graph_runner.py``; real ones in
# tests/data/public_logs/ and the real-engine tests).
_PATTERNS: tuple[tuple[FailureKind, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(rx, re.IGNORECASE))
    for kind, rx in (
        (FailureKind.KV_OOM, r"Not enough memory\. Please try to increase --mem-fraction-static"),
        (FailureKind.KV_OOM, r"Loaded weights leave no GPU memory for the KV cache"),
        (FailureKind.KV_OOM, r"is larger than the profiled value -\d"),
        (FailureKind.KV_OOM, r"Memory pool size is too small"),
        (FailureKind.KV_OOM, r"SWA pool .* cannot hold even one request"),
        (FailureKind.GRAPH_CAPTURE_OOM, r"Capture .*graph failed:.*out of memory"),
        (FailureKind.MEMORY_IMBALANCE, r"The memory capacity is unbalanced"),
        (FailureKind.PORT_IN_USE, r"address already in use"),
        (FailureKind.PORT_IN_USE, r"\[Errno 98\]"),
        (FailureKind.PORT_IN_USE, r"port \d+ is (already )?in use|port is (already )?in use"),
        (FailureKind.INVALID_ARGS, r"^\S+: error: "),
        # parsed, then refused by the model's config (SGLang raises it before any scheduler starts)
        (FailureKind.INVALID_ARGS, r"context_length \(\d+\) is greater than the derived context_length"),
        (FailureKind.CUDA_OOM, r"OutOfMemoryError: CUDA out of memory"),
        (FailureKind.CUDA_OOM, r"CUDA out of memory"),
        (FailureKind.CUDA_OOM, r"CUDA error: out of memory"),
        (FailureKind.RUNTIME_OOM, r"(Prefill|Decode) out of memory\. Try to lower your batch size"),
        (FailureKind.RUNTIME_OOM, r"alloc_req_slots runs out of memory"),
        (FailureKind.RUNTIME_OOM, r"Out of memory even after retracting"),
        (FailureKind.CRASHED, r"Subprocess \S+ \(pid=\d+\) crashed with exit code"),
        (FailureKind.CRASHED, r"Scheduler hit an exception"),
        (FailureKind.CRASHED, r"Rank \d+ scheduler is dead"),
        (FailureKind.CRASHED, r"Initialization failed\. warmup error"),
        (FailureKind.CRASHED, r"Received sigquit from a child process"),
    )
)

# SGLang's SubprocessWatchdog (0.5.23): a scheduler or detokenizer died and the launcher ends the tree.
# That line names the process that died and how; it beats a traceback the teardown prints after it.
_CHILD_DIED = re.compile(r"Subprocess \S+ \(pid=\d+\) crashed with exit code -?\d+")
# "Capture cuda graph failed:" without the OOM text on the same line: an OOM if one shows elsewhere.
_GRAPH_FAILED = re.compile(r"Capture .*graph failed", re.IGNORECASE)
# The last line of a Python traceback, e.g. "RuntimeError: something".
_EXCEPTION_LINE = re.compile(r"^(\[[^\]]*\]\s*)?(\w+\.)*\w*(Error|Exception|Interrupt)\b.*")

_Parse = Callable[[str], Any]


def _logparse() -> _Parse | None:
    """The startup-log parser's line reader (its failure verdicts come first; a seam for the
    tests of the fallback patterns, which replace it with None)."""
    return parse_line


def _as_kind(value: object) -> FailureKind:
    try:
        return FailureKind(str(getattr(value, "value", value)))
    except ValueError:
        return FailureKind.CRASHED


def _rank(kind: FailureKind) -> int:
    return KIND_PRIORITY.index(kind) if kind in KIND_PRIORITY else len(KIND_PRIORITY)


def line_failure(line: str, parse: _Parse | None = None) -> tuple[FailureKind, int] | None:
    """The failure kind one log line shows and its pattern rank, or None.

    The parser's verdict comes first; the fallback patterns decide when the
    parser is absent or does not flag the line.
    """
    pattern_rank = None
    pattern_kind = None
    for i, (kind, rx) in enumerate(_PATTERNS):
        if rx.search(line):
            pattern_rank, pattern_kind = i, kind
            break
    if parse is not None:
        try:
            event = parse(line)
        except Exception:  # noqa: BLE001 - a parser bug must not hide the failure
            event = None
        if event is not None and getattr(event, "kind", None) == "failure":
            kind = _as_kind(getattr(event, "failure_kind", None))
            rank = pattern_rank if pattern_kind is kind and pattern_rank is not None else len(_PATTERNS)
            return kind, rank
    if pattern_kind is None:
        return None
    return pattern_kind, pattern_rank if pattern_rank is not None else len(_PATTERNS)


def _exit_text(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


def classify(log_tail_lines: Iterable[str], returncode: int | None) -> tuple[FailureKind, str]:
    """Classify why a server died (or hung) from its last log lines.

    Returns ``(kind, evidence)``: ``evidence`` is the log line that proves the
    kind (stripped), or for an unrecognised crash the last exception line or
    last non-empty line, or a sentence with the exit status.
    ``returncode`` None means the process is still alive (a startup timeout).
    """
    lines = [ln.rstrip("\r\n") for ln in log_tail_lines]
    parse = _logparse()
    best: tuple[int, int, int] | None = None  # (kind rank, pattern rank, line index)
    best_kind = FailureKind.CRASHED
    graph_failed: str | None = None
    saw_cuda_oom = False
    for idx, line in enumerate(lines):
        if graph_failed is None and _GRAPH_FAILED.search(line):
            graph_failed = line.strip()
        found = line_failure(line, parse)
        if found is None:
            continue
        kind, prank = found
        saw_cuda_oom = saw_cuda_oom or kind is FailureKind.CUDA_OOM
        key = (_rank(kind), prank, idx)
        if best is None or key < best:
            best, best_kind = key, kind
    graph_first = best is None or _rank(best_kind) > _rank(FailureKind.GRAPH_CAPTURE_OOM)
    if graph_failed is not None and saw_cuda_oom and graph_first:
        return FailureKind.GRAPH_CAPTURE_OOM, graph_failed
    if best is not None and best_kind is not FailureKind.CRASHED:
        return best_kind, lines[best[2]].strip()
    child_died = next((ln.strip() for ln in lines if _CHILD_DIED.search(ln)), None)
    if child_died is not None:
        return FailureKind.CRASHED, child_died
    if returncode is None:
        kind = FailureKind.STARTUP_TIMEOUT
    else:
        kind = FailureKind.CRASHED
    exceptions = [ln.strip() for ln in lines if _EXCEPTION_LINE.match(ln.strip())]
    if exceptions:
        return kind, exceptions[-1]
    if best is not None:
        return kind, lines[best[2]].strip()
    nonempty = [ln.strip() for ln in lines if ln.strip()]
    if nonempty and returncode is None:
        return kind, nonempty[-1]
    if nonempty:
        return kind, f"{nonempty[-1]} ({_exit_text(returncode)})"
    return kind, f"server {_exit_text(returncode)} with no output"
