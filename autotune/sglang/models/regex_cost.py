"""How long a ``re:`` pattern of a quantization ignore list may backtrack on one module name, read from the
parse ``re.compile`` makes, before it is ever matched (:mod:`autotune.sglang.models.quant` refuses it).

Python's ``re`` backtracks: on a name it does not match, it tries every way the pattern's variable repeats
can share the name. Nested, they share it exponentially many ways (``(.+)+!`` took 0.7 s on 24 characters
of a module name, 3.2 s on 26: days on the 46 of the longest; ``plan`` never ended); side by side, ``k`` of
them share ``n`` characters ``C(n + k, k)`` ways (``.*.*.*.*!``, 230,300 ways: 6.4 s at 1,024 layers). Both
are refused: a repeat or an alternation inside a repeat, and more ways than the pattern's share of
:data:`autotune.limits.MAX_REGEX_WORK` (ways times the module names it is tried on, over the list).
"""

from __future__ import annotations

import importlib
import re
from typing import Any

__all__ = ["backtracking_problem"]

_NESTED = "{}: backtracking exponential in a module name's length"


def backtracking_problem(pattern: str, name_chars: int, max_ways: int) -> str | None:
    r"""Why ``pattern`` can backtrack for long on a module name of ``name_chars`` characters (None when it
    cannot, or when it does not parse: compiling it names that): a variable repeat or an alternation inside
    a repeat (``(a+)+$``, ``(.|\w)+!``, ``(\w+\.?)+``), or more than ``max_ways`` ways for its variable
    repeats to share the name."""
    c: Any = importlib.import_module("re._constants")  # the stdlib's own parser (re.compile's), untyped
    parser: Any = importlib.import_module("re._parser")
    try:
        parsed = parser.parse(pattern)
    except re.error:
        return None
    repeats = (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT)
    spans: list[tuple[int, int]] = []  # (least, most) characters of each variable repeat

    def walk(items: Any, repeated: bool) -> str | None:
        for op, av in items:
            subs: list[Any] = []
            inside = repeated
            if op in repeats:
                lo, hi, sub = av
                if hi > lo:
                    if repeated:
                        return _NESTED.format("nested quantifiers")
                    spans.append((lo, hi))
                subs, inside = [sub], repeated or hi > 1
            elif op is c.BRANCH:
                if repeated:
                    return _NESTED.format("an alternation inside a repeat")
                subs = list(av[1])
            elif op is c.SUBPATTERN:
                subs = [av[3]]
            elif op is c.ATOMIC_GROUP:
                subs = [av]
            elif op in (c.ASSERT, c.ASSERT_NOT):
                subs = [av[1]]
            elif op is c.GROUPREF_EXISTS:
                subs = [x for x in av[1:] if x is not None]
            for sub in subs:
                problem = walk(sub, inside)
                if problem:
                    return problem
        return None

    problem = walk(parsed, False)
    if problem is None and _ways(spans, name_chars, max_ways) > max_ways:
        problem = f"{len(spans)} variable repeats: over {max_ways:,} ways to backtrack on a module name"
    return problem


def _ways(spans: list[tuple[int, int]], n: int, cap: int) -> int:
    """Ways to give each repeat a length past its least, within its most, all of them at most ``n`` together:
    the length vectors backtracking may try (a little over, the least lengths not taken off ``n``), counted
    until they pass ``cap``: each repeat only adds ways, so at most a few repeats are counted."""
    counts = [1] + [0] * n  # counts[t]: ways for the repeats so far to take t characters past their least
    for lo, hi in spans:
        most = min(hi - lo, n)
        total, nxt = 0, [0] * (n + 1)
        for t in range(n + 1):  # nxt[t] = counts[t - most] + ... + counts[t]: a running window
            total += counts[t] - (counts[t - most - 1] if t > most else 0)
            nxt[t] = total
        counts = nxt
        if sum(counts) > cap:
            return cap + 1
    return sum(counts)
