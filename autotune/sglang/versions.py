"""SGLang versions: parsing, ordering, and the two behaviour splits autotune cares about.

* **Regime** (memory accounting; ``managers/scheduler.py`` ``Scheduler.init_model_worker`` from
  0.5.14, SGLang PRs #28683 and #28855): ``"A"`` up to 0.5.13, where
  the speculative draft worker is built after the target's KV pool and lives in
  the slack; ``"B"`` from 0.5.14, where draft weights are loaded before the KV
  budget is measured and draft KV is folded into the per-token cell size.
* **Dialect** (flag names, each release's ``server_args.py``; ``flag_tables/``): ``"classic"`` before 0.5.23
  (``--cuda-graph-max-bs``), ``"modern"`` from 0.5.23
  (``--cuda-graph-max-bs-decode`` / ``-prefill``; 0.5.19 accepted both spellings).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

from autotune.errors import ConfigError

__all__ = ["SglangVersion", "parse_version", "as_version", "DEFAULT_VERSION"]

_VERSION_RE = re.compile(
    r"^\s*v?(?P<major>\d+)\.(?P<minor>\d+)(?:\.(?P<patch>\d+))?"
    r"(?:(?:\.|-)?(?P<tag>post|rc|dev)(?P<tagnum>\d*))?\s*$",
    re.IGNORECASE,
)


@total_ordering
@dataclass(frozen=True)
class SglangVersion:
    """A released SGLang version, e.g. ``0.5.9`` or ``0.5.9.post1``.

    Ordering follows release order: ``0.5.10rc0 < 0.5.10 < 0.5.10.post1``.
    """

    major: int
    minor: int
    patch: int = 0
    tag: str = ""  # "", "post", "rc", "dev"
    tag_num: int = 0

    def _key(self) -> tuple[int, int, int, int, int]:
        rank = {"dev": -2, "rc": -1, "": 0, "post": 1}[self.tag]
        return (self.major, self.minor, self.patch, rank, self.tag_num)

    def __lt__(self, other: object) -> bool:
        other_v = as_version(other)  # type: ignore[arg-type]
        return self._key() < other_v._key()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (str, SglangVersion)):
            try:
                return self._key() == as_version(other)._key()
            except ConfigError:
                return False
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        base = f"{self.major}.{self.minor}.{self.patch}"
        if self.tag == "post":
            return f"{base}.post{self.tag_num}"
        if self.tag:
            return f"{base}{self.tag}{self.tag_num}"
        return base

    @property
    def regime(self) -> str:
        """``"A"`` (<= 0.5.13: draft built after the KV pool) or ``"B"`` (>= 0.5.14)."""
        return "A" if self < _V0_5_14 else "B"

    @property
    def dialect(self) -> str:
        """``"classic"`` (< 0.5.23 flag names) or ``"modern"`` (>= 0.5.23)."""
        return "classic" if self < _V0_5_23 else "modern"

    def at_least(self, other: str | SglangVersion) -> bool:
        """``self >= other``, accepting a version string."""
        return not self < as_version(other)


def parse_version(text: str) -> SglangVersion:
    """Parse ``"0.5.9"``, ``"v0.5.23"``, ``"0.5.9.post1"``, ``"0.5.10rc0"``.

    Raises :class:`ConfigError` naming the value when it is not a version.
    """
    m = _VERSION_RE.match(str(text))
    if not m:
        raise ConfigError(f"sglang_version: cannot parse {text!r} (expected e.g. '0.5.9' or '0.5.23')")
    return SglangVersion(
        major=int(m["major"]),
        minor=int(m["minor"]),
        patch=int(m["patch"] or 0),
        tag=(m["tag"] or "").lower(),
        tag_num=int(m["tagnum"] or 0),
    )


def as_version(v: str | SglangVersion) -> SglangVersion:
    """Accept either a parsed version or a version string."""
    if isinstance(v, SglangVersion):
        return v
    if isinstance(v, str):
        return parse_version(v)
    raise ConfigError(f"sglang_version: expected a version string, got {v!r}")


_V0_5_14 = SglangVersion(0, 5, 14)
_V0_5_23 = SglangVersion(0, 5, 23)

#: The generation of the seed case (February 2026).
DEFAULT_VERSION = SglangVersion(0, 5, 9)
