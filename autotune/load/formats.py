"""Readers of the dataset and trace formats a workload can point at, with one-line errors.

* ShareGPT: a JSON array (or JSONL) of ``{"conversations": [{"from": "human"|"gpt",
  "value": str}, ...]}``.
* Mooncake trace JSONL: ``{"timestamp": ms, "input_length": int, "output_length": int,
  "hash_ids": [int, ...]}`` per line (``hash_ids`` optional), timestamps not decreasing.
* Azure LLM inference trace CSV: header ``TIMESTAMP,ContextTokens,GeneratedTokens``;
  ``TIMESTAMP`` a date-time (``2023-11-16 18:15:46.6805900``) or seconds.
  Both traces are read a line at a time and only as far as the rows a load point replays
  (``max_rows``): a trace of millions of rows never sits in memory as text.
* Prompt JSONL: ``{"prompt": str}`` or ``{"input_ids": [int, ...]}``, optional ``output_len``: read a
  line at a time and refused at the line where it passes what a load point builds (:func:`prompt_rows`).

A malformed file raises :class:`DatasetError` (a ConfigError: exit 2) whose message is
one line naming the file, the line and the field: ``trace.jsonl:17: input_length=-3:
must be a positive integer``.
"""

from __future__ import annotations

import csv
import itertools
import json
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from autotune.errors import ConfigError
from autotune.files import read_lines, read_text
from autotune.limits import (
    DATASET_BYTES,
    MAX_PROMPT_TOKENS,
    MAX_PROMPTS,
    MAX_SEQUENCE_TOKENS,
    PROMPT_LINE_BYTES,
    clip,
    shown,
)


class DatasetError(ConfigError):
    """A dataset or trace file that cannot be used; the message names file, line and field."""


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace: when (seconds from the trace's first request) and how big."""

    line: int
    at_s: float
    input_len: int
    output_len: int
    hash_ids: Sequence[int] | None = None
    """The row's prefix blocks, as an ``array('q')`` (8 bytes an id, where a tuple of ints took about 40)."""


@dataclass(frozen=True, slots=True)
class PromptRow:
    """One prompt of a prompt file (``text`` or ``input_ids``) and its output length, if given."""

    line: int
    text: str | None
    input_ids: list[int] | None
    output_len: int | None


def _read_text(path: Path) -> str:
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key in _TEXT_CACHE:
        return _TEXT_CACHE[key]
    try:  # a regular file of at most DATASET_BYTES (never /dev/zero or a FIFO), UTF-8
        text = read_text(path, "dataset", DATASET_BYTES)
    except ConfigError as exc:
        raise DatasetError(f"{path}: {str(exc).removeprefix('dataset: ').split(' (got ')[0]}") from None
    if not text.strip():
        raise DatasetError(f"{path}:1: empty file (no requests)")
    _TEXT_CACHE.clear()  # the last file read only: a load point reads its file a few times
    _TEXT_CACHE[key] = text
    return text


_TEXT_CACHE: dict[tuple[str, int, int], str] = {}

_T = TypeVar("_T")


def _file_key(path: Path, *extra: Any) -> tuple[Any, ...] | None:
    """What identifies one version of a file (path, modification time, size, inode) and ``extra``; None when
    it cannot be read (its reader then says why)."""
    try:
        stat = path.stat()
    except (OSError, ValueError):
        return None
    return (str(path), stat.st_mtime_ns, stat.st_size, stat.st_ino, *extra)


def _kept(cache: dict[tuple[Any, ...], _T], key: tuple[Any, ...] | None, read: Callable[[], _T]) -> _T:
    """``read()``, kept in ``cache`` under ``key`` until another file (or another version of it) is read:
    a study reads its data set when it checks the study and again for every load point."""
    if key is not None and key in cache:
        return cache[key]
    value = read()
    cache.clear()
    if key is not None:
        cache[key] = value
    return value


def _pos_int(path: Path, line: int, row: dict[str, Any], key: str, *, required: bool = True) -> int | None:
    if key not in row or row[key] is None:
        if required:
            raise DatasetError(f"{path}:{line}: {key}: missing")
        return None
    v = row[key]
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_SEQUENCE_TOKENS:
        raise DatasetError(f"{path}:{line}: {key}={shown(v)}: must be a positive integer "
                           f"(at most {MAX_SEQUENCE_TOKENS:,})")
    return v


def _jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for number, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError; an int of 4,300+ digits; deep nesting
            raise DatasetError(f"{path}:{number}: not JSON ({clip(getattr(exc, 'msg', None) or str(exc), 80)})") \
                from None
        if not isinstance(row, dict):
            raise DatasetError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        rows.append((number, row))
    return rows


def _json_array_items(path: Path, text: str) -> list[tuple[int, Any]]:
    """The items of a top-level JSON array with the line each starts on (counted on from the previous
    item's start, so reading is linear in the file: counting from the top for each item took hours for
    ShareGPT V3's 673 MB)."""
    dec = json.JSONDecoder()
    i = text.index("[") + 1
    items: list[tuple[int, Any]] = []
    n = len(text)
    line, counted = 1, 0  # the line of text[counted]
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n:
            raise DatasetError(f"{path}:{text.count(chr(10)) + 1}: not JSON (the array is not closed)")
        if text[i] == "]":
            return items
        line += text.count("\n", counted, i)
        counted = i
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
        except (ValueError, RecursionError) as exc:  # an int of 4,300+ digits; deep nesting
            raise DatasetError(f"{path}:{line}: not JSON ({clip(str(exc), 80)})") from None
        items.append((line, obj))


def read_sharegpt(path: Path) -> list[tuple[int, list[tuple[str, str]]]]:
    """ShareGPT conversations as ``(line, [(role, text), ...])`` with role "human" or "gpt". The last file's
    conversations are kept (:func:`_kept`), not its text (ShareGPT V3, 673 MB, is seconds of JSON a read)."""
    def read() -> list[tuple[int, list[tuple[str, str]]]]:
        out = _read_sharegpt(path)
        _TEXT_CACHE.clear()  # the conversations hold what a load point needs of the text
        return out

    return _kept(_SHAREGPT_CACHE, _file_key(path), read)


_SHAREGPT_CACHE: dict[tuple[Any, ...], list[tuple[int, list[tuple[str, str]]]]] = {}


def _read_sharegpt(path: Path) -> list[tuple[int, list[tuple[str, str]]]]:
    text = _read_text(path)
    items = _json_array_items(path, text) if text.lstrip().startswith("[") else _jsonl(path)
    out = []
    for line, obj in items:
        if not isinstance(obj, dict):
            raise DatasetError(f"{path}:{line}: expected a JSON object, got {type(obj).__name__}")
        conv = obj.get("conversations", obj.get("conversation"))
        if not isinstance(conv, list):
            raise DatasetError(f"{path}:{line}: conversations: missing or not a list")
        turns = []
        for k, msg in enumerate(conv):
            if not isinstance(msg, dict):
                raise DatasetError(f"{path}:{line}: conversations[{k}]: expected an object")
            role, value = msg.get("from"), msg.get("value")
            if role not in ("human", "gpt", "system", "user", "assistant", "chatgpt", "bing", "bard"):
                raise DatasetError(f"{path}:{line}: conversations[{k}].from={shown(role)}: unknown role")
            if not isinstance(value, str):
                raise DatasetError(f"{path}:{line}: conversations[{k}].value: missing or not a string")
            turns.append(("human" if role in ("human", "user") else "system" if role == "system" else "gpt", value))
        out.append((line, turns))
    if not out:
        raise DatasetError(f"{path}:1: no conversations")
    return out


def _check_order(path: Path, rows: list[TraceRow]) -> None:
    for a, b in itertools.pairwise(rows):
        if b.at_s < a.at_s:
            raise DatasetError(
                f"{path}:{b.line}: timestamp: earlier than line {a.line}'s (timestamps must not decrease)")


def _rebased(path: Path, rows: list[TraceRow], empty: str) -> list[TraceRow]:
    if not rows:
        raise DatasetError(f"{path}:{empty}")
    _check_order(path, rows)
    t0 = rows[0].at_s
    return [TraceRow(r.line, r.at_s - t0, r.input_len, r.output_len, r.hash_ids) for r in rows]


def read_mooncake(path: Path, max_rows: int | None = None, more: str = "") -> list[TraceRow]:
    """A Mooncake trace: timestamps in ms, rebased so the first request is at 0 s; its first ``max_rows``
    rows only (the rest is not read), within :func:`prompt_rows`' bounds (``more``: what to add to its
    "more than MAX_PROMPTS requests")."""
    rows: list[TraceRow] = []
    if max_rows is not None and max_rows < 1:
        raise DatasetError(f"{path}: max_rows={max_rows}: must be at least 1")
    for line, row in prompt_rows(_lines(path), lambda n: f"{path}:{n}", more=more):
        if not isinstance(row, dict):
            raise DatasetError(f"{path}:{line}: expected a JSON object, got {type(row).__name__}")
        ts = row.get("timestamp")
        if ts is None:
            raise DatasetError(f"{path}:{line}: timestamp: missing")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not 0 <= ts < 1e15:  # ms: 30,000 years
            raise DatasetError(f"{path}:{line}: timestamp={shown(ts)}: must be a number of ms >= 0")
        n_in = _pos_int(path, line, row, "input_length")
        n_out = _pos_int(path, line, row, "output_length")
        hashes = row.get("hash_ids")
        if hashes is not None and (not isinstance(hashes, list)
                                   or not all(isinstance(h, int) and not isinstance(h, bool) for h in hashes)):
            raise DatasetError(f"{path}:{line}: hash_ids: must be a list of integers")
        try:
            ids = array("q", hashes) if hashes else None
        except OverflowError:
            raise DatasetError(f"{path}:{line}: hash_ids: must be integers of at most 64 bits") from None
        rows.append(TraceRow(line, float(ts) / 1000.0, int(n_in or 0), int(n_out or 0), ids))
        if max_rows is not None and len(rows) >= max_rows:
            break
    return _rebased(path, rows, "1: empty file (no requests)")


def _azure_time(path: Path, line: int, text: str) -> float:
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not 0 <= seconds < 1e12:  # NaN, inf, or before 1970 / past the year 33,000
            raise DatasetError(f"{path}:{line}: TIMESTAMP={shown(text)}: not a number of seconds >= 0")
        return seconds
    head, _, frac = text.partition(".")
    try:
        base = datetime.fromisoformat(head)
        return base.timestamp() + (float("0." + frac) if frac else 0.0)
    except ValueError:
        raise DatasetError(f"{path}:{line}: TIMESTAMP={shown(text)}: not a date-time or a number of seconds") from None


def read_azure(path: Path, max_rows: int | None = None, more: str = "") -> list[TraceRow]:
    """An Azure LLM inference trace CSV, rebased so the first request is at 0 s; its first ``max_rows``
    rows only (the rest is not read), and never more than ``MAX_PROMPTS`` (``more``: what to add to
    that refusal)."""
    if max_rows is not None and max_rows < 1:
        raise DatasetError(f"{path}: max_rows={max_rows}: must be at least 1")
    reader = csv.DictReader(text for _, text in _lines(path))
    try:
        fields = reader.fieldnames or []
    except csv.Error as exc:
        raise DatasetError(f"{path}:1: not CSV ({clip(str(exc), 80)})") from None
    for need in ("TIMESTAMP", "ContextTokens", "GeneratedTokens"):
        if need not in fields:
            raise DatasetError(f"{path}:1: {need}: missing column (header has {', '.join(fields) or 'nothing'})")
    rows: list[TraceRow] = []
    try:
        for k, rec in enumerate(reader):
            line = k + 2
            if k >= MAX_PROMPTS:
                raise DatasetError(f"{path}:{line}: more than the {MAX_PROMPTS:,} requests a load point sends{more}")
            vals: dict[str, Any] = {}
            for key in ("ContextTokens", "GeneratedTokens"):
                raw = (rec.get(key) or "").strip()
                try:
                    vals[key] = int(raw)
                except ValueError:
                    raise DatasetError(f"{path}:{line}: {key}={shown(raw)}: must be a positive integer") from None
                _pos_int(path, line, vals, key)
            rows.append(TraceRow(line, _azure_time(path, line, rec.get("TIMESTAMP") or ""),
                                 vals["ContextTokens"], vals["GeneratedTokens"]))
            if max_rows is not None and len(rows) >= max_rows:
                break
    except csv.Error as exc:  # a field past csv's field_size_limit (128 KiB), a NUL byte
        raise DatasetError(f"{path}:{len(rows) + 2}: not CSV ({clip(str(exc), 80)})") from None
    return _rebased(path, rows, "2: no requests (only a header)")


def read_trace(path: Path, fmt: str | None, max_rows: int | None = None, more: str = "") -> list[TraceRow]:
    """Read a trace in ``fmt`` ("mooncake" | "azure"; None: .csv is Azure, anything else Mooncake), its first
    ``max_rows`` rows; the last trace read is kept (:func:`_kept`)."""
    fmt = fmt or ("azure" if path.suffix.lower() == ".csv" else "mooncake")
    reader = read_azure if fmt == "azure" else read_mooncake
    return _kept(_TRACE_CACHE, _file_key(path, fmt, max_rows, more), lambda: reader(path, max_rows, more))


_TRACE_CACHE: dict[tuple[Any, ...], list[TraceRow]] = {}


#: JSON values one line of a prompt file may hold (a prompt's ids and a few keys), counted before it is parsed.
LINE_VALUES = MAX_SEQUENCE_TOKENS + 64


def prompt_rows(lines: Iterable[tuple[int, str]], where: Callable[[int], str], more: str = ""
                ) -> Iterator[tuple[int, Any]]:
    """The non-empty lines of a prompt file (JSONL of ``prompt`` / ``input_ids`` rows; a Mooncake trace's rows
    too), parsed one at a time, each refused (:class:`DatasetError`, ``where(line)`` first) where the file
    passes what a load point builds, before what follows is read: more than ``MAX_PROMPTS`` requests, a line of more than
    :data:`LINE_VALUES` JSON values (every value follows a ',', '[' or '{', so they are counted before
    ``json`` builds them: ``[1,1,...]`` is ~20 bytes of memory for each 2 of text), a row's ``input_ids``
    past ``MAX_SEQUENCE_TOKENS``, or all of them past ``MAX_PROMPT_TOKENS``."""
    rows = tokens = 0
    for number, line in lines:
        if not line.strip():
            continue
        rows += 1
        if rows > MAX_PROMPTS:
            raise DatasetError(f"{where(number)}: more than the {MAX_PROMPTS:,} requests a load point sends{more}")
        values = line.count(",") + line.count("[") + line.count("{")
        if values > LINE_VALUES:
            raise DatasetError(f"{where(number)}: {values:,} commas and brackets on one line, more JSON values than a "
                               f"prompt's {MAX_SEQUENCE_TOKENS:,} tokens and its keys (the line is not parsed)")
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError; an int of 4,300+ digits; deep nesting
            raise DatasetError(f"{where(number)}: not JSON ({clip(getattr(exc, 'msg', None) or str(exc), 80)})") \
                from None
        ids = row.get("input_ids") if isinstance(row, dict) else None
        if isinstance(ids, list):
            if len(ids) > MAX_SEQUENCE_TOKENS:
                raise DatasetError(f"{where(number)}: input_ids: {len(ids):,} tokens, more than the "
                                   f"{MAX_SEQUENCE_TOKENS:,} a prompt may hold")
            tokens += len(ids)
            if tokens > MAX_PROMPT_TOKENS:
                raise DatasetError(f"{where(number)}: input_ids: {tokens:,} tokens up to this line, more than the "
                                   f"{MAX_PROMPT_TOKENS:,} prompt tokens a load point builds")
        yield number, row


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``read_lines`` of a data set, its refusals as :class:`DatasetError` naming the file."""
    try:  # a regular file of at most DATASET_BYTES (never /dev/zero or a FIFO), UTF-8, lines bounded
        yield from read_lines(path, "dataset", DATASET_BYTES, line_limit=PROMPT_LINE_BYTES)
    except ConfigError as exc:
        raise DatasetError(f"{path}: {str(exc).removeprefix('dataset: ').split(' (got ')[0]}") from None


def read_prompts(path: Path) -> list[PromptRow]:
    """A prompt file (JSONL), within :func:`prompt_rows`' bounds."""
    out: list[PromptRow] = []
    for line, row in prompt_rows(_lines(path), lambda n: f"{path}:{n}"):
        if not isinstance(row, dict):
            raise DatasetError(f"{path}:{line}: expected a JSON object, got {type(row).__name__}")
        out_len = _pos_int(path, line, row, "output_len", required=False)
        ids = row.get("input_ids")
        if ids is not None:
            if not isinstance(ids, list) or not ids or not all(
                    isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
                raise DatasetError(f"{path}:{line}: input_ids: must be a non-empty list of token ids")
            out.append(PromptRow(line, None, ids, out_len))
            continue
        text = row.get("prompt")
        if not isinstance(text, str) or not text.strip():
            raise DatasetError(f"{path}:{line}: prompt: missing or empty (or give input_ids)")
        out.append(PromptRow(line, text, None, out_len))
    if not out:
        raise DatasetError(f"{path}:1: empty file (no requests)")
    return out
