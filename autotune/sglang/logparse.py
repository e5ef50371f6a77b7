"""Parse SGLang startup logs (both generations: 0.5.9 and 0.5.23 wording; real ones in
``tests/data/public_logs/``) into events.

Each recognised line becomes a :class:`LogEvent`; everything else is noise and
is skipped. Sizes printed as "GB" by SGLang are GiB and are reported as
``*_gib``. :func:`summarize` reduces a run's events to the observed memory
facts, taking P and A as the minimum over ranks as SGLang itself does, over
the target's lines only (a speculative launch's draft runner prints the same
lines again; see :func:`parse_log`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from autotune.limits import clip
from autotune.outcome import FailureKind

__all__ = ["LogEvent", "RoleTagger", "is_target", "figure_past", "parse_line", "parse_log", "summarize", "log_wording",
           "EVENT_KINDS"]

EVENT_KINDS = frozenset(
    {"baseline", "weights_loaded", "kv_allocated", "swa_pool", "mamba_allocated", "memory_pool_end", "graph_begin",
     "graph_batch_sizes", "graph_captured", "max_total_num_tokens", "symm_mem_prealloc", "ready", "failure"}
)


@dataclass(frozen=True)
class LogEvent:
    """One recognised log line. ``rank`` is the TP rank of the ``[... TP5]`` prefix (None if absent)."""

    kind: str
    rank: int | None
    values: dict[str, Any] = field(default_factory=dict)
    failure_kind: str | None = None
    line: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_PREFIX = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(?P<tags>(?: [A-Z_]+\d+)*)\]")
_TAG = re.compile(r"([A-Z_]+?)(\d+)$")
# A figure in an exponent's form too (never SGLang's "%.2f"), so that one is read, as inf past 1e308, and
# refused (figure_past) rather than taken for a line without the figure.
_AVAIL = re.compile(r"avail mem=([\d.]+(?:e[+-]?\d+)?) ?GB")
_USAGE = re.compile(r"mem usage=([\d.]+(?:e[+-]?\d+)?) ?GB")
_ELAPSED = re.compile(r"(?:elapsed=|Time elapsed: )([\d.]+) ?s")
_NUM = r"(-?[\d.]+)"
_KV_LINE = re.compile(r"KV Cache (?:is allocated|VA upper bound)\.")


def _f(pattern: re.Pattern[str], text: str) -> float | None:
    m = pattern.search(text)
    return float(m.group(1)) if m else None


def _prefix(line: str) -> tuple[int | None, dict[str, int]]:
    m = _PREFIX.search(line)
    tags: dict[str, int] = {}
    if m and m["tags"]:
        for tag in m["tags"].split():
            t = _TAG.match(tag)
            if t:
                tags[t.group(1).lower()] = int(t.group(2))
    rank = tags.get("tp")
    if m and rank is None:
        rank = 0 if not tags else tags.get("tp")
    return rank, tags


# Failures, most specific first: (needle regex, failure kind).
#
# Every pattern applied to a log line is linear in the line's length (a 256 MiB log may be one line):
# a search restarts at every position, so a pattern that can scan to the end of the line from each
# of them is quadratic (``Capture (?:\w+ )*`` on ``Capture`` repeated took 0.9 s at 40 KB). "A .* B"
# is written ``^(?>.*?A).*B``: one start, committed to the first A (a later A has less line after it,
# so it cannot match where the first did not). The words between "Capture" and "CUDA graph" are at
# most 4 (SGLang prints 0 to 2: "Capture cuda graph failed", "Capture prefill CUDA graph failed"), so
# each start reads a bounded number of words.
_FAILURES: tuple[tuple[re.Pattern[str], FailureKind], ...] = (
    (re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static"), FailureKind.KV_OOM),
    (re.compile(r"Loaded weights leave no GPU memory for the KV cache"), FailureKind.KV_OOM),
    (re.compile(r"Memory pool size is too small"), FailureKind.KV_OOM),
    (re.compile(r"Not enough GPU memory for hybrid \(mamba"), FailureKind.KV_OOM),
    (re.compile(r"^(?>.*?SWA pool ).* cannot hold even one request"), FailureKind.KV_OOM),
    (re.compile(r"Capture (?:\w++ ){0,4}(?:cuda|CUDA) graph failed"), FailureKind.GRAPH_CAPTURE_OOM),
    (re.compile(r"The memory capacity is unbalanced"), FailureKind.MEMORY_IMBALANCE),
    (re.compile(r"(?:Prefill|Decode) out of memory|KV cache pool is full|alloc_req_slots runs out of memory"
                r"|Out of memory even after retracting"), FailureKind.RUNTIME_OOM),
    (re.compile(r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError"), FailureKind.CUDA_OOM),
    (re.compile(r"[Aa]ddress already in use"), FailureKind.PORT_IN_USE),
    (re.compile(r"^\S*: error: |error: (?:unrecognized arguments|ambiguous option|argument --)"), FailureKind.INVALID_ARGS),
    (re.compile(r"Scheduler hit an exception|Received sigquit from a child process|Rank \d+ scheduler is dead"
                r"|Initialization failed\. warmup error"), FailureKind.CRASHED),
)


def _parse_kv(text: str) -> dict[str, Any]:
    """``a=1, b=2.5 GB`` pairs into a dict (ints, floats, or strings)."""
    out: dict[str, Any] = {}
    # \b: a key starts a word (a value ends at a comma or a space, so no key starts mid-word); without
    # it a run of word characters was tried from each of its positions, quadratic in its length.
    for key, raw in re.findall(r"\b(\w++)=([^,\s]+)", text):
        val: Any = raw
        try:
            val = int(raw)
        except ValueError:
            try:
                val = float(raw)
            except ValueError:
                pass
        out[key] = val
    return out


def parse_line(line: str) -> LogEvent | None:
    """Parse one log line; ``None`` for lines that carry nothing autotune uses, and for a line whose
    figures are not numbers SGLang prints (``avail mem=1.2.3 GB``, an integer of 4,300+ digits). A figure
    too large for a float reads as inf: kept, for its reader to refuse (``calibrate`` names it)."""
    try:
        return _parse_line(line)
    except (ValueError, OverflowError):
        return None


def _parse_line(line: str) -> LogEvent | None:
    text = line.rstrip("\r\n")
    if not text.strip():
        return None
    rank, tags = _prefix(text)
    base: dict[str, Any] = {k: v for k, v in tags.items() if k != "tp"}

    def ev(kind: str, values: dict[str, Any], failure: FailureKind | None = None) -> LogEvent:
        return LogEvent(kind, rank, {**base, **values}, failure.value if failure else None, text)

    m = re.search(r"is larger than the profiled value (-?\d+)", text)
    if m:
        profiled = int(m.group(1))
        if profiled <= 0:
            return ev("failure", {"profiled_tokens": profiled}, FailureKind.KV_OOM)
        return None
    for needle, kind in _FAILURES:
        if needle.search(text):
            values: dict[str, Any] = {}
            fm = re.search(r"mem[_-]fraction[_-]static=([\d.]+)", text)
            if fm:
                values["mem_fraction_static"] = float(fm.group(1).rstrip("."))
            fm = re.search(r"Raise --mem-fraction-static above ([\d.]+)", text)
            if fm:
                values["min_viable_mem_fraction"] = float(fm.group(1).rstrip("."))
            return ev("failure", values, kind)

    if "The server is fired up and ready to roll" in text:
        return ev("ready", {})
    if "Init torch distributed ends" in text or "Memory baseline taken" in text:
        return ev("baseline", {"mem_usage_gib": _f(_USAGE, text), "elapsed_s": _f(_ELAPSED, text)})
    if "Load weight begin" in text:
        return ev("baseline", {"avail_gib": _f(_AVAIL, text), "source": "load_weight_begin"})
    if "Load weight end" in text:
        arch = re.search(r"type=(\w+)", text)
        dtype = re.search(r"dtype=(torch\.\w+)", text)
        return ev("weights_loaded", {
            "avail_gib": _f(_AVAIL, text), "mem_usage_gib": _f(_USAGE, text), "elapsed_s": _f(_ELAPSED, text),
            "architecture": arch.group(1) if arch else None, "dtype": dtype.group(1) if dtype else None,
        })
    m = _KV_LINE.search(text)
    if m:
        # The label before it and the rest after it, by position: "(.*?)KV Cache" restarted its lazy scan
        # at every position of a line that lacks the words, quadratic (80 KB took 29 s).
        rest = text[m.end():].split("\n", 1)[0]
        head = text[text.rfind("\n", 0, m.start()) + 1:m.start()]
        label = re.sub(r"^\[[^\]]*\]\s*", "", head).strip() or None
        tokens = re.search(r"#tokens: (\d+)", rest)
        k = re.search(r"\bK size: ([\d.]+) ?GB", rest)
        vv = re.search(r"\bV size: ([\d.]+) ?GB", rest)
        kv = re.search(r"\bKV size: ([\d.]+) ?GB", rest)
        dtype = re.search(r"dtype: (torch\.\w+)", rest)
        k_gib = float(k.group(1)) if k else None
        v_gib = float(vv.group(1)) if vv else None
        total = float(kv.group(1)) if kv else ((k_gib or 0.0) + (v_gib or 0.0) if k_gib is not None else None)
        return ev("kv_allocated", {
            "tokens": int(tokens.group(1)) if tokens else None, "k_gib": k_gib, "v_gib": v_gib, "kv_gib": total,
            "dtype": dtype.group(1) if dtype else None, "label": label,
            "draft": bool(label and "draft" in label.lower()), "upper_bound": "VA upper bound" in text,
        })
    m = re.search(r"SWAKVPool (?:mem usage|VA upper bound): ([\d.]+) ?GB, swa size: (\d+), full size: (\d+)", text)
    if m:
        # A hybrid sliding-window model's two pools together (SWATokenToKVPoolAllocator; 0.5.23
        # mem_cache/swa_memory_pool.py:133): the per-pool lines before it are both the target's.
        return ev("swa_pool", {"kv_gib": float(m.group(1)), "swa_tokens": int(m.group(2)),
                               "full_tokens": int(m.group(3)), "upper_bound": "VA upper bound" in text})
    if "Mamba Cache is allocated" in text:
        size = re.search(r"max_mamba_cache_size: (\d+)", text)
        conv = re.search(r"conv_state size: ([\d.]+) ?GB", text)
        ssm = re.search(r"ssm_state size: ([\d.]+) ?GB", text)
        return ev("mamba_allocated", {
            "max_mamba_cache_size": int(size.group(1)) if size else None,
            "conv_gib": float(conv.group(1)) if conv else None, "ssm_gib": float(ssm.group(1)) if ssm else None,
        })
    if "Memory pool end" in text:
        return ev("memory_pool_end", {"avail_gib": _f(_AVAIL, text)})
    m = re.search(r"Capture (?:(target|draft) )?(?:(\w+) )?(?:CUDA|cuda) graph (begin|end)", text)
    if m:
        role, phase, which = m.group(1) or "target", m.group(2), m.group(3)
        phase = "prefill" if phase == "piecewise" else (phase or "decode")
        values = {"avail_gib": _f(_AVAIL, text), "role": role, "phase": phase, "piecewise": "piecewise" in text}
        if which == "begin":
            for key in ("backend", "num_tokens_per_req", "num_tokens"):
                km = re.search(rf"\b{key}=([\w.]+)", text)
                if km:
                    values[key] = int(km.group(1)) if km.group(1).isdigit() else km.group(1)
            return ev("graph_begin", values)
        values["graph_gib"] = _f(_USAGE, text)
        values["elapsed_s"] = _f(_ELAPSED, text)
        bs = re.search(r"bs=\[([\d, ]*)\]", text)
        if bs:
            values["batch_sizes"] = [int(x) for x in bs.group(1).split(",") if x.strip()]
        return ev("graph_captured", values)
    m = re.search(r"Capture cuda graph bs \[([\d, .]*)\]", text)
    if m:
        return ev("graph_batch_sizes", {"batch_sizes": [int(x) for x in re.findall(r"\d+", m.group(1))]})
    m = re.search(r"(max_total_num_tokens=\d+.*)", text)
    if m:
        values = _parse_kv(m.group(1))
        avail = _f(re.compile(r"available_gpu_mem=([\d.]+)"), text)
        if avail is not None:
            values["available_gpu_mem_gib"] = avail
            values.pop("available_gpu_mem", None)
        return ev("max_total_num_tokens", values)
    m = re.search(r"Pre-allocating symmetric memory pool with ([\d.]+) GiB", text)
    if m:
        return ev("symm_mem_prealloc", {"gib": float(m.group(1))})
    return None


#: Labels of a pool the target itself allocates after its first one (0.5.23 "SWA KV Cache is allocated").
_TARGET_POOL_LABELS = frozenset({"SWA"})


def _role_key(e: LogEvent) -> str | None:
    """The lines a speculative launch prints twice per rank, unlabelled: once for the target, then the draft."""
    if e.kind == "baseline" and e.values.get("source") == "load_weight_begin":
        return "load_weight_begin"
    if e.kind == "weights_loaded":
        return "weights_loaded"
    if e.kind == "kv_allocated" and not e.values.get("draft") and e.values.get("label") not in _TARGET_POOL_LABELS:
        return "kv_allocated"
    return None


class RoleTagger:
    """Tags a stream of events with ``role``, line by line (the live watcher sees one line at a time).

    "Load weight begin/end" and "KV Cache is allocated" get ``role``: the first
    of each per rank is the target's, later ones the draft model runner's (it
    logs the same unlabelled lines: 0.5.9 ``model_runner.py:897``, 0.5.23 ``:1274``).
    """

    def __init__(self) -> None:
        self._seen: set[tuple[int | None, str]] = set()

    def tag(self, e: LogEvent) -> LogEvent:
        key = _role_key(e)
        if key is not None:
            role = "draft" if (e.rank, key) in self._seen else "target"
            self._seen.add((e.rank, key))
            return LogEvent(e.kind, e.rank, {**e.values, "role": role}, e.failure_kind, e.line)
        if e.kind == "kv_allocated":  # a line labelled as the draft's, or the target's second (SWA) pool
            role = "draft" if e.values.get("draft") else "target"
            return LogEvent(e.kind, e.rank, {**e.values, "role": role}, e.failure_kind, e.line)
        return e


def is_target(e: LogEvent) -> bool:
    """Whether ``e`` is about the target model (not a speculative draft's runner)."""
    return bool(e.values.get("role", "target") == "target")


def parse_log(text: str | Iterable[str]) -> list[LogEvent]:
    """Parse a whole log. A CUDA OOM seen while graphs are being captured becomes ``graph_capture_oom``.

    Events are tagged by :class:`RoleTagger` (target or draft).
    """
    lines = text.splitlines() if isinstance(text, str) else list(text)
    events: list[LogEvent] = []
    capturing = False
    tagger = RoleTagger()
    for line in lines:
        e = parse_line(line)
        if e is None:
            continue
        e = tagger.tag(e)
        if e.kind == "graph_begin":
            capturing = True
        elif e.kind in ("graph_captured", "max_total_num_tokens", "ready"):
            capturing = False
        elif e.kind == "failure" and capturing and e.failure_kind == FailureKind.CUDA_OOM.value:
            e = LogEvent(e.kind, e.rank, e.values, FailureKind.GRAPH_CAPTURE_OOM.value, e.line)
        events.append(e)
    return events


def figure_past(events: Iterable[LogEvent], limit_gib: float) -> str | None:
    """The first ``avail mem=`` or ``mem usage=`` figure of the recognised lines that is no amount of one GPU's
    memory, a finite number of GiB at most ``limit_gib`` (400 digits, or ``1e999``, read as inf), as the log
    wrote it and clipped: ``mem usage=99999... GB``; None when every one is."""
    for e in events:
        for rx, label in ((_AVAIL, "avail mem"), (_USAGE, "mem usage")):
            m = rx.search(e.line)
            if m is None:
                continue
            try:
                value = float(m.group(1))
            except ValueError:  # "1.2.3": parse_line skipped its line
                continue
            if not value <= limit_gib:
                return f"{label}={clip(m.group(1), 40)} GB"
    return None


_GENERIC = {FailureKind.CRASHED.value}
#: The failure line kept as the summary's evidence (the study stores a trial's evidence cut to 2,000 too).
EVIDENCE_CHARS = 2000


def _min(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return min(vals) if vals else None


def _max(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


def _reconcile_swa(evs: list[LogEvent]) -> list[LogEvent]:
    """A rank's unlabelled second KV line followed by its "SWAKVPool" line is its SWA pool, not a draft's.

    Before 0.5.23 labelled them, a hybrid sliding-window launch (GPT-OSS, Gemma 3, MiMo-V2) logged its
    full and SWA pools as two bare "KV Cache is allocated" lines per rank, which the tagger, seeing one
    line at a time, takes for target then draft (public log: sglang PR #15464).
    """
    out = list(evs)
    for i, e in enumerate(out):
        if e.kind != "swa_pool":
            continue
        for j in range(i - 1, -1, -1):
            prev = out[j]
            if prev.rank != e.rank:
                continue
            if prev.kind != "kv_allocated":
                break
            if prev.values.get("role") == "draft" and not prev.values.get("label"):
                out[j] = LogEvent(prev.kind, prev.rank, {**prev.values, "role": "target", "label": "SWA"},
                                  prev.failure_kind, prev.line)
    return out


def summarize(events: Iterable[LogEvent]) -> dict[str, Any]:
    """Observed facts of one launch; ``None`` where the log did not show them.

    Keys: p_gib, a_gib (both MIN over ranks), weights_gib, baseline_usage_gib,
    kv_tokens, kv_gib (both pools of a hybrid sliding-window model together), kv_dtype, pool_end_avail_gib, graph_gib (per-rank sum of
    the captures, max over ranks), graph_batch_sizes, max_running_requests,
    context_len, chunked_prefill_size, max_prefill_tokens, available_gpu_mem_gib,
    ready, failure_kind (most specific seen), evidence (its line), ranks.
    """
    evs = _reconcile_swa(list(events))
    by = lambda kind: [e for e in evs if e.kind == kind]  # noqa: E731

    target = is_target
    base = [e for e in by("baseline") if target(e)]
    loaded = [e for e in by("weights_loaded") if target(e)]
    kv = [e for e in by("kv_allocated") if not e.values.get("draft") and target(e)]
    mtt = by("max_total_num_tokens")
    graph_per_rank: dict[int | None, float] = {}
    for e in by("graph_captured"):
        g = e.values.get("graph_gib")
        if g is not None:
            graph_per_rank[e.rank] = graph_per_rank.get(e.rank, 0.0) + g
    failures = by("failure")
    specific = [e for e in failures if e.failure_kind not in _GENERIC]
    first_failure: LogEvent | None = (specific or failures)[0] if (specific or failures) else None
    # a count only where the line printed a number (``max_total_num_tokens=5x`` was a ValueError here)
    last_mtt = {k: v for k, v in (mtt[-1].values if mtt else {}).items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}
    kv_tokens = last_mtt.get("max_total_num_tokens")
    if kv_tokens is None:
        kv_tokens = _min(e.values.get("tokens") for e in kv)
    bs_lists = [e.values["batch_sizes"] for e in by("graph_batch_sizes")] + [
        e.values["batch_sizes"] for e in by("graph_captured") if e.values.get("batch_sizes")
    ]
    return {
        "p_gib": _min(e.values.get("avail_gib") for e in base),
        "a_gib": _min(e.values.get("avail_gib") for e in loaded),
        "weights_gib": _max(e.values.get("mem_usage_gib") for e in loaded),
        "baseline_usage_gib": _max(e.values.get("mem_usage_gib") for e in base),
        # inf (a 5,000-digit count) stays a float for calibrate to refuse: int() of it was an OverflowError
        "kv_tokens": int(kv_tokens) if kv_tokens is not None and math.isfinite(kv_tokens) else kv_tokens,
        "kv_gib": _min(e.values.get("kv_gib") for e in (by("swa_pool") or kv)),
        "kv_dtype": next((e.values["dtype"] for e in kv if e.values.get("dtype")), None),
        "pool_end_avail_gib": _min(e.values.get("avail_gib") for e in by("memory_pool_end")),
        "graph_gib": max(graph_per_rank.values()) if graph_per_rank else None,
        "graph_batch_sizes": bs_lists[0] if bs_lists else None,
        "max_running_requests": last_mtt.get("max_running_requests"),
        "context_len": last_mtt.get("context_len"),
        "chunked_prefill_size": last_mtt.get("chunked_prefill_size"),
        "max_prefill_tokens": last_mtt.get("max_prefill_tokens"),
        "available_gpu_mem_gib": last_mtt.get("available_gpu_mem_gib"),
        "ready": bool(by("ready")),
        "failure_kind": first_failure.failure_kind if first_failure else None,
        "evidence": first_failure.line[:EVIDENCE_CHARS] if first_failure else None,
        "ranks": sorted({e.rank for e in evs if e.rank is not None}),
        "draft_seen": any(e.values.get("role") == "draft" for e in evs),
        "log_wording": log_wording(evs),
    }


#: Lines only one generation prints (0.5.9 vs 0.5.23 wording; examples in tests/data/public_logs/).
_MODERN_MARKERS = re.compile(r"Memory baseline taken|Init parallel (?:begin|ends)|KV Cache is allocated\. dtype: "
                             r"|Capture (?:target|draft) \w+ CUDA graph|Loaded weights leave no GPU memory")
_CLASSIC_MARKERS = re.compile(r"Init torch distributed ends|^(?>.*?Load weight end\. ).*dtype=torch\.|Capture cuda graph end"
                              r"|KV Cache is allocated\. #tokens|self\.server_args\.mem_fraction_static=")


def log_wording(events: Iterable[LogEvent]) -> str | None:
    """Which generation's wording the lines are in: ``"0.5.23"`` (0.5.14+ wording seen), ``"0.5.9"``, or None."""
    lines = [e.line for e in events]
    if any(_MODERN_MARKERS.search(ln) for ln in lines):
        return "0.5.23"
    if any(_CLASSIC_MARKERS.search(ln) for ln in lines):
        return "0.5.9"
    return None
