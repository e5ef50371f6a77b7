"""A pure-PyTorch stand-in for SGLang's ``sgl_kernel`` CPU module (installed by ``autotune sglang-env``).

The CPU build of sgl-kernel is not on the package registries (it is built from
SGLang's git tree), yet SGLang imports ``sgl_kernel`` as soon as its CPU engine
is on (``SGLANG_USE_CPU_ENGINE=1``). On a CPU without Intel AMX SGLang takes its
native-torch paths anyway, so this package only has to import cleanly (any
``sgl_kernel.X`` submodule too) and really implement the few functions those
paths still call. Every other name is a function that raises
``NotImplementedError`` when called, naming itself, so a path that needs a real
kernel fails loudly instead of computing garbage.

``sgl_kernel.scalar_type`` is deliberately missing: SGLang 0.5.9 has its own
fallback for it, which a stub would defeat.

Not part of autotune's import graph: it is copied into the venv's site-packages.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

import torch
import torch.nn.functional as F

__version__ = "0.0.0+autotune.cpu.stand.in"
_MISSING = frozenset({"scalar_type", "scalar_types"})  # left for SGLang's own fallbacks


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """For each request r, write the next ``end - start`` cache slots into ``req_to_token[r, start:end]``.

    The same contract as SGLang's triton ``assign_req_to_token_pool``: the slots of
    consecutive requests lie back to back in ``out_cache_loc``.
    """
    starts = start_offset.tolist()
    ends = end_offset.tolist()
    rows = req_pool_indices.tolist()
    pos = 0
    for row, s, e in zip(rows, starts, ends, strict=False):
        n = int(e) - int(s)
        if n <= 0:
            continue
        if int(e) > pool_len:
            raise IndexError(f"assign_req_to_token_pool_cpu: end {e} beyond pool_len {pool_len}")
        req_to_token[int(row), int(s):int(e)] = out_cache_loc[pos:pos + n].to(req_to_token.dtype)
        pos += n


def _gated(act: Any, x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    d = x.shape[-1] // 2
    y = act(x[..., :d]) * x[..., d:]
    if out is not None:
        out.copy_(y)
        return out
    return y


def silu_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``silu(x[..., :d]) * x[..., d:]`` with ``d`` half the last dimension."""
    return _gated(F.silu, x, out)


def gelu_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``gelu(x[..., :d]) * x[..., d:]`` (exact erf GELU)."""
    return _gated(F.gelu, x, out)


def gelu_tanh_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``gelu_tanh(x[..., :d]) * x[..., d:]``."""
    return _gated(lambda t: F.gelu(t, approximate="tanh"), x, out)


def _not_implemented(qualname: str) -> Any:
    def stub(*_args: Any, **_kwargs: Any) -> Any:
        raise NotImplementedError(
            f"{qualname} is not implemented by autotune's CPU stand-in for sgl_kernel "
            "(only the native-torch paths of a CPU without AMX are supported)"
        )

    stub.__name__ = stub.__qualname__ = qualname.rsplit(".", 1)[-1]
    return stub


def _module_getattr(modname: str) -> Any:
    def __getattr__(name: str) -> Any:
        if name.startswith("__") or name in _MISSING:
            raise AttributeError(f"module {modname!r} has no attribute {name!r}")
        return _not_implemented(f"{modname}.{name}")

    return __getattr__


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes ``import sgl_kernel.X`` (any X except the missing ones) give a stub module."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(__name__ + "."):
            return None
        if fullname.rsplit(".", 1)[-1] in _MISSING:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        setattr(mod, "__getattr__", _module_getattr(spec.name))  # noqa: B010 - a module-level __getattr__
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        parent, _, child = module.__name__.rpartition(".")
        setattr(sys.modules[parent], child, module)


__getattr__ = _module_getattr(__name__)
if not any(isinstance(f, _SubmoduleFinder) for f in sys.meta_path):
    sys.meta_path.append(_SubmoduleFinder())
