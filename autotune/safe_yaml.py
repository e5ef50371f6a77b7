"""YAML loaded safely and within bounds: ``yaml.safe_load`` with a budget.

PyYAML's safe loader builds only plain values, but it lets a 24-line file of nested aliases stand
for 10^9 values (each alias is one shared node, so the load itself is quick: whatever walks the
result next, a validator or an error message, is not), and its composer recurses once per nesting
level, so a file 100,000 levels deep ends in a RecursionError traceback. Here the composer counts:
nesting beyond :data:`~autotune.limits.YAML_DEPTH` is refused as it is read, and a document whose
values, aliases expanded, number more than :data:`~autotune.limits.YAML_NODES` is refused before
anything is constructed from it (the count memoises each shared node, so it costs the file's size,
not the expansion's). Merge keys (``<<: *a``) count as the aliases they copy.

A key written twice in one mapping, at any depth, is refused with its line (``safe_load`` keeps the
last one silently, so a study with two ``mem_fraction_static`` entries tuned whichever came second).
A key a merge (``<<``) brings in may still be overridden by one written in the mapping itself: that
is what merge keys are for.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from autotune.errors import ConfigError
from autotune.limits import YAML_DEPTH, YAML_NODES, clip

__all__ = ["load_yaml"]


class _TooBig(Exception):
    def __init__(self, what: str, line: int) -> None:
        super().__init__(what)
        self.line = line


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer refuses deep nesting and documents too large once expanded."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise _TooBig(f"nested more than {YAML_DEPTH} levels deep", mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:  # the keys as written, before a merge key brings others in
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the constructor below says so
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {clip(repr(key))}", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)

    def compose_document(self) -> Node | None:
        node = super().compose_document()
        if node is not None:
            total = _expanded_size(node)
            if total > YAML_NODES:
                raise _TooBig(f"holds more than {YAML_NODES:,} values once its aliases are expanded",
                              node.start_mark.line + 1)
        return node


def _expanded_size(root: Node) -> int:
    """Values under ``root`` with every alias expanded, each shared node counted once per reference
    but walked once (iteratively: the depth is already bounded, but a loop needs no stack)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if not done:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        total = 1
        for c in children:
            total += sizes.get(id(c), 1)
            if total > YAML_NODES:
                break
        sizes[id(node)] = min(total, YAML_NODES + 1)
    return sizes[id(root)]


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load(text)`` within the bounds above; ConfigError (one line, ``where`` and the line) else."""
    loader = None
    try:
        loader = _BoundedLoader(text)  # the reader refuses control characters here already
        return loader.get_single_data()
    except _TooBig as exc:
        raise ConfigError(f"{where}: line {exc.line}: {exc}") from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (a NUL byte, a C0 control)
        raise ConfigError(f"{where}: position {exc.position}: unacceptable character #x{exc.character:04x}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}:" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"{where}:{line} {clip(str(problem))}") from None
    except (ValueError, RecursionError) as exc:  # an int of more than 4,300 digits; a deep merge chain
        raise ConfigError(f"{where}: {clip(str(exc))}") from None
    finally:
        if loader is not None:
            loader.dispose()
