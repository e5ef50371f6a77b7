"""Imports run one way (docs/ARCHITECTURE.md), proven on the source: every module's AST is walked,
imports inside functions included, so a cycle cannot hide in a function-level import."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "autotune"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The autotune modules ``path`` imports anywhere in its body (``from P import m`` counts as P.m
    when m is a module)."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "autotune")
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = name.split(".")
                base = base if is_pkg else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "autotune":
                continue
            subs = {f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in known}
            out.update(subs or {mod})
            if len(subs) < len(node.names):
                out.add(mod)
    out.discard(name)
    return {m for m in out if m in known}


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {name: _imports(path, name, known) for name, path in mods.items()}


def _under(mod: str, pkg: str) -> bool:
    return mod == pkg or mod.startswith(pkg + ".")


def _offending(graph: dict[str, set[str]], src: str, banned: tuple[str, ...]) -> list[str]:
    return sorted(f"{m} -> {dep}" for m, deps in graph.items() if _under(m, src)
                  for dep in deps if any(_under(dep, b) for b in banned))


def test_the_walk_sees_function_level_imports() -> None:
    graph = _graph()
    assert graph["autotune.cli._run"] >= {"autotune.study.driver"}  # imported inside run()
    assert len(graph) > 100


def test_the_simulator_imports_engine_knowledge_only() -> None:
    assert _offending(_graph(), "autotune.sim", ("autotune.study", "autotune.launch", "autotune.trial")) == []


def test_the_study_file_model_imports_nothing_of_the_study_layer() -> None:
    assert _offending(_graph(), "autotune.spec", ("autotune.study",)) == []


def test_engine_knowledge_imports_no_process_or_orchestration_layer() -> None:
    banned = ("autotune.launch", "autotune.study", "autotune.load", "autotune.sim")
    assert _offending(_graph(), "autotune.sglang", banned) == []


def test_results_import_the_study_layer_never_the_reverse() -> None:
    graph = _graph()
    assert _offending(graph, "autotune.study", ("autotune.results", "autotune.cli")) == []
    assert _offending(graph, "autotune.trial", ("autotune.study", "autotune.results", "autotune.cli")) == []


def test_no_import_cycle_among_the_packages_modules() -> None:
    graph = _graph()
    # Tarjan's strongly connected components: any component of more than one module is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == []
