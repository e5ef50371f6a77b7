"""``autotune report STUDY.yaml -o report.html``: one self-contained HTML file with plots."""

from __future__ import annotations

import argparse

from autotune.cli._common import add_study_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="one self-contained HTML report: plots, outcomes, top configs and their commands")
    add_study_arg(p)
    p.add_argument("-o", "--output", default="report.html", metavar="FILE", help="the HTML file (default report.html; never the study file or its storage)")
    p.add_argument("--top", type=int, default=5, metavar="N", help="configurations in the top table (default 5)")
    p.set_defaults(func=_report)


def _report(args: argparse.Namespace) -> int:
    from autotune.errors import ConfigError
    from autotune.node.study_file import load_study
    from autotune.results.report import write_report

    if args.top < 1:
        raise ConfigError(f"--top: must be >= 1, got {args.top}")
    out = write_report(load_study(args.study), args.output, top=args.top)
    print(f"report: {out}")
    return 0
