"""Every flag of every SGLang release autotune knows, as each release's REAL parser declares it.

One JSON file a release (``<version>.json``), written by
``python -m autotune.sglang.flags.extract WHEEL`` from the release's wheel:
names (aliases after the first), dest, bool or value, type name, choices,
nargs, the argparse action's class (``DeprecatedAliasStoreAction``,
``DeprecatedAction``...) and the default. Removals are what a table lacks
against the previous one.

:func:`table_for` picks the table of a version: its own; for an unknown
release between two known ones, the nearest older known one; for a release
newer than every table, the newest one (with a warning, once a process: run the
extraction for it); below the oldest (0.5.9) it refuses.
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.sglang.versions import SglangVersion, as_version

__all__ = ["OLDEST", "TABLE_DIR", "FlagTable", "known_versions", "load_table", "table_for", "told_by_driver"]

log = logging.getLogger(__name__)
TABLE_DIR = Path(__file__).resolve().parent
OLDEST = "0.5.9"


@dataclass(frozen=True)
class FlagTable:
    version: str  # the release this table was read from
    flags: tuple[dict[str, Any], ...]
    exact: bool = True  # False: asked for another version, this is the nearest known table
    note: str = ""

    @functools.cached_property
    def by_name(self) -> dict[str, dict[str, Any]]:
        return {n: f for f in self.flags for n in f["names"]}

    def has(self, name: str) -> bool:
        return name in self.by_name

    def deprecated(self, name: str) -> bool:
        f = self.by_name.get(name)
        return f is not None and str(f["action"]).startswith("Deprecated")


@functools.lru_cache(maxsize=1)
def known_versions() -> tuple[str, ...]:
    """The releases that have a table, oldest first."""
    names = [p.stem for p in TABLE_DIR.glob("*.json")]
    return tuple(sorted(names, key=as_version))


@functools.cache
def load_table(version: str) -> FlagTable:
    data = json.loads((TABLE_DIR / f"{version}.json").read_text())
    return FlagTable(version=data["version"], flags=tuple(data["flags"]))


# Releases newer than every table whose warning this process has logged (or its driver has, for a
# trial worker): every argv a study renders asks for its table, and one run said it 33 times.
_told: set[str] = set()


def told_by_driver(version: str | SglangVersion) -> None:
    """In a trial worker: the driver has logged the newer-release warning for ``version`` once for the
    run; this process does not log it again (a Ray worker is a fresh process for each trial)."""
    _told.add(str(as_version(version)))


def table_for(version: str | SglangVersion) -> FlagTable:
    """The flag table to use for ``version`` (see the module's doc)."""
    v = as_version(version)
    known = known_versions()
    if v < as_version(OLDEST):
        raise ConfigError(f"server.sglang_version: {v} is older than {OLDEST}, the oldest release autotune "
                          f"supports ({OLDEST}..{known[-1]})")
    if str(v) in known:
        return load_table(str(v))
    older = [k for k in known if as_version(k) < v]
    base = load_table(older[-1])
    if base.version == known[-1]:
        note = (f"SGLang {v} is newer than every release autotune has read; using {base.version}'s flags "
                f"(run python -m autotune.sglang.flags.extract on its wheel)")
        if str(v) not in _told:
            _told.add(str(v))
            log.warning("%s", note)
    else:
        note = f"SGLang {v} has no table of its own; using {base.version}'s, the nearest older release"
    return FlagTable(version=base.version, flags=base.flags, exact=False, note=note)
