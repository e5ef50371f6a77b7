"""Nothing a reader of the repository is pointed to lies outside it: no line of autotune/, benchmarks/,
docs/, README.md or CONTRIBUTING.md names a document that is not in the repository ("reference
section N", a shared folder beside the checkout) or a path on someone's machine. Cite SGLang's file
and line at a release, a URL, or a doc in this repository instead."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHERE = ("autotune", "benchmarks", "docs", "README.md", "CONTRIBUTING.md")
SKIP_DIRS = {"out", ".cache", "__pycache__"}  # benchmark output and caches: generated, not committed
#: (what it is, the pattern): each names something a reader of the repository cannot open.
OUTSIDE = (
    ("a shared folder beside the checkout", re.compile(r"\.\./shared\b|\bshared/reference\b")),
    ("a reference section of a document not in the repository", re.compile(r"\breference section\b", re.I)),
    ("a machine path", re.compile(r"(?<![\w.~-])/(?:work|root)/|(?<![\w.~-])/home/[^/\s]+/|(?<![\w.~-])/Users/[^/\s]+/")),
)


def _lines() -> Iterator[tuple[str, int, str]]:
    for top in WHERE:
        base = ROOT / top
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for path in files:
            if SKIP_DIRS & set(path.relative_to(ROOT).parts):
                continue
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue  # binary
            for number, line in enumerate(text.splitlines(), 1):
                yield str(path.relative_to(ROOT)), number, line


def pointers_outside(line: str) -> list[str]:
    return [what for what, pattern in OUTSIDE if pattern.search(line)]


def test_no_line_points_outside_the_repository() -> None:
    bad = [f"{path}:{number}: {', '.join(found)}: {line.strip()[:120]}"
           for path, number, line in _lines() if (found := pointers_outside(line))]
    assert bad == []


def test_the_patterns_catch_each_kind_and_spare_what_a_reader_can_open() -> None:
    caught = ["see ../shared/reference/sglang.md", "(reference section 4)", "Reference Section 12 says",
              "cd /work/main && make", "/root/.cache/x", "in /home/alice/autotune/studies", "/Users/bob/src/x"]
    assert all(pointers_outside(line) for line in caught), [c for c in caught if not pointers_outside(c)]
    fine = ["python/sglang/srt/server_args.py at v0.5.9, line 612", "https://github.com/sgl-project/sglang/pull/1",
            "docs/ARCHITECTURE.md", "~/.cache/autotune/sglang", "tests/data/public_logs/", "a shared server",
            "studies/models/kimi-k2-class", "the reference run of section 2"]
    assert [line for line in fine if pointers_outside(line)] == []
