"""``autotune plan STUDY.yaml [--json] [--set KNOB=VALUE ...]``: memory verdicts, no launch."""

from __future__ import annotations

import argparse

from autotune.cli._common import add_json_flag, add_study_arg, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="predict, without launching, which candidates fit in GPU memory",
        description="The memory verdict (fits, kv_oom, graph_capture_oom, runtime_oom_risk, too_few_tokens; unknown for "
        "a model whose architecture the memory model does not know, until a launch calibrates it) for every "
        "candidate on the search-space grid, or for the candidates fixed by --set (other knobs at SGLang's "
        "defaults); a grid of more than 100,000 candidates is refused with its size. The study is checked first "
        "as run checks it. Uses the study's calibration when it has one. First, what each warm_start study carries "
        "and why, and the knobs that leave the space. --json prints one object: warm_start {studies: [{study, "
        "file, sglang_version, differences, carried, decisions: [{what, carried, reason}], notes}], "
        "calibration}, removed [{name, value, reason, line}], space [lines], candidates [one row each]. Where the "
        "model family's pool rule varies by build or release (DeepSeek V4), a row carries kv_tokens_low / "
        "kv_tokens_high (null: unknown on that side) and kv_range (why), the table shows them after the tokens, "
        "and the candidate is uncertain (never pruned) until a launch has shown the pool.",
    )
    add_study_arg(p)
    add_json_flag(p)
    p.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE[,VALUE...]",
                   help="fix a knob (repeatable; comma-separated values give one candidate each)")
    p.set_defaults(func=_plan)


def _plan(args: argparse.Namespace) -> int:
    from autotune.node.study_file import load_study
    from autotune.preflight import check_study
    from autotune.study.plan import ROW_KEYS, plan_document, plan_rows, plan_space, warm_start

    spec = load_study(args.study)
    check_study(spec, writes=False)  # the checks run makes: a study plan accepts does not fail later on a value
    warm = warm_start(spec)
    rows = plan_rows(spec, args.set, warm)
    space = plan_space(spec)
    if args.json:
        print_json(plan_document(warm, space, rows))
        return 0
    for line in warm.lines:  # what the earlier studies of warm_start carry, and why
        print(line)
    for r in space["removed"]:
        print(r["line"])
    print("space that remains:")
    for line in space["space"]:
        print(f"  {line}")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    shown = {*ROW_KEYS, "uncertain", "command", "notes"}  # the verdict's columns; the rest are the candidate's knobs
    knobs = [k for k in rows[0] if k not in shown] if rows else []
    for r in rows:
        vals = " ".join(f"{k}={r[k]}" for k in knobs)
        tokens = f"{r['kv_tokens']:>9,}" if isinstance(r.get("kv_tokens"), int) else f"{'-':>9}"
        if r.get("kv_range"):  # the family's rule varies by build: where the pool can be until a launch shows it
            lo, hi = r.get("kv_tokens_low"), r.get("kv_tokens_high")
            tokens += f" ({'?' if lo is None else f'{lo:,}'}..{'?' if hi is None else f'{hi:,}'})"
        server = r.get("server_kv_tokens")
        if isinstance(server, int) and r.get("kv_tokens") and server != r["kv_tokens"]:  # per pool, then the server
            tokens += f" tok each (DP ranks / replicas), {server:,}"
        print(f"{r['verdict']:<17} {tokens} tok  {vals}  | {r['reason']}")
    print(f"{len(rows)} candidates: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0
