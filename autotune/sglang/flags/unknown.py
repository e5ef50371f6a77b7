"""Flags a release's parser does not declare: a typo, another release's flag, or a newer build's flag.

autotune's parser for a release is built from that release's flag table
(read from its wheel, :mod:`autotune.sglang.flags.release_tables`). A ``--flag`` the
table lacks is judged by one rule, the same before launch (``plan``, the
driver's vetting) and in the simulated server, which plays a build of the
study's release:

* a prefix of the release's flags is argparse's own business (``allow_abbrev``
  as SGLang has it): one match is that flag, several are "ambiguous option";
* a flag of another release autotune has a table for is that release's flag:
  refused as the study's release refuses it ("unrecognized arguments: ...");
* a near miss of a flag the release accepts is a typo, refused the same way:
  :func:`difflib.SequenceMatcher` ratio >= ``TYPO_RATIO`` to a flag, or
  >= ``ABBREV_TYPO_RATIO`` to the abbreviation of one argparse would take
  (``--cuda-graph-max-bz`` against 0.5.23's ``--cuda-graph-max-bs[-decode]``);
* anything else is a flag of a newer build than the tables know (SGLang main,
  a fork): accepted with no modelled effect (memory or speed), and ``plan``
  says it is not validated by a real parser.

With a real SGLang venv of the study's version (``backend: sglang``) its own
parser decides every candidate before launch instead (``autotune.sglang.flags.installed``).

The two ratios **[fitted]** on the tables: of 288 random one-edit typos of
0.5.23's flags, 285 are near misses; of the 255 flags 0.5.23 added over 0.5.9,
20 look like typos to 0.5.9's parser. Those are refused, the safe side: a
newer flag that close to an existing one needs the real parser to decide.
"""

from __future__ import annotations

import argparse
import difflib
import functools
from collections.abc import Collection, Iterable

from autotune.sglang.flags.release_tables import known_versions, load_table, table_for
from autotune.sglang.versions import SglangVersion, as_version

__all__ = ["TYPO_RATIO", "ABBREV_TYPO_RATIO", "verdict", "newer_flags", "accept_newer_flags", "plan_note"]

TYPO_RATIO = 0.85  # [fitted] see the module doc
ABBREV_TYPO_RATIO = 0.9  # [fitted] see the module doc


def _name(token: str) -> str | None:
    if not token.startswith("--") or token == "--":
        return None
    return token.split("=", 1)[0]


def flag_tokens(argv: Iterable[str]) -> list[str]:
    """The ``--flag`` names of ``argv`` in order, once each (``--flag=value`` counts as ``--flag``)."""
    out: dict[str, None] = {}
    for token in argv:
        name = _name(str(token))
        if name is not None:
            out.setdefault(name)
    return list(out)


@functools.cache
def _other_releases(name: str) -> tuple[str, ...]:
    return tuple(v for v in known_versions() if load_table(v).has(name))


def _near_miss(name: str, known: Collection[str]) -> str | None:
    bare = name[2:]
    longs = [k[2:] for k in known if k.startswith("--")]
    close = difflib.get_close_matches(bare, longs, n=1, cutoff=TYPO_RATIO)
    if close:
        return "--" + close[0]
    abbrevs: dict[str, str] = {}
    for k in sorted(longs):
        if len(k) > len(bare):
            abbrevs.setdefault(k[: len(bare)], k)
    close = difflib.get_close_matches(bare, list(abbrevs), n=1, cutoff=ABBREV_TYPO_RATIO)
    return "--" + abbrevs[close[0]] if close else None


def _release_names(version: str | SglangVersion) -> frozenset[str]:
    return _table_names(table_for(version).version)


@functools.lru_cache(maxsize=64)
def _table_names(table_version: str) -> frozenset[str]:
    """The option strings of a release's parser: one object per table, so its hash is computed once."""
    return frozenset(load_table(table_version).by_name) | {"-h", "--help"}


def verdict(name: str, version: str | SglangVersion, known: Collection[str] | None = None) -> tuple[str, str]:
    """``(kind, detail)`` of ``name`` for ``version``'s parser; ``known``: that parser's option strings
    (default: the release's table). kind: ``known``, ``prefix`` (argparse resolves or refuses it as an
    abbreviation; detail: the matches), ``other_release`` (detail: those releases), ``typo`` (detail: the
    flag it misses) or ``newer``. Cached per flag and option set: it depends on nothing else, and a
    study's flags are judged again for every candidate it predicts (difflib's near-miss search was 16 ms
    a flag, 48 s before the first launch of a study searching 3,000 flags)."""
    names = _release_names(version) if known is None else known if isinstance(known, frozenset) else frozenset(known)
    return _verdict(name, names)


@functools.lru_cache(maxsize=8192)
def _verdict(name: str, names: frozenset[str]) -> tuple[str, str]:
    if name in names:
        return "known", ""
    matches = sorted(k for k in names if k.startswith(name))
    if matches:
        return "prefix", ", ".join(matches)
    other = _other_releases(name)
    if other:
        return "other_release", other[0] if len(other) == 1 else f"{other[0]}..{other[-1]}"
    near = _near_miss(name, names)
    if near:
        return "typo", near
    return "newer", ""


def newer_flags(argv: Iterable[str], version: str | SglangVersion, known: Collection[str] | None = None) -> list[str]:
    """The flags of ``argv`` that :func:`verdict` takes for a newer build's."""
    names = None if known is None else frozenset(known)  # once, not per flag
    return [n for n in flag_tokens(argv) if verdict(n, version, names)[0] == "newer"]


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def accept_newer_flags(parser: argparse.ArgumentParser, argv: Iterable[str], version: str | SglangVersion) -> list[str]:
    """Declare on ``parser`` the newer-build flags of ``argv`` (``--flag`` alone reads True, ``--flag V``
    reads V; dest ``newer_flag:--flag``) so it parses them; returns their names. A typo, another
    release's flag or an ambiguous prefix is left to the parser, which refuses it in its own words."""
    names = newer_flags(argv, version, _option_strings(parser))
    for name in names:
        parser.add_argument(name, nargs="?", const=True, default=None, dest=f"newer_flag:{name}",
                            help=argparse.SUPPRESS)
    return names


def newer_values(ns: argparse.Namespace) -> dict[str, object]:
    """``{flag: value}`` of the newer-build flags a parser built by :func:`accept_newer_flags` read."""
    return {k.removeprefix("newer_flag:"): v for k, v in vars(ns).items() if k.startswith("newer_flag:")}


def plan_note(name: str, version: str | SglangVersion, *, real_parser: bool) -> str:
    """The one line ``plan`` shows for a searched flag autotune's catalogue does not know."""
    v = as_version(version)
    if real_parser:
        return "unknown to autotune: no memory effect assumed; the installed SGLang's parser checks it before launch"
    kind, detail = verdict(name, v)
    if kind == "known":
        return f"unknown to autotune: no memory effect assumed; a flag of SGLang {v}, checked by its flag table"
    if kind == "prefix" and "," in detail:
        return (f"an ambiguous abbreviation (could match {detail}): SGLang {v}'s parser refuses it, trials with it "
                "are pruned as invalid_args")
    if kind == "prefix":
        return f"an abbreviation of {detail} (argparse takes it as that flag); no memory effect assumed"
    if kind == "other_release":
        return (f"a flag of SGLang {detail}, not of {v}: its parser refuses it, trials with it are pruned as "
                "invalid_args")
    if kind == "typo":
        return (f"not a flag of SGLang {v} (near miss of {detail}): its parser refuses it, trials with it are "
                "pruned as invalid_args")
    return (f"unknown flag: no memory effect assumed, not validated by a real parser (not in SGLang {v}'s "
            "flags: taken for a newer build's)")
