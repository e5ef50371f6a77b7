"""``autotune status STUDY.yaml [--json]``."""

from __future__ import annotations

import argparse

from autotune.cli._common import add_json_flag, add_study_arg, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="trial counts by state and the best trial so far")
    add_study_arg(p)
    add_json_flag(p)
    p.set_defaults(func=_status)


def _status(args: argparse.Namespace) -> int:
    from autotune.node.study_file import load_study
    from autotune.results.summary import status

    data = status(load_study(args.study))
    if args.json:
        print_json(data)
        return 0
    print(f"study {data['study']}  ({data['storage']})")
    print(f"budget: {data['budget_used']}/{data['n_trials']} finished trials")
    print("states: " + ", ".join(f"{k} {v}" for k, v in data["states"].items() if v))
    if data["failure_kinds"]:
        print("not completed: " + ", ".join(f"{k} {v}" for k, v in sorted(data["failure_kinds"].items())))
    if data["best"]:
        b = data["best"]
        print(f"best: trial {b['number']} value {b['value']:.2f} params {b['params']}")
    if data["calibration"]:
        c = data["calibration"]
        print(f"calibration: P={c.get('p_gib')} GiB, A={c.get('a_gib')} GiB (from {c.get('source')})")
    return 0
