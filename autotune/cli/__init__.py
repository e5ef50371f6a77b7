"""The ``autotune`` command line: thin commands over library calls.

Each command lives in its own module exposing ``register(subparsers)``, which adds
a sub-parser whose ``func`` default takes the parsed namespace and returns an exit
code. ``main`` catches :class:`~autotune.errors.AutotuneError` only: a
``ConfigError`` prints one line and exits 2; anything else is a bug and shows a
traceback. A reader that stops early (``autotune plan study.yaml | head -1``) ends
any command quietly with exit 141 (:func:`main`).

Modules: ``_run``, ``_plan``, ``_status``, ``_best``, ``_calibrate``, ``_export``, ``_report``,
``_dashboard``, ``_bench``, ``_sglang_env``, ``_doctor``: one command each (``autotune <command>``);
``_common``: the option bundles and JSON output they share. All private to this package.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import select
import sys

from autotune import __version__
from autotune.errors import AutotuneError, ConfigError
from autotune.limits import clip
from autotune.redact import RedactingFilter, redact_text

# Command modules, in the order --help lists them.
COMMANDS = (
    "run",
    "plan",
    "status",
    "best",
    "calibrate",
    "export",
    "report",
    "dashboard",
    "bench",
    "sglang-env",
    "doctor",
)


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so main() owns the exit code."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(f"{self.prog}: {clip(message, 300)}")  # argparse echoes a whole bad value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="autotune",
        description="Find the best launch settings for an SGLang server by experiment.",
    )
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"autotune.cli._{name.replace('-', '_')}").register(sub)
    return parser


# Exit status when the reader of our output went away: 128 + SIGPIPE, what a shell reports for
# coreutils, git or grep killed by SIGPIPE in `cmd | head -1`. Not 0: the output was cut short,
# and a script with `set -o pipefail` should see that as it does for `cat big | head -1`.
EXIT_BROKEN_PIPE = 128 + 13


def _pipe_closed(stream: object) -> bool:
    """Whether ``stream`` is a pipe or socket whose reader has gone (poll says POLLERR/POLLHUP)."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no fd (captured), closed, or no poll()
        return False


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code. A closed stdout or stderr (the reader stopped early) ends
    it quietly with :data:`EXIT_BROKEN_PIPE`; a BrokenPipeError from anything else (a server's
    socket) is still a bug, shown with its traceback."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, not at interpreter exit, where a closed pipe is a stray error
        return code
    except BrokenPipeError:
        closed = [s for s in (sys.stdout, sys.stderr) if _pipe_closed(s)]
        if not closed:
            raise
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in closed:  # so the interpreter's final flush has somewhere to go
            os.dup2(devnull, stream.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help / --version
        return int(exc.code or 0)
    except ConfigError as exc:
        print(f"error: {redact_text(str(exc))}", file=sys.stderr)
        return 2
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2) if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for handler in logging.getLogger().handlers:  # no secret in any log line (autotune.redact)
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"error: {redact_text(str(exc))}", file=sys.stderr)
        return 2
    except AutotuneError as exc:
        print(f"error: {redact_text(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
