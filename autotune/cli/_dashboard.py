"""``autotune dashboard STUDY.yaml [--host 127.0.0.1 [--expose]] [--port 8080]``: optuna-dashboard with
each trial's server log, launch command, load summary, per-request records and note."""

from __future__ import annotations

import argparse
import sys

from autotune.cli._common import add_study_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dashboard", help="serve optuna-dashboard for the study, with trial artifacts and notes")
    add_study_arg(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; tunnel with ssh -L); another needs --expose")
    p.add_argument("--expose", action="store_true",
                   help="allow a --host beyond loopback: anyone who reaches it can read trials and edit notes")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    p.set_defaults(func=_dashboard)


def _dashboard(args: argparse.Namespace) -> int:
    from autotune.node.study_file import load_study
    from autotune.results.dashboard import serve

    def ready(url: str) -> None:
        print(f"dashboard: {url}  (Ctrl-C stops)", flush=True)

    spec = load_study(args.study)
    serve(spec, args.host, args.port, on_ready=ready, expose=args.expose)
    print("dashboard stopped", file=sys.stderr)
    return 0
