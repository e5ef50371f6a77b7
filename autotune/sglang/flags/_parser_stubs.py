"""Stand-ins for SGLang's heavy imports, so its REAL argument parser imports on a CPU-only machine.

Standalone (no autotune import): ``_real_parser_script.py`` installs it when
``AUTOTUNE_PARSER_STUBS`` names top-level modules (comma-separated), before it
imports ``sglang.srt.server_args``. Each named module that is not installed
(torch, triton, transformers, ...) becomes a placeholder: attributes are
placeholders, calls return placeholders (a call with one callable argument
returns it, so decorators keep the function), capitalised names are classes
(so ``class X(PretrainedConfig, total=False)`` and ``issubclass`` work), and
everything is falsy, so ``torch.cuda.is_available()`` says no GPU. The parser
SGLang declares (``ServerArgs.add_cli_args``: names, types, choices, nargs,
actions) is SGLang's own code and is not touched; only values SGLang would
compute from torch at import time (none of which the flags' shapes depend on)
are placeholders. Modules that are installed are imported as usual.

Minimal real dependencies per release were found by importing every release's
parser from 0.5.9 to 0.5.23 (see ``autotune/sglang/flags/parser_env.py``).
"""

from __future__ import annotations

import abc
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

__all__ = ["STUBBED", "install"]

#: Top-level modules that were replaced (``--info`` reports them).
STUBBED: set[str] = set()
#: Dunder attributes a placeholder answers (every other dunder is absent, as Python's probes expect).
_ALLOWED_DUNDERS = frozenset({"__class_validators__", "__func__"})
#: torch attributes that must be absent (SGLang tests ``hasattr(torch, "npu")`` to detect accelerators).
_ABSENT = {"torch": frozenset({"npu", "hpu", "musa", "mlu"})}


def _refuse(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and name not in _ALLOWED_DUNDERS


class _Stub:
    """A placeholder value: any attribute, call, index or iteration gives another (empty, falsy) one."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def __getattr__(self, key: str) -> Any:
        if _refuse(key):
            raise AttributeError(key)
        return _Stub(f"{self._name}.{key}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._name.endswith("get_current_target"):  # triton's GPU probe: a CPU machine has none
            raise RuntimeError("no GPU (autotune parser stub)")
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return _Stub(f"{self._name}()")

    def __getitem__(self, key: Any) -> Any:
        return _Stub(f"{self._name}[]")

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def __setattr__(self, key: str, value: Any) -> None:
        object.__setattr__(self, key, value)

    def __iter__(self) -> Any:
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __len__(self) -> int:
        return 0

    def __contains__(self, item: Any) -> bool:
        return False

    def __int__(self) -> int:
        return 0

    def __index__(self) -> int:
        return 0

    def __float__(self) -> float:
        return 0.0

    def __lt__(self, other: Any) -> bool:
        return False

    __gt__ = __le__ = __ge__ = __lt__

    def __or__(self, other: Any) -> Any:
        return self

    __ror__ = __or__

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (_StubClassBase,)

    def __repr__(self) -> str:
        return f"<autotune stub {self._name}>"


class _StubMeta(abc.ABCMeta):  # ABCMeta: SGLang mixes ABC into torch.nn.Module subclasses
    def __getattr__(cls, key: str) -> Any:
        if _refuse(key):
            raise AttributeError(key)
        return _Stub(f"{cls.__name__}.{key}")

    def register(cls, *args: Any, **kwargs: Any) -> Any:  # transformers' AutoX.register, not ABCMeta's
        return args[0] if args else None


class _StubClassBase(metaclass=_StubMeta):
    def __init_subclass__(cls, **kwargs: Any) -> None:
        pass

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, key: str) -> Any:
        if _refuse(key):
            raise AttributeError(key)
        return _Stub(f"{type(self).__name__}().{key}")

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.any_schema()


class _StubModule(types.ModuleType):
    def __getattr__(self, key: str) -> Any:
        if key.startswith("__") and key.endswith("__"):
            raise AttributeError(key)
        if key in _ABSENT.get(self.__name__, ()):
            raise AttributeError(key)
        if key[:1].isupper() and not key.isupper():
            cls = _StubMeta(key, (_StubClassBase,), {"__module__": self.__name__})
            setattr(self, key, cls)
            return cls
        return _Stub(f"{self.__name__}.{key}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: set[str]) -> None:
        self.roots = roots

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        root = name.split(".")[0]
        if root not in self.roots:
            return None
        STUBBED.add(root)
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "2.9.0"  # type: ignore[attr-defined]  # parsed by packaging.version at import time
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def install(roots: list[str]) -> None:
    """Replace each of ``roots`` that does not import on its own by placeholders."""
    missing = {r for r in roots if r and importlib.util.find_spec(r) is None}
    if missing:
        sys.meta_path.insert(0, _Finder(missing))
