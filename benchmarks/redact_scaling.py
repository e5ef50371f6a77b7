"""How redaction's time grows with a line's length, on lines built to make a pattern backtrack.

Every line autotune logs, every error it prints and every text artifact it uploads goes through
``autotune.redact.redact_text``; a study file (up to 1 MiB) or a server log reaches it. A rule whose
regex restarts at every character, or nests (``a://b:a://b:...``), turns a small file into minutes.
This prints, per hostile line shape, the median time of 3 calls at N and 4N characters and their
ratio (about 4 when linear, 16 when quadratic), beside the same for plain prose of the same length
(the baseline). Measured wall time on this machine; nothing is modelled.

Usage::

    python benchmarks/redact_scaling.py [--chars 50000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from autotune.redact import redact_text

SHAPES = {
    "plain prose (baseline)": "the server started and served requests ",
    "nested URL pairs a://b:": "a://b:",
    "URL passwords a://b:c@": "a://b:c@",
    "dotted name a.": "a.",
    "dashed name a-": "a-",
    "name=value x=": "x=",
    "name: value a:": "a:",
    "unterminated --a '": "--a '",
    "unterminated a='": "a='",
    "listed flags '--a', '": "'--a', '",
    "scheme dots a.a.a://": "a.a.a://",
    "JSON pairs {\"a\": ": "{\"a\": ",
}


def _median_s(line: str, repeats: int = 3) -> tuple[float, float, float]:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        redact_text(line)
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times), max(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chars", type=int, default=50_000, help="N: the shorter line's length (default 50,000)")
    args = ap.parse_args()
    n = args.chars
    print(f"{'line shape':<28} {'N ms [min-max]':>22} {'4N ms [min-max]':>24} {'4N / N':>7}")
    for name, unit in SHAPES.items():
        short = (unit * (n // len(unit) + 1))[:n]
        long = (unit * (4 * n // len(unit) + 1))[:4 * n]
        a, a_lo, a_hi = _median_s(short)
        b, b_lo, b_hi = _median_s(long)
        print(f"{name:<28} {a * 1e3:8.1f} [{a_lo * 1e3:.1f}-{a_hi * 1e3:.1f}] {b * 1e3:9.1f} "
              f"[{b_lo * 1e3:.1f}-{b_hi * 1e3:.1f}] {b / a if a else float('nan'):7.1f}")


if __name__ == "__main__":
    main()
