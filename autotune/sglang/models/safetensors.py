"""Exact checkpoint sizes from the files on disk, without reading a tensor.

A ``.safetensors`` file starts with an 8-byte little-endian header length and a JSON header mapping
each tensor name to its ``dtype``, ``shape`` and ``data_offsets``: reading those bytes gives every
tensor's size exactly. ``model.safetensors.index.json``'s ``metadata.total_size`` gives the sum when
the shards are not (yet) on disk.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.files import read_json, regular_file
from autotune.limits import JSON_BYTES, clip, shown

__all__ = ["TensorInfo", "DTYPE_BYTES", "read_header", "checkpoint_tensors", "index_total_size"]

#: safetensors dtype codes and their bytes per element (F4 / F8_E8M0 packed formats included).
DTYPE_BYTES = {
    "F64": 8.0, "I64": 8.0, "U64": 8.0, "F32": 4.0, "I32": 4.0, "U32": 4.0, "F16": 2.0, "BF16": 2.0,
    "I16": 2.0, "U16": 2.0, "F8_E4M3": 1.0, "F8_E5M2": 1.0, "F8_E8M0": 1.0, "I8": 1.0, "U8": 1.0,
    "BOOL": 1.0, "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75,
}
#: Headers larger than this are refused (the format caps them at 100 MB).
MAX_HEADER = 100 * 2**20


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


def read_header(path: str | Path) -> list[TensorInfo]:
    """The tensors one ``.safetensors`` file holds (names, dtypes, shapes, bytes), from its header only."""
    p = regular_file(path, "model_path: safetensors shard", 2**62)  # a shard is large; only its header is read
    try:
        with p.open("rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise ConfigError(f"model_path: {p}: not a safetensors file (shorter than its 8-byte header length)")
            (length,) = struct.unpack("<Q", raw)
            if length <= 0 or length > MAX_HEADER:
                raise ConfigError(f"model_path: {p}: safetensors header length {length} is out of range")
            header = json.loads(fh.read(length))
    except OSError as e:
        raise ConfigError(f"model_path: {p}: cannot read the safetensors header: {e.strerror}") from None
    except (ValueError, RecursionError) as e:
        raise ConfigError(f"model_path: {p}: the safetensors header is not JSON: {clip(str(e), 80)}") from None
    if not isinstance(header, dict):
        raise ConfigError(f"model_path: {p}: the safetensors header is not a JSON object")
    out = []
    for name, meta in header.items():
        if name == "__metadata__" or not isinstance(meta, dict):
            continue
        shape = _ints(p, name, "shape", meta.get("shape") or [])
        offsets = meta.get("data_offsets")
        if isinstance(offsets, list) and len(offsets) == 2:
            start, end = _ints(p, name, "data_offsets", offsets)
            nbytes = end - start
        else:
            nbytes = int(math.prod(shape) * DTYPE_BYTES.get(str(meta.get("dtype")), 2.0))
        out.append(TensorInfo(name, str(meta.get("dtype")), shape, nbytes))
    return out


def _ints(p: Path, tensor: str, key: str, values: Any) -> tuple[int, ...]:
    """A header's list of sizes: whole numbers from 0 to 2^62 (the format's are u64), or one line naming it."""
    if isinstance(values, list) and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**62
                                        for v in values):
        return tuple(values)
    raise ConfigError(f"model_path: {p}: safetensors header {shown(tensor)} {key}={shown(values)} "
                      "is not a list of sizes")


def checkpoint_tensors(directory: str | Path) -> list[TensorInfo] | None:
    """Every tensor of the checkpoint in ``directory`` (all ``*.safetensors`` shards), or None when the
    directory has no shard on disk (a config-only stand-in, or weights not downloaded yet) or lacks a
    shard its index names (a partial download: the index's total is then the better figure)."""
    shards = sorted(Path(directory).glob("*.safetensors"))
    if not shards:
        return None
    index = Path(directory) / "model.safetensors.index.json"
    if index.is_file():
        weight_map = _read_json(index).get("weight_map") or {}
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ConfigError(f"model_path: {index}: weight_map is not a map of tensor names to shard files")
        named = set(weight_map.values())
        if named - {p.name for p in shards}:
            return None
    tensors: list[TensorInfo] = []
    for shard in shards:
        tensors.extend(read_header(shard))
    return tensors


def _read_json(path: Path) -> dict[str, Any]:
    data = read_json(path, f"model_path: {path.name}", JSON_BYTES)
    if not isinstance(data, dict):
        raise ConfigError(f"model_path: {path}: {path.name} is not a JSON object")
    return data


def index_total_size(directory: str | Path) -> int | None:
    """``metadata.total_size`` of ``model.safetensors.index.json`` (None without an index)."""
    index = Path(directory) / "model.safetensors.index.json"
    if not index.is_file():
        return None
    size = (_read_json(index).get("metadata") or {}).get("total_size")
    if size is None:
        return None
    if isinstance(size, bool) or not isinstance(size, (int, float)) or not math.isfinite(size) \
            or not 0 <= size < 2**62:
        raise ConfigError(f"model_path: {index}: metadata.total_size={shown(size)} is not a size in bytes")
    return int(size)
