"""Imports run one way, proven on the source against docs/ARCHITECTURE.md's floor table (parsed from the
doc, so the doc cannot drift from the code). Every module's AST is walked, imports inside functions
included, and so are scripts embedded as strings (what a test or benchmark runs in a child process):
a circle or an import up a floor cannot hide in a function or a child.

The same walk covers tests/ and benchmarks/: no circle anywhere; a test module imports no other test
module (only tests/support/), a benchmark script no other script (only benchmarks/harness/), and no
benchmark touches sys.path (scripts run as ``python benchmarks/<name>.py``: their folder is on it)."""

from __future__ import annotations

import ast
import functools
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "autotune"
DOC = ROOT / "docs" / "ARCHITECTURE.md"
#: The trees whose modules import each other by bare name (their folder is on sys.path when they run).
TREES = {"tests": ROOT / "tests", "benchmarks": ROOT / "benchmarks"}
SKIP = ("out", ".cache", "data", "__pycache__")  # generated or data folders, no source of ours


# ---- the walk ------------------------------------------------------------------------------------
def _module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _files(tree: str) -> dict[str, Path]:
    """``tests:support.ci`` -> its path: a tree's modules by the name they are imported under."""
    base = TREES[tree]
    return {f"{tree}:{_module_name(p, base)}": p for p in sorted(base.rglob("*.py"))
            if not set(p.relative_to(base).parts[:-1]) & set(SKIP)}


def _modules() -> dict[str, Path]:
    out = {_module_name(p, ROOT): p for p in sorted(PKG.rglob("*.py"))}
    for tree in TREES:
        out.update(_files(tree))
    return out


def _embedded(tree: ast.AST) -> Iterator[ast.AST]:
    """The file, and every string in it that parses as Python with an import (a child's script)."""
    yield tree
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "import " in node.value:
            try:
                yield ast.parse(textwrap.dedent(node.value))
            except SyntaxError:
                continue


def _resolve(mod: str, tree: str | None, known: set[str]) -> str | None:
    """The known module ``mod`` names (a tree's own first, as its sys.path has it), or None."""
    for cand in ((f"{tree}:{mod}",) if tree else ()) + (mod,):
        if cand in known:
            return cand
    return None


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The known modules ``path`` imports anywhere in its body (``from P import m`` counts as P.m
    when m is a module), its embedded scripts included."""
    tree, _, bare = name.rpartition(":")
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for root in _embedded(ast.parse(path.read_text(), str(path))):
        for node in ast.walk(root):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    hit = next((h for i in range(len(parts), 0, -1)
                                if (h := _resolve(".".join(parts[:i]), tree, known))), None)
                    if hit:
                        out.add(hit)
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: resolve against this module's package
                    base = bare.split(".")
                    base = base if is_pkg else base[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                parent = _resolve(mod, tree, known)
                subs = {s for a in node.names if (s := _resolve(f"{mod}.{a.name}", tree, known))}
                out.update(subs)
                if parent and len(subs) < len(node.names):
                    out.add(parent)
    out.discard(name)
    return out


@functools.cache  # one walk for the module (read-only: no test changes it)
def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {name: _imports(path, name, known) for name, path in mods.items()}


def _under(mod: str, pkg: str) -> bool:
    return mod == pkg or mod.startswith(pkg + ".")


def _offending(graph: dict[str, set[str]], src: str, banned: tuple[str, ...]) -> list[str]:
    return sorted(f"{m} -> {dep}" for m, deps in graph.items() if _under(m, src)
                  for dep in deps if any(_under(dep, b) for b in banned))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components: any component of more than one module is a circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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
    return cycles


# ---- docs/ARCHITECTURE.md's floor table ------------------------------------------------------------
def floor_table(text: str) -> dict[str, int]:
    """``{module name: floor}`` from the table of the doc's "Floors" section (rows ``| N | `a`, `b` | ... |``)."""
    section = text.split("## Floors", 1)[1].split("\n## ", 1)[0]
    floors: dict[str, int] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].isdigit():
            for name in re.findall(r"`(autotune(?:\.[\w.]+)?)`", cells[1]):
                assert name not in floors, f"{name} is on two floors"
                floors[name] = int(cells[0])
    assert floors, "docs/ARCHITECTURE.md has no floor table (| floor | modules | what they hold |)"
    return floors


def _entry(mod: str, floors: dict[str, int]) -> str | None:
    """The table's most specific name for ``mod`` (``autotune`` alone is only the package's __init__)."""
    hits = [n for n in floors if _under(mod, n) and (n != "autotune" or mod == "autotune")]
    return max(hits, key=len) if hits else None


def floor_violations(graph: dict[str, set[str]], floors: dict[str, int]) -> list[str]:
    """Every import of an autotune module that goes up a floor or across one."""
    bad = []
    for m, deps in sorted(graph.items()):
        src = _entry(m, floors)
        for dep in sorted(deps):
            dst = _entry(dep, floors)
            if src is None or dst is None or src == dst:
                continue
            if floors[dst] >= floors[src]:
                bad.append(f"{m} (floor {floors[src]}, {src}) -> {dep} (floor {floors[dst]}, {dst})")
    return bad


def _autotune(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return {m: deps for m, deps in graph.items() if ":" not in m}


# ---- the package ---------------------------------------------------------------------------------
def test_the_walk_sees_function_level_imports_and_embedded_scripts() -> None:
    graph = _graph()
    assert graph["autotune.cli._run"] >= {"autotune.study.driver"}  # imported inside run()
    # imported only by the script the test runs in a child process
    assert "autotune.testing.loadgen_fake_server" in graph["tests:test_load_optional_deps"]
    assert graph["benchmarks:faults"] >= {"benchmarks:harness.faults", "autotune.testing.pg_server"}
    assert len(_autotune(graph)) > 100 and len(graph) > 250


def test_the_floor_table_names_every_module_and_only_modules() -> None:
    floors = floor_table(DOC.read_text())
    mods = set(_autotune(_graph()))
    assert sorted(m for m in mods if _entry(m, floors) is None) == []  # a module the doc does not place
    assert sorted(n for n in floors if n not in mods) == []  # a row naming no module


def test_imports_only_run_down_the_floors() -> None:
    assert floor_violations(_autotune(_graph()), floor_table(DOC.read_text())) == []


def test_the_check_catches_an_import_up_a_floor_and_one_across() -> None:
    floors = floor_table(DOC.read_text())
    graph = {"autotune.spec": {"autotune.study.driver"}, "autotune.sim.engine.core": {"autotune.launch.process"},
             "autotune.doctor.checks": {"autotune.study.storage.retry"}, "autotune.study.driver": {"autotune.spec"}}
    assert [v.split(" (")[0] for v in floor_violations(graph, floors)] == ["autotune.sim.engine.core", "autotune.spec"]
    assert floor_table("## Floors\n\n| 1 | `autotune.a` | x |\n| 0 | `autotune.b`, `autotune.c` | y |\n") == \
        {"autotune.a": 1, "autotune.b": 0, "autotune.c": 0}


def test_nothing_in_autotune_imports_its_testing_package_and_it_needs_no_pytest() -> None:
    graph = _autotune(_graph())
    assert _offending({m: d for m, d in graph.items() if not _under(m, "autotune.testing")}, "autotune",
                      ("autotune.testing",)) == []
    for path in sorted((PKG / "testing").rglob("*.py")):
        names = {a.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom)}
        assert not any(_under(n, "pytest") for n in names), path  # shipped: pytest is not a dependency


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


# ---- everything: the package, the tests, the benchmarks -----------------------------------------------
def test_no_import_circle_anywhere() -> None:
    assert _cycles(_graph()) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_test_module_imports_another() -> None:
    """Only tests/support/ is imported (conftest.py is pytest's to load, never a module's)."""
    graph = _graph()
    bad = [f"{m} -> {d}" for m, deps in sorted(graph.items()) if m.startswith("tests:")
           for d in sorted(deps) if d.startswith("tests:") and not _under(d, "tests:support")]
    assert bad == []


def test_no_benchmark_imports_another_benchmark_script() -> None:
    """Only benchmarks/harness/ is shared."""
    graph = _graph()
    bad = [f"{m} -> {d}" for m, deps in sorted(graph.items()) if m.startswith("benchmarks:")
           for d in sorted(deps) if d.startswith("benchmarks:") and not _under(d, "benchmarks:harness")]
    assert bad == []


def test_no_benchmark_touches_sys_path() -> None:
    """A benchmark reaches what it needs through autotune (autotune.testing) and its harness, never by
    putting tests/ (or anything else) on sys.path."""
    bad = []
    for name, path in _files("benchmarks").items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "path" and \
                    isinstance(node.value, ast.Name) and node.value.id == "sys":
                bad.append(f"{name}:{node.lineno}")
    assert bad == []


def test_no_package_folder_holds_more_than_fifteen_modules() -> None:
    """A folder that outgrows 15 modules is split by concern (docs/ARCHITECTURE.md), as sim/ was into
    engine/ and perf/; ``__init__.py`` and ``__main__.py`` count."""
    crowded = {str(d.relative_to(ROOT)): n for d in [ROOT / "autotune", *(ROOT / "autotune").rglob("*/")]
               if d.is_dir() and d.name != "__pycache__" and (n := len(list(d.glob("*.py")))) > 15}
    assert crowded == {}
