"""``autotune run STUDY.yaml``: create or resume the study and run it to its budget."""

from __future__ import annotations

import argparse

from autotune.cli._common import add_study_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run (or resume) a study until it holds n_trials finished trials",
        description="Create or resume the study: launch servers with candidate settings, load them, record "
        "throughput and latency, prune out-of-memory candidates before launch. Safe to re-run after an "
        "interruption: interrupted trials run again and leftover servers are ended first.",
    )
    add_study_arg(p)
    p.add_argument("--n-trials", type=int, default=None, help="override the study's n_trials")
    p.add_argument("--executor", choices=("inline", "ray"), default=None, help="override executor.kind")
    p.add_argument("--no-progress", action="store_true", help="plain log lines instead of a live progress view")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from autotune.errors import ConfigError
    from autotune.limits import shown
    from autotune.node.study_file import load_study
    from autotune.study.driver import run_study

    spec = load_study(args.study)
    updates = {}
    if args.n_trials is not None:
        if not 1 <= args.n_trials <= 100_000:  # the study file's own bound (StudySpec.n_trials)
            raise ConfigError(f"--n-trials: must be from 1 to 100000, got {shown(args.n_trials)}")
        updates["n_trials"] = args.n_trials
    if args.executor:
        updates["executor"] = spec.executor.model_copy(update={"kind": args.executor})
    if updates:
        spec = spec.model_copy(update=updates)
    from autotune.preflight import check_study, warn_exposed

    warn_exposed(spec)  # server.expose: said in words in the study, and said again here
    check_study(spec)  # every process-free check, before Ray, SGLang or the storage is touched
    from autotune.results.progress import make_progress

    progress = make_progress(enabled=not args.no_progress)
    from autotune.launch import install_signal_handlers

    install_signal_handlers()  # Ctrl-C / SIGTERM tear every live server down within seconds
    summary = run_study(spec, progress=progress)
    states = ", ".join(f"{k}={v}" for k, v in sorted(summary.states.items()))
    from autotune.redact import redact_text

    # the study's name is the user's text: a token pasted there is hidden as in every other line
    extra = [f"{n} {what}" for n, what in ((summary.confirmations, "confirmation re-runs"),
                                            (summary.retried, "interrupted and re-run")) if n]
    total = sum(summary.states.values())
    print(redact_text(f"study {summary.study_name}: {summary.finished} search trials finished; {total} trials in all "
                      f"({states})" + (f", of them {', '.join(extra)}" if extra else "")))
    return 0
