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
    p = Path(path)
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
        raise ConfigError(f"model_path: {p}: cannot read the safetensors header: {e}") from None
    except ValueError as e:
        raise ConfigError(f"model_path: {p}: the safetensors header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ConfigError(f"model_path: {p}: the safetensors header is not a JSON object")
    out = []
    for name, meta in header.items():
        if name == "__metadata__" or not isinstance(meta, dict):
            continue
        shape = tuple(int(d) for d in meta.get("shape") or ())
        offsets = meta.get("data_offsets")
        if isinstance(offsets, list) and len(offsets) == 2:
            nbytes = int(offsets[1]) - int(offsets[0])
        else:
            nbytes = int(math.prod(shape) * DTYPE_BYTES.get(str(meta.get("dtype")), 2.0))
        out.append(TensorInfo(name, str(meta.get("dtype")), shape, nbytes))
    return out


def checkpoint_tensors(directory: str | Path) -> list[TensorInfo] | None:
    """Every tensor of the checkpoint in ``directory`` (all ``*.safetensors`` shards), or None when the
    directory has no shard on disk (a config-only stand-in, or weights not downloaded yet) or lacks a
    shard its index names (a partial download: the index's total is then the better figure)."""
    shards = sorted(Path(directory).glob("*.safetensors"))
    if not shards:
        return None
    index = Path(directory) / "model.safetensors.index.json"
    if index.is_file():
        named = set((_read_json(index).get("weight_map") or {}).values())
        if named - {p.name for p in shards}:
            return None
    tensors: list[TensorInfo] = []
    for shard in shards:
        tensors.extend(read_header(shard))
    return tensors


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"model_path: {path}: cannot read {path.name}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"model_path: {path}: {path.name} is not a JSON object")
    return data


def index_total_size(directory: str | Path) -> int | None:
    """``metadata.total_size`` of ``model.safetensors.index.json`` (None without an index)."""
    index = Path(directory) / "model.safetensors.index.json"
    if not index.is_file():
        return None
    size = (_read_json(index).get("metadata") or {}).get("total_size")
    try:
        return int(size) if size is not None else None
    except (TypeError, ValueError):
        raise ConfigError(f"model_path: {index}: metadata.total_size={size!r} is not an integer") from None
