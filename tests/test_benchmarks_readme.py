"""benchmarks/README.md stays the index of every benchmark and its current figures.

Earlier runs live in benchmarks/HISTORY.md; the README links to them by section. These checks keep a
new script from going unlisted, a moved section from leaving a dead link, and the README from growing
back into a log of every run (it was 79 KB before the split).
"""

from __future__ import annotations

import re
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
README = BENCH / "README.md"
HISTORY = BENCH / "HISTORY.md"


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation but `-` and `_` dropped,
    spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", path.read_text(), re.M)}


def test_anchor_follows_github_rules():
    assert _anchor("`loadgen_capacity.py`: earlier runs") == "loadgen_capacitypy-earlier-runs"
    assert _anchor("Search efficiency (current)") == "search-efficiency-current"


def test_every_benchmark_script_has_a_row():
    text = README.read_text()
    scripts = sorted(p.name for p in BENCH.glob("*.py"))
    assert scripts, "no benchmark scripts found"
    missing = [s for s in scripts if f"`{s}" not in text]
    assert not missing, f"benchmarks/README.md does not name {missing}"


def test_every_link_between_readme_and_history_resolves():
    targets = {"HISTORY.md": HISTORY, "README.md": README}
    for source in (README, HISTORY):
        own = _anchors(source)
        for target, anchor in re.findall(r"\]\(((?:HISTORY|README)\.md)?#([^)\s]+)\)", source.read_text()):
            known = own if not target else _anchors(targets[target])
            assert anchor in known, f"{source.name} links to {target or source.name}#{anchor}, which has no such heading"


def test_readme_holds_current_figures_not_the_history():
    assert len(README.read_bytes()) <= 48 * 1024, "move superseded runs to benchmarks/HISTORY.md"
    assert HISTORY.exists()
