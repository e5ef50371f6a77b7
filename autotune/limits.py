"""Every bound autotune puts on its input, in one place, and the one way a value is echoed in an error.

A bad input gets one line naming the field and the value, exit code 2, before anything starts;
these limits are what keep a small file from eating the machine on the way there (see
``docs/input-limits.md``, which lists each with its reason).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "BATCH_TOKENS", "DATASET_BYTES", "GRID_AXIS", "GRID_CANDIDATES", "JSON_BYTES", "LOG_BYTES", "MAX_CHOICES",
    "MAX_COUNT", "MAX_KNOB_INT", "MAX_LAYERS", "MAX_PROMPTS", "MAX_PROMPT_TOKENS", "MAX_QUANT_PATTERNS", "MAX_REFERENCES",
    "MAX_REGEX_WORK", "MAX_GPU_HOURS", "MAX_SEED", "MAX_SEND_S", "MAX_SEQUENCE_TOKENS", "MAX_SIM_FACTOR", "MAX_STUDY_FLAGS",
    "MAX_STUDY_S", "MAX_WAIT_S", "MIN_TIME_SCALE", "PROMPT_LINE_BYTES",
    "SERVER_LOG_BYTES", "SERVER_LOG_END_BYTES", "SERVER_LOG_HEAD_BYTES", "SHOWN_CHARS", "STUDY_BYTES", "YAML_DEPTH", "YAML_NODES", "clip", "shown",
]

#: A study file (YAML): the demo is 3 KiB.
STUDY_BYTES = 1 * 2**20
#: Values a YAML document may hold once its aliases are expanded (a 24-line alias bomb expands to 10^9).
YAML_NODES = 100_000
#: Nesting of a YAML document (a study is 5 deep; Python's recursion limit is near 330 YAML levels).
YAML_DEPTH = 64
#: A JSON file of a model directory (config.json, model.safetensors.index.json: DeepSeek V3's is 9 MB,
#: tokenizer.json: tens of MB).
JSON_BYTES = 64 * 2**20
#: Decoder layers of a model: config.json's ``num_hidden_layers`` (the model's, its text or vision config's)
#: and the length of a per-layer list or pattern (``layer_types``, ``hybrid_override_pattern``,
#: ``compress_ratios``, ...). The deepest served models have 126 (Llama 3.1 405B), and 8x that still
#: costs well under a second: the weight, KV and quantization rules walk every layer (DSA with its indexer
#: about 0.6 ms a layer), so 10^7 layers took 83 s and 2^40 was a MemoryError.
MAX_LAYERS = 1024
#: Entries of a quantization config's ignore / exclude list (``ignore``, ``exclude_modules``,
#: ``modules_to_not_convert``, ``ignored_layers``), each matched against every layer's module names:
#: GLM-5.2's NVFP4 checkpoint lists 156 for 78 layers, Qwen3-235B's FP8 283 for 94.
MAX_QUANT_PATTERNS = 4096
#: Work a quantization ignore list's ``re:`` patterns may cost, in ways to backtrack times module names
#: tried (``autotune.sglang.models.regex_cost``, ``quant._Patterns``; a repeat inside a repeat is refused
#: whatever its count): each pattern of the list gets an equal share. The slowest shape measured, ``.?`` 14
#: times (16,384 ways), took 4.8 s at 1,024 layers (10 names a layer: 1.7 x 10^8), ``.*.*.*.*!`` (230,300
#: ways) 2.9 s over 12,288 names (2.8 x 10^9); what checkpoints write (``.*layers\.\d+\.(self_)?attn.*``)
#: takes milliseconds and is within a lone pattern's share up to 220 layers (Llama-3.1-405B has 126).
MAX_REGEX_WORK = 200_000_000
#: A data set, a trace or a prompt file (ShareGPT V3, bench_serving's usual data set, is 673 MB).
DATASET_BYTES = 2 * 2**30
#: One line of a prompt file (JSONL), which is read a line at a time: a prompt of MAX_SEQUENCE_TOKENS
#: token ids is at most 80 MB of text (a 6-digit id and ", "), its text form about 40-50 MB. A 1 GiB file
#: without a newline was one line, held whole: 10.5 s and 2.1 GB before it was refused as not JSON.
PROMPT_LINE_BYTES = 128 * 2**20
#: A server log given to ``autotune calibrate``.
LOG_BYTES = 256 * 2**20
#: The log file a launched server writes, counted from where its launch began (the file is opened for
#: append): past it, the log's reader cuts out its middle (``autotune.launch.tail``), keeping the launch's
#: first SERVER_LOG_HEAD_BYTES and last SERVER_LOG_END_BYTES with a marker line between them, and the
#: server writes on after them, never stopped. A server that floods its log (a broken or hostile build,
#: ``--log-level debug`` under load) filled the disk its run directory is on during a long trial. Half of
#: LOG_BYTES, so a launch's own log (the cap and what the server writes between two checks, 50 ms apart) can
#: be given to ``calibrate --from-log``; SGLang's info log grows a few hundred bytes a second.
SERVER_LOG_BYTES = LOG_BYTES // 2
#: The start of a launch's log a cut keeps (to its last whole line): its startup, which calibration and the
#: failure diagnosis read (a TP-8 startup logs well under 1 MiB).
SERVER_LOG_HEAD_BYTES = 8 * 2**20
#: The end of a launch's log a cut keeps (from a line's start): what the reader may not have read yet (one
#: read, ``tail.READ_BYTES``) and a failure's tail (the last 1 MiB, ``trial.live.TAIL_BYTES``).
SERVER_LOG_END_BYTES = 4 * 2**20
#: Choices of one knob of the search space.
MAX_CHOICES = 10_000
#: Candidates ``autotune plan`` lists (or ``--set`` makes): the demo's grid is 11,040.
GRID_CANDIDATES = 100_000
#: Values of one axis an exhaustive grid (``sampler.kind: grid``) enumerates; a designed start samples
#: larger axes instead of listing them.
GRID_AXIS = 100_000
#: Flags and environment variables one study sets or searches by name, together: the distinct ``--flags``
#: of ``server.extra_args`` plus ``search_space.flags`` and ``search_space.env``. SGLang has about 600
#: flags in all and a study sets a handful; each is judged against the release's parser for every
#: candidate, and a 300 KB study of 6,000 unknown flags took 114 s before its first launch.
MAX_STUDY_FLAGS = 256
#: Named launch points of ``search.references`` (the seed's hand-passed start, a colleague's value): each is
#: one launch right after the baseline, so together with the baseline they must also fit ``n_trials``.
MAX_REFERENCES = 64
#: The simulated server's clock: ``server.sim.time_scale`` (modelled seconds per wall second, 20 in the
#: demo) from MIN_TIME_SCALE to MAX_SIM_FACTOR, and a ``slow_tokens:FACTOR`` fault at most MAX_SIM_FACTOR.
#: They multiply and divide every duration of a trial: 1e308 made each trial an OverflowError, and a
#: scale of 1e-300 a sleep of forever.
MIN_TIME_SCALE = 1e-3
MAX_SIM_FACTOR = 1e6
#: A count or a size read from a file, where nothing tighter applies: config.json's (``hidden_size``,
#: ``num_experts``) and a server log's ``server_args`` (``tp_size``, ``dp_size``). Past it a number is
#: no count (2^40 bytes is a TiB), and arithmetic on it overflows a float.
MAX_COUNT = 2**40
#: An integer knob value (batch sizes, token counts): SGLang holds them in int32 tensors.
MAX_KNOB_INT = 2**31 - 1
#: A seed (numpy's and optuna's samplers take 0 .. 2**32 - 1).
MAX_SEED = 2**32 - 1
#: A prompt's or a completion's length in tokens (the longest context windows served hold 10M).
MAX_SEQUENCE_TOKENS = 10_000_000
#: Requests of one load point (each is built before the load point starts): also the bound on a workload
#: kind's counts (shared-prefix groups x prompts per group, conversations x turns, a trace's rows replayed).
#: bench_serving's usual runs send 1,000 to 10,000.
MAX_PROMPTS = 1_000_000
#: Tokens of all the prompts one load point builds together, whatever its kind: synthetic prompts and
#: their warm-up, a shared-prefix workload's groups, a multi-turn workload's turns and the replies its
#: histories hold, a trace's requests (and, apart, the hash blocks they are cut from). They are built
#: before the load point starts, about 36-50 bytes a token in memory (a list of Python ints), so this is
#: 7-10 GB at most: 10,000 prompts of 20,000 tokens or the Mooncake trace (23,608 requests, 179M tokens)
#: fit; 5 x 10^7 tokens already took 2.5 GB, 10^11 was a MemoryError.
MAX_PROMPT_TOKENS = 200_000_000
#: Tokens of synthetic prompts built at once when only ``duration_s`` bounds a load point (it builds them
#: in batches of 1,024 prompts, fewer when they are longer than 16,384 tokens): 1,024 prompts of 10M
#: tokens were 10^10 tokens at once.
BATCH_TOKENS = 1024 * 16_384
#: Seconds a load point may take to send its requests at its ``request_rate`` (num_prompts / rate, or its
#: ``duration_s`` when shorter): a week. A measurement, not a soak test: 1,000 prompts at 0.01 req/s is
#: 28 hours; ``request_rate: 1e-300`` waited forever with no bound.
MAX_SEND_S = 7 * 24 * 3600
#: Seconds one wait may last: a server's start (``server.startup_timeout_s``, 900 by default) and a request's
#: limits (``workload.timeouts``: connect, first token, between tokens, total). The slowest starts (a 1T-parameter
#: checkpoint read from network storage, then its kernels compiled) take about an hour, and bench_serving gives a
#: request 6 hours: a day is well past both. 1e300 or inf waited on a hung server for ever.
MAX_WAIT_S = 24 * 3600
#: Seconds a study may run (``budget.wall_time_s``): a year. A budget is a stop, and a larger one is no stop.
MAX_STUDY_S = 365 * 24 * 3600
#: Modelled GPU hours a study may spend (``budget.gpu_hours``): the most GPUs a study has (1,024,
#: ``hardware.num_gpus``) for MAX_STUDY_S.
MAX_GPU_HOURS = 1024 * MAX_STUDY_S // 3600
#: Characters of a value echoed in an error message.
SHOWN_CHARS = 60


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters, without ever formatting the whole of a large value:
    containers are walked only as far as the limit, and a huge integer is described by its size
    (``str()`` of a 5,000-digit int raises in Python 3.11+, and of a 10^9-element list takes minutes)."""
    text = _repr(value, limit + 1, 0)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clip(text: str, limit: int = 120) -> str:
    """Plain text (an error's own words, a dotted path) on one line, cut to ``limit`` characters:
    a non-printable character (a newline in a YAML key) is shown escaped."""
    text = text[: limit + 1]
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _repr(value: Any, budget: int, depth: int) -> str:
    if depth > 8:
        return "..."
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 200:  # more than 60 digits: never converted to text
            digits = int(value.bit_length() * math.log10(2)) + 1
            return f"<an integer of about {digits} digits>"
        return repr(value)
    if isinstance(value, (str, bytes)):
        return repr(value[: budget + 2])
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        brackets = {list: "[]", tuple: "()", dict: "{}"}.get(type(value), "{}")
        open_, close = brackets[0], brackets[1]
        items = value.items() if isinstance(value, dict) else value
        out = open_
        for i, item in enumerate(items):
            if len(out) > budget:
                break
            part = f"{_repr(item[0], budget, depth + 1)}: {_repr(item[1], budget, depth + 1)}" \
                if isinstance(value, dict) else _repr(item, budget, depth + 1)
            out += (", " if i else "") + part
        return out + close
    try:
        return repr(value)[: budget + 1]
    except Exception:  # noqa: BLE001 - a value that cannot even be shown is shown by its type
        return f"<{type(value).__name__}>"
