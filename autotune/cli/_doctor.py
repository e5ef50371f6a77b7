"""``autotune doctor STUDY.yaml``: check the node before a long study; exit 1 if any check fails."""

from __future__ import annotations

import argparse

from autotune.cli._common import add_study_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="check this node before a long study (GPUs, SGLang, model, disk, ports, storage, Ray)",
        description="One line per check: driver and GPUs visible, GPUs free of other processes, SGLang "
        "version and flag dialect, model directory and size, free disk for artifacts, ports, storage, Ray "
        "reachable. Starts no server and no Ray instance. Exit 1 if any check fails.",
    )
    add_study_arg(p)
    p.set_defaults(func=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    from autotune.doctor.checks import run_checks
    from autotune.node.study_file import load_study

    checks = run_checks(load_study(args.study))
    for c in checks:
        print(c.line())
    failed = [c.name for c in checks if c.ok is False]
    passed = sum(1 for c in checks if c.ok)
    print(f"{passed} passed, {len(checks) - passed - len(failed)} skipped, {len(failed)} failed"
          + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
