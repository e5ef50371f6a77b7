"""``autotune calibrate STUDY.yaml --from-log server.log [--json]``."""

from __future__ import annotations

import argparse

from autotune.cli._common import add_json_flag, add_study_arg, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate",
        help="learn P, A, KV tokens and graph memory from an SGLang log and store them with the study",
        description="Parse a server log you already have (either generation's wording, every rank's lines, "
        "noise between them). P and A are the minimum over ranks, as SGLang takes them.",
    )
    add_study_arg(p)
    p.add_argument("--from-log", required=True, metavar="server.log", help="an SGLang server log")
    p.add_argument("--force", action="store_true",
                   help="store it even where the log contradicts the study (another architecture, TP/DP size, "
                        "a P the study's GPU cannot have, or another model's weights); without it such a log exits 2 "
                        "and stores nothing. Figures that are no measurement (not finite, beyond the GPU's memory) "
                        "are never stored")
    add_json_flag(p)
    p.set_defaults(func=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    from autotune.node.study_file import load_study
    from autotune.preflight import check_study
    from autotune.study.calibration import calibrate_from_log

    spec = load_study(args.study)
    check_study(spec)  # a study that run would refuse gets nothing stored
    cal = calibrate_from_log(spec, args.from_log, force=args.force)
    if args.json:
        print_json({k: cal.get(k) for k in ("p_gib", "a_gib", "kv_tokens", "graph_gib", "log_wording")}
                   | {"source": cal["source"], "forced": cal.get("forced", [])})
        return 0
    for line in cal.get("forced", []):
        print(f"stored despite (--force): {line}")
    print(f"calibration stored: P={cal['p_gib']} GiB, A={cal['a_gib']} GiB, KV tokens={cal['kv_tokens']}, "
          f"graphs={cal['graph_gib']} GiB (from {cal['source']}, {cal.get('log_wording') or 'unknown'} wording)")
    return 0
