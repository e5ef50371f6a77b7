"""classify: every failure kind from real-looking SGLang output, with its evidence line."""

from __future__ import annotations

import pytest

import autotune.launch.failures as classify_mod
from autotune.launch import classify
from autotune.outcome import FailureKind

TRACE = "Traceback (most recent call last):"
SIGQUIT = "[2025-10-16 09:06:22] Received sigquit from a child process. It usually means the child failed."

CASES = [
    (FailureKind.KV_OOM, "[2025-03-28 04:27:07 TP0] RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.5"),
    (FailureKind.KV_OOM, "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.9. Raise --mem-fraction-static above 0.912 (minimum viable = 1 - available/pre = 0.9120)."),
    (FailureKind.KV_OOM, "[2025-07-02 07:41:59 DP0 TP0] max_total_tokens=131072 is larger than the profiled value -561981. Use the profiled value instead."),
    (FailureKind.GRAPH_CAPTURE_OOM, "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 7 has a total capacity of 95.00 GiB"),
    (FailureKind.CUDA_OOM, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.00 GiB is free."),
    (FailureKind.RUNTIME_OOM, "[2025-10-16 09:10:01 TP0] RuntimeError: Decode out of memory. Try to lower your batch size."),
    (FailureKind.MEMORY_IMBALANCE, "RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes. min_per_gpu_memory=40.1, local_gpu_memory=79.1"),
    (FailureKind.PORT_IN_USE, "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use"),
    (FailureKind.INVALID_ARGS, "launch_server.py: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"),
    # real SGLang 0.5.23 on CPU, tiny Llama at --context-length 4096: parsed, then refused by the model config
    (FailureKind.INVALID_ARGS, "ValueError: Warning: User-specified context_length (4096) is greater than the derived context_length (2048). This may lead to incorrect model outputs or CUDA errors."),
]


@pytest.mark.parametrize(("kind", "line"), CASES)
@pytest.mark.parametrize("with_parser", [True, False])
def test_each_kind_with_its_evidence(monkeypatch: pytest.MonkeyPatch, kind: FailureKind, line: str, with_parser: bool) -> None:
    if not with_parser:
        monkeypatch.setattr(classify_mod, "_logparse", lambda: None)
    tail = ["[2025-10-16 09:06:20 TP0] Load weight begin. avail mem=78.00 GB", "[2025-10-16 09:06:21] Scheduler hit an exception: " + TRACE, line, SIGQUIT]
    assert classify(tail, 1) == (kind, line.strip())


def test_specific_kind_wins_over_generic_and_cuda_oom() -> None:
    kv = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.3"
    tail = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB", "Rank 0 scheduler is dead. Please check if there are relevant logs.", kv]
    assert classify(tail, 1) == (FailureKind.KV_OOM, kv)


def test_graph_failure_split_over_two_lines_is_graph_capture_oom(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(classify_mod, "_logparse", lambda: None)
    tail = ["Capture cuda graph failed: see below", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64 MiB"]
    assert classify(tail, 1) == (FailureKind.GRAPH_CAPTURE_OOM, "Capture cuda graph failed: see below")


def test_unrecognised_crash_names_the_exception() -> None:
    tail = [TRACE, '  File "x.py", line 1, in <module>', "KeyError: 'rope_scaling'", "[2025-01-01 00:00:00] some shutdown chatter"]
    assert classify(tail, 1) == (FailureKind.CRASHED, "KeyError: 'rope_scaling'")


def test_silent_death_reports_exit_status() -> None:
    assert classify([], -9) == (FailureKind.CRASHED, "server killed by SIGKILL with no output")
    kind, evidence = classify(["loading..."], 3)
    assert kind is FailureKind.CRASHED and evidence == "loading... (exited with code 3)"


def test_still_running_is_startup_timeout_with_last_line() -> None:
    assert classify(["Capture cuda graph begin. avail mem=3.00 GB"], None) == (FailureKind.STARTUP_TIMEOUT, "Capture cuda graph begin. avail mem=3.00 GB")


def test_positive_profiled_value_is_not_a_failure() -> None:
    tail = ["max_total_tokens=131072 is larger than the profiled value 561981. Use the profiled value instead.", "ValueError: bad config"]
    assert classify(tail, 1) == (FailureKind.CRASHED, "ValueError: bad config")


def test_exception_line_with_sglang_prefix_is_the_evidence() -> None:
    line = "[2025-01-01 00:00:00 TP0] KeyError: 'rope_scaling'"
    assert classify([line, "[2025-01-01 00:00:01] shutting down"], 1) == (FailureKind.CRASHED, line)
