"""``autotune best STUDY.yaml [--json]``: the winner, its launch command and its gain."""

from __future__ import annotations

import argparse

from autotune.cli._common import add_json_flag, add_study_arg, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("best", help="the winning configuration, its SGLang launch command and gain over defaults")
    add_study_arg(p)
    add_json_flag(p)
    p.set_defaults(func=_best)


def _best(args: argparse.Namespace) -> int:
    from autotune.node.study_file import load_study
    from autotune.results.summary import best, lineage_lines

    data = best(load_study(args.study))
    if args.json:
        print_json(data)
        return 0
    choice = data.get("choice") or {}
    print(f"best: trial {data['number']}  {data['metric']} = {data['value']:.2f}"
          + (f"  ({choice['recommended_basis']})" if choice.get("recommended_basis") else ""))
    if choice.get("reason"):
        print(f"why: {choice['reason']}")
    if data["baseline_value"] is not None:
        print(f"baseline (SGLang defaults, trial {data['baseline_number']}): {data['baseline_value']:.2f}  "
              f"gain {data['gain_pct']:+.2f} %")
    for ref in data.get("references") or []:  # search.references: the configurations named in the study
        where = f"trial {ref['number']}" + (f", trial {ref['reused_from']}'s launch" if ref.get("reused_from")
                                            is not None else "")
        if ref["value"] is None:
            print(f"reference {ref['name']!r} ({where}): no value ({ref['why']})")
        else:
            gain = f"  gain {ref['gain_pct']:+.2f} %" if ref["gain_pct"] is not None else ""
            print(f"reference {ref['name']!r} ({where}): {ref['value']:.2f}{gain}")
    print(f"params: {data['params']}")
    for line in lineage_lines(data.get("lineage") or []):  # warm start: the studies this result built on
        print(f"built on: {line}")
    if data.get("warm_from"):
        print(f"this configuration came from {data['warm_from']} (warm start)")
    for w in data.get("workloads") or []:  # a workload mix: each workload's own figures
        slo = "" if w["slo_met"] is None else f", SLO {'met' if w['slo_met'] else 'MISSED'} {w['slo']}"
        figs = ", ".join(f"{k} {v:.4g}" for k, v in w["figures"].items())
        print(f"  workload {w['name']} (weight {w['weight']:g}) at {w['point']}: {data['metric']} = "
              f"{w['value']:.2f}{slo}; {figs}")
    print("launch:")
    print(f"  {data['shell']}")
    for r in data["runners_up"]:
        gain = f"{r['gain_pct']:+.2f} %" if r["gain_pct"] is not None else "n/a"
        tie = " (tie)" if r["number"] in choice.get("tie_group", []) else ""
        print(f"runner-up{tie}: trial {r['number']} value {r['value']:.2f} ({gain}) {r['params']}")
    return 0
