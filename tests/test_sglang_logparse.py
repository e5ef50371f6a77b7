"""Startup-log parser over the reference's real excerpts (section 9) and both line generations."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.outcome import FailureKind
from autotune.sglang.logparse import parse_line, parse_log, summarize

NOISE = [
    "",
    "INFO:     127.0.0.1:53422 - \"GET /health HTTP/1.1\" 503 Service Unavailable",
    "Capturing batches (bs=512 avail_mem=11.80 GB):  12%|#2        | 6/52 [00:01<00:10,  4.12it/s]",
    "[2025-10-16 09:06:20 TP3] Using KV cache dtype: torch.bfloat16",
    "WARNING: something unrelated happened",
]


def test_excerpt_1_weights_loaded_and_negative_profiled_value() -> None:
    e = parse_line("[2025-07-02 07:41:58 DP0 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, "
                   "avail mem=21.73 GB, mem usage=166.59 GB.")
    assert e is not None and e.kind == "weights_loaded" and e.rank == 0 and e.values["dp"] == 0
    assert (e.values["avail_gib"], e.values["mem_usage_gib"]) == (21.73, 166.59)
    assert e.values["architecture"] == "DeepseekV3ForCausalLM" and e.values["dtype"] == "torch.bfloat16"
    f = parse_line("[2025-07-02 07:41:59 DP0 TP0] max_total_tokens=131072 is larger than the profiled value -561981. "
                   "Use the profiled value instead.")
    assert f is not None and f.kind == "failure" and f.failure_kind == FailureKind.KV_OOM.value
    assert f.values["profiled_tokens"] == -561981
    assert parse_line("[2025-07-02 07:41:59 TP0] max_total_tokens=131072 is larger than the profiled value 9000. "
                      "Use the profiled value instead.") is None


def test_excerpt_2_kv_pool_and_graph_begin_rank5() -> None:
    kv = parse_line("[2025-10-16 09:06:22 TP5] KV Cache is allocated. #tokens: 2795207, K size: 53.31 GB, V size: 53.31 GB")
    assert kv is not None and kv.kind == "kv_allocated" and kv.rank == 5
    assert kv.values["tokens"] == 2795207 and kv.values["kv_gib"] == pytest.approx(106.62)
    end = parse_line("[2025-10-16 09:06:22 TP5] Memory pool end. avail mem=11.87 GB")
    assert end is not None and end.kind == "memory_pool_end" and end.values["avail_gib"] == 11.87
    gb = parse_line("[2025-10-16 09:06:22 TP7] Capture cuda graph begin. This can take up to several minutes. avail mem=12.01 GB")
    assert gb is not None and gb.kind == "graph_begin" and gb.rank == 7 and gb.values["avail_gib"] == 12.01
    bs = parse_line("[2025-10-16 09:06:22 TP0] Capture cuda graph bs [1, 2, 4, 8, 12, 16, 24, 32, 496, 512]")
    assert bs is not None and bs.kind == "graph_batch_sizes" and bs.values["batch_sizes"][-1] == 512


def test_excerpt_3_graph_end_and_max_total_num_tokens() -> None:
    g = parse_line("[2025-11-30 11:18:01] Capture cuda graph end. Time elapsed: 5.92 s. mem usage=1.44 GB. avail mem=37.06 GB.")
    assert g is not None and g.kind == "graph_captured" and g.rank == 0
    assert (g.values["graph_gib"], g.values["avail_gib"], g.values["elapsed_s"]) == (1.44, 37.06, 5.92)
    m = parse_line("[2025-11-30 11:18:05] max_total_num_tokens=2261377, chunked_prefill_size=16384, max_prefill_tokens=16384, "
                   "max_running_requests=4096, context_len=128000, available_gpu_mem=37.06 GB")
    assert m is not None and m.kind == "max_total_num_tokens"
    assert m.values["max_total_num_tokens"] == 2261377 and m.values["max_running_requests"] == 4096
    assert m.values["context_len"] == 128000 and m.values["available_gpu_mem_gib"] == 37.06


def test_excerpt_4_older_field_order() -> None:
    g = parse_line("[2025-03-28 04:27:12 TP0] Capture cuda graph end. Time elapsed: 4.00 s. avail mem=0.00 GB. mem usage=0.00 GB.")
    assert g is not None and g.values["graph_gib"] == 0.0 and g.values["avail_gib"] == 0.0
    kv = parse_line("[2025-03-28 04:27:07 TP0] KV Cache is allocated. #tokens: 46045, K size: 2.99 GB, V size: 2.99 GB")
    assert kv is not None and kv.values["tokens"] == 46045


def test_excerpt_5_graph_capture_oom() -> None:
    e = parse_line("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB. "
                   "GPU 7 has a total capacity of 95.00 ...")
    assert e is not None and e.failure_kind == FailureKind.GRAPH_CAPTURE_OOM.value and e.rank is None


def test_excerpt_6_and_10_kv_oom_both_wordings() -> None:
    old = parse_line("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                     "Current value: self.server_args.mem_fraction_static=0.55")
    new = parse_line("ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.9.")
    assert old is not None and old.failure_kind == "kv_oom" and old.values["mem_fraction_static"] == 0.55
    assert new is not None and new.failure_kind == "kv_oom" and new.values["mem_fraction_static"] == 0.9
    full = parse_line("ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.55. "
                      "Raise --mem-fraction-static above 0.769 (minimum viable = 1 - available/pre = 0.7691).")
    assert full is not None and full.values["min_viable_mem_fraction"] == 0.769


def test_excerpt_7_baseline_lines() -> None:
    a = parse_line("[2025-03-06 06:14:53 TP0] Init torch distributed ends. mem usage=0.13 GB")
    b = parse_line("[2025-03-06 06:14:53 TP0] Load weight begin. avail mem=21.63 GB")
    c = parse_line("[2026-06-08 07:20:50 TP3] Memory baseline taken. mem usage=0.52 GB")
    assert a is not None and a.kind == "baseline" and a.values["mem_usage_gib"] == 0.13
    assert b is not None and b.kind == "baseline" and b.values["avail_gib"] == 21.63
    assert c is not None and c.kind == "baseline" and c.rank == 3 and c.values["mem_usage_gib"] == 0.52


def test_excerpt_8_hybrid_mamba_startup() -> None:
    log = """[2026-02-27 17:10:27 TP0] Load weight end. elapsed=653.47 s, type=Qwen3_5MoeForConditionalGeneration, dtype=torch.bfloat16, avail mem=19.08 GB, mem usage=3.76 GB.
[2026-02-27 17:10:28 TP0] Mamba Cache is allocated. max_mamba_cache_size: 82, conv_state size: 0.13GB, ssm_state size: 7.29GB 
[2026-02-27 17:10:28 TP0] KV Cache is allocated. #tokens: 580364, K size: 4.15 GB, V size: 4.15 GB
[2026-02-27 17:10:28 TP0] Memory pool end. avail mem=4.02 GB
[2026-02-27 17:10:29 TP0] max_total_num_tokens=580364, chunked_prefill_size=2048, max_prefill_tokens=16384, max_running_requests=1, context_len=8192, available_gpu_mem=3.63 GB"""
    evs = parse_log(log)
    assert [e.kind for e in evs] == ["weights_loaded", "mamba_allocated", "kv_allocated", "memory_pool_end", "max_total_num_tokens"]
    assert evs[0].values["elapsed_s"] == 653.47 and evs[1].values["ssm_gib"] == 7.29
    s = summarize(evs)
    assert (s["a_gib"], s["kv_tokens"], s["max_running_requests"], s["chunked_prefill_size"]) == (19.08, 580364, 1, 2048)
    assert s["p_gib"] is None and s["failure_kind"] is None and not s["ready"]


def test_excerpt_9_kv_with_dtype() -> None:
    e = parse_line("[2026-06-08 07:20:53 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1106304, K size: 25.32 GB, V size: 25.32 GB")
    assert e is not None and e.values["dtype"] == "torch.bfloat16" and e.values["tokens"] == 1106304


def test_excerpt_11_piecewise_and_13_graph_begin_without_avail() -> None:
    e = parse_line("[2025-12-04 21:00:21] Capture piecewise CUDA graph end. Time elapsed: 58.13 s. mem usage=1.99 GB. avail mem=24.83 GB.")
    assert e is not None and e.kind == "graph_captured" and e.values["piecewise"] and e.values["phase"] == "prefill"
    assert e.values["graph_gib"] == 1.99
    b = parse_line("[2024-10-22 06:31:49 TP0] Capture cuda graph begin. This can take up to several minutes.")
    assert b is not None and b.kind == "graph_begin" and b.values["avail_gib"] is None


def test_excerpt_12_gpt_oss() -> None:
    e = parse_line("[2025-10-12 21:14:09] Load weight end. type=GptOssForCausalLM, dtype=torch.bfloat16, avail mem=163.13 GB, mem usage=14.53 GB.")
    assert e is not None and e.values["avail_gib"] == 163.13 and e.values["mem_usage_gib"] == 14.53


def test_modern_generation_graph_lines() -> None:
    b = parse_line("[2026-11-01 10:00:00 TP2] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=4, avail mem=20.50 GB")
    e = parse_line("[2026-11-01 10:00:09 TP2] Capture target decode CUDA graph end. bs=[1, 2, 4, 8], elapsed=9.10 s, "
                   "mem usage=0.85 GB, avail mem=19.65 GB.")
    d = parse_line("[2026-11-01 10:00:10 TP2] Capture draft extend CUDA graph begin. backend=full, avail mem=19.60 GB")
    assert b is not None and b.values["num_tokens_per_req"] == 4 and b.values["role"] == "target"
    assert e is not None and e.values["batch_sizes"] == [1, 2, 4, 8] and e.values["graph_gib"] == 0.85
    assert d is not None and (d.values["role"], d.values["phase"]) == ("draft", "extend")


@pytest.mark.parametrize(
    "line,kind",
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB", "cuda_oom"),
        ("RuntimeError: CUDA error: out of memory", "cuda_oom"),
        ("RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
         "min_per_gpu_memory=60.1, local_gpu_memory=79.0", "memory_imbalance"),
        ("[2026-01-01 00:00:00 TP0] Prefill out of memory. Try to lower your batch size.", "runtime_oom"),
        ("[2026-01-01 00:00:00 TP0] Decode out of memory. Try to lower your batch size.", "runtime_oom"),
        ("[2026-01-01 00:00:00 TP0] KV cache pool is full. Retract requests.", "runtime_oom"),
        ("ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use", "port_in_use"),
        ("launch_server.py: error: unrecognized arguments: --cuda-graph-max-bs-decode 128", "invalid_args"),
        ("launch_server.py: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
         "--cuda-graph-max-bs-prefill", "invalid_args"),
        ("Exception: Capture prefill CUDA graph failed: CUDA out of memory.", "graph_capture_oom"),
        ("AssertionError: Memory pool size is too small", "kv_oom"),
        ("[2026-01-01 00:00:00] Received sigquit from a child process. It usually means the child failed.", "crashed"),
    ],
)
def test_failure_kinds(line: str, kind: str) -> None:
    e = parse_line(line)
    assert e is not None and e.kind == "failure" and e.failure_kind == kind
    assert kind in {k.value for k in FailureKind}


def _tp8_log(p: list[float], a: list[float], tail: list[str]) -> str:
    lines: list[str] = []
    for r in range(8):
        lines += [f"[2026-02-10 10:00:0{r} TP{r}] Init torch distributed ends. elapsed=3.1 s, mem usage=0.{r}0 GB",
                  NOISE[r % len(NOISE)],
                  f"[2026-02-10 10:00:1{r} TP{r}] Load weight begin. avail mem={p[r]:.2f} GB"]
    for r in range(8):
        lines += [f"[2026-02-10 10:01:0{r} TP{r}] Load weight end. elapsed=60.0 s, type=DeepseekV3ForCausalLM, "
                  f"dtype=torch.bfloat16, avail mem={a[r]:.2f} GB, mem usage=72.29 GB.", NOISE[1]]
    return "\n".join(lines + tail)


def test_summary_takes_minimum_over_ranks_and_sums_graphs() -> None:
    p = [94.0 + 0.01 * r for r in range(8)]
    a = [21.71 + 0.02 * (7 - r) for r in range(8)]
    tail = [f"[2026-02-10 10:02:00 TP{r}] KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB" for r in range(8)]
    tail += ["[2026-02-10 10:02:01 TP0] Capture cuda graph end. Time elapsed: 20.0 s. mem usage=1.10 GB. avail mem=9.00 GB.",
             "[2026-02-10 10:02:01 TP3] Capture cuda graph end. Time elapsed: 20.0 s. mem usage=1.20 GB. avail mem=9.00 GB.",
             "[2026-02-10 10:02:02 TP3] Capture piecewise CUDA graph end. Time elapsed: 9.0 s. mem usage=0.30 GB. avail mem=8.7 GB.",
             "[2026-02-10 10:02:05 TP0] max_total_num_tokens=159277, chunked_prefill_size=8192, max_prefill_tokens=16384, "
             "max_running_requests=2048, context_len=131072, available_gpu_mem=8.60 GB",
             "[2026-02-10 10:02:30] The server is fired up and ready to roll!"]
    s = summarize(parse_log(_tp8_log(p, a, tail)))
    assert s["p_gib"] == 94.0 and s["a_gib"] == 21.71 and s["weights_gib"] == 72.29
    assert s["kv_tokens"] == 159277 and s["kv_gib"] == 10.42 and s["graph_gib"] == pytest.approx(1.5)
    assert s["max_running_requests"] == 2048 and s["context_len"] == 131072
    assert s["ready"] and s["failure_kind"] is None and s["ranks"] == list(range(8))


def test_summary_prefers_specific_failure_and_upgrades_oom_during_capture() -> None:
    tail = ["[2026-02-10 10:02:01 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=0.50 GB",
            "[2026-02-10 10:02:02] Scheduler hit an exception: Traceback (most recent call last):",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB.",
            "[2026-02-10 10:02:03] Received sigquit from a child process. It usually means the child failed."]
    s = summarize(parse_log(_tp8_log([94.0] * 8, [21.71] * 8, tail)))
    assert s["failure_kind"] == "graph_capture_oom" and "CUDA out of memory" in s["evidence"]
    assert not s["ready"] and s["kv_tokens"] is None and s["graph_gib"] is None


def test_summary_of_kv_oom_at_seed_values() -> None:
    tail = ["RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: self.server_args.mem_fraction_static=0.55"]
    s = summarize(parse_log(_tp8_log([94.0] * 8, [21.71] * 8, tail)))
    assert (s["p_gib"], s["a_gib"], s["failure_kind"]) == (94.0, 21.71, "kv_oom")
    assert summarize([])["p_gib"] is None and summarize([])["failure_kind"] is None


_LOGS = Path(__file__).resolve().parent / "data" / "logs"


def test_eagle_log_roles_per_rank() -> None:


    events = parse_log((_LOGS / "eagle-0.5.9.log").read_text())
    loads = [e for e in events if e.kind == "weights_loaded" and e.rank == 3]
    assert [e.values["role"] for e in loads] == ["target", "draft"]
    assert loads[1].values["avail_gib"] == pytest.approx(7.53)
    s = summarize(events)
    assert (s["p_gib"], s["a_gib"], s["kv_gib"]) == (pytest.approx(94.0), pytest.approx(21.71), pytest.approx(10.42))
    assert s["draft_seen"] and s["log_wording"] == "0.5.9"


def test_min_over_all_lines_would_take_the_drafts() -> None:
    """What the old summary did: the draft's 9.0 / 7.5 are the minimum over all Load weight lines."""


    events = parse_log((_LOGS / "eagle-0.5.9.log").read_text())
    begins = [e.values["avail_gib"] for e in events if e.values.get("source") == "load_weight_begin"]
    assert min(begins) == pytest.approx(9.0)


@pytest.mark.parametrize("name", ["eagle-0.5.9.log", "eagle-0.5.23.log"])
def test_the_live_watcher_reads_the_targets_lines_and_spares_a_speculative_launch(name: str) -> None:
    """The live watcher sees one line at a time: the draft runner's later "Load weight" lines
    (avail mem 9.0 / 7.5 on the 0.5.9 log) must neither become P and A nor prove the formula
    negative and kill a launch that started (f 0.88 on the 0.5.9 log)."""
    from autotune.trial.live_kill import LiveKill

    path = _LOGS / name
    killed: list[str] = []

    class Target:
        def kill_now(self, kind: str, evidence: str) -> None:
            killed.append(evidence)

    watcher = LiveKill(0.88, None)
    watcher.server = Target()
    for line in path.read_text().splitlines():
        watcher(line)
    assert killed == []
    live = summarize(watcher.events)
    whole = summarize(parse_log(path.read_text()))
    assert (live["p_gib"], live["a_gib"], live["kv_gib"]) == (whole["p_gib"], whole["a_gib"], whole["kv_gib"])
    assert live["draft_seen"]


def test_hybrid_swa_second_pool_is_the_targets_not_a_draft() -> None:
    """sglang PR #15464 (MiMo-V2-Flash, TP4): before 0.5.23 the full and SWA pools were two bare lines per rank."""
    log = "\n".join([
        "[2025-12-19 07:42:57 TP2] KV Cache is allocated. #tokens: 1496958, K size: 41.76 GB, V size: 27.84 GB",
        "[2025-12-19 07:42:57 TP2] KV Cache is allocated. #tokens: 1496958, K size: 4.82 GB, V size: 3.21 GB",
        "[2025-12-19 07:42:57 TP2] SWAKVPool mem usage: 77.63 GB, swa size: 1496958, full size: 1496958",
        "[2025-12-19 07:42:57 TP2] Memory pool end. avail mem=22.56 GB",
    ])
    events = parse_log(log)
    swa = [e for e in events if e.kind == "swa_pool"]
    assert len(swa) == 1 and swa[0].values == {"kv_gib": 77.63, "swa_tokens": 1496958, "full_tokens": 1496958,
                                               "upper_bound": False}
    s = summarize(events)
    assert s["kv_gib"] == 77.63 and s["kv_tokens"] == 1496958
    assert s["draft_seen"] is False  # a draft_seen launch is never used to calibrate


def test_labelled_swa_pool_0_5_23_is_the_targets() -> None:
    log = "\n".join([
        "[2026-11-01 10:00:00 TP0] Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1000, K size: 1.00 GB, V size: 1.00 GB",
        "[2026-11-01 10:00:00 TP0] SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 800, K size: 0.10 GB, V size: 0.10 GB",
        "[2026-11-01 10:00:00 TP0] SWAKVPool mem usage: 2.20 GB, swa size: 800, full size: 1000",
    ])
    events = parse_log(log)
    assert [e.values["role"] for e in events if e.kind == "kv_allocated"] == ["target", "target"]
    s = summarize(events)
    assert s["kv_gib"] == 2.2 and s["draft_seen"] is False


def test_unlabelled_second_kv_line_without_swa_pool_is_still_the_draft() -> None:
    log = "\n".join([
        "[2026-11-01 10:00:00 TP0] KV Cache is allocated. #tokens: 1000, K size: 1.00 GB, V size: 1.00 GB",
        "[2026-11-01 10:00:01 TP0] KV Cache is allocated. #tokens: 1000, K size: 0.05 GB, V size: 0.05 GB",
    ])
    s = summarize(parse_log(log))
    assert s["draft_seen"] is True and s["kv_gib"] == 2.0


# A line is read in time linear in its length (a 256 MiB log may be one line). These lines of 40 KB took
# seconds each when a pattern restarted its scan at every position (``(.*?)KV Cache``, ``Capture (?:\w+ )*``,
# ``(\w+)=`` over a run of word characters); their result is what the short line's is.
HOSTILE = 40_000


@pytest.mark.parametrize("line", [
    "x" * HOSTILE,
    "Capture " * (HOSTILE // 8),
    "Capture " * (HOSTILE // 8) + "- CUDA graph failed",
    "SWA pool " * (HOSTILE // 9),
    "[2026-12-06 00:39:38] " + "Capture target " * (HOSTILE // 15),
])
def test_a_long_line_of_near_misses_is_noise(line: str) -> None:
    assert parse_line(line) is None


def test_long_lines_still_parse_as_their_short_forms() -> None:
    kv = parse_line("x" * HOSTILE + " KV Cache is allocated. #tokens: 38246, K size: 4.67 GB, V size: 4.67 GB")
    assert kv is not None and kv.kind == "kv_allocated" and kv.values["tokens"] == 38246
    assert kv.values["kv_gib"] == pytest.approx(9.34) and kv.values["label"] == "x" * HOSTILE
    labelled = parse_line("[2026-01-01 00:00:00 TP1] SWA KV Cache is allocated. #tokens: 7, KV size: 1.5 GB")
    assert labelled is not None and labelled.rank == 1 and labelled.values["label"] == "SWA"
    mtt = parse_line("max_total_num_tokens=5, " + "a" * HOSTILE + ", context_len=4096")
    assert mtt is not None and mtt.values["max_total_num_tokens"] == 5 and mtt.values["context_len"] == 4096
    swa = parse_line("SWA pool " * (HOSTILE // 9) + " cannot hold even one request")
    assert swa is not None and swa.failure_kind == FailureKind.KV_OOM.value
    graph = parse_line("Capture " * (HOSTILE // 8) + "prefill CUDA graph failed: CUDA out of memory")
    assert graph is not None and graph.failure_kind == FailureKind.GRAPH_CAPTURE_OOM.value
    loaded = parse_line("Load weight end. " * (HOSTILE // 17) + "type=LlamaForCausalLM, dtype=torch.bfloat16")
    assert loaded is not None and summarize([loaded])["log_wording"] == "0.5.9"
