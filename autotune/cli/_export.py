"""``autotune export STUDY.yaml -o FILE``: one row per trial to .csv or .parquet."""

from __future__ import annotations

import argparse

from autotune.cli._common import add_study_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="every trial as one row (params, metrics per load point, prediction) to CSV/Parquet")
    add_study_arg(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="output file: .csv or .parquet (never the study file or its storage)")
    p.set_defaults(func=_export)


def _export(args: argparse.Namespace) -> int:
    from autotune.node.study_file import load_study
    from autotune.results.export import check_output, export

    check_output(args.output)  # a bad suffix fails before the study is opened
    frame = export(load_study(args.study), args.output)
    print(f"wrote {len(frame)} trials x {len(frame.columns)} columns to {args.output}")
    return 0
