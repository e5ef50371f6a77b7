"""Feed argv lists to SGLang's REAL launch_server argument parser (run by an SGLang-capable python).

A standalone script (no autotune import): autotune runs it by path with the python
that launches SGLang (``server.python``) to check argv before any launch, and
``tests/test_sglang_real_parser.py`` runs it with ``AUTOTUNE_SGLANG_PYTHON``.

    python autotune/sglang/flags/_real_parser_script.py < argvs.jsonl   # one JSON list of strings a line
        -> one line a argv: {"ok": true|false, "error": null|"<argparse message>",
           "set": {dest: value, ...} (what the argv changed from the parser's defaults)}
    python autotune/sglang/flags/_real_parser_script.py --info
        -> one line: {"version": "0.5.9", "flags": [{"names": [...], "kind": "bool"|"value",
           "type": "int"|..., "choices": [...]|null, "nargs": ..., "default": ...}, ...]}

The parser is a plain ``argparse.ArgumentParser`` on which
``ServerArgs.add_cli_args`` was called, then ``parse_args(argv)``: the flags as
``python -m sglang.launch_server`` declares them, without the dataclass
post-init (``prepare_server_args`` needs a GPU). Anything SGLang writes to
stdout while importing or parsing is sent to stderr, so stdout carries only
the JSON answers.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from typing import Any, NoReturn


class _ParseError(Exception):
    """What argparse would have printed before exiting 2."""


class _RaisingParser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise _ParseError(message)


def _install_stubs() -> list[str]:
    """Placeholders for the heavy modules named by ``AUTOTUNE_PARSER_STUBS`` (a parser-only venv)."""
    import os

    roots = [r.strip() for r in os.environ.get("AUTOTUNE_PARSER_STUBS", "").split(",") if r.strip()]
    if not roots:
        return []
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _parser_stubs  # type: ignore[import-not-found,unused-ignore]  # beside this script

    _parser_stubs.install(roots)
    return sorted(_parser_stubs.STUBBED)


def _make_parser() -> argparse.ArgumentParser:
    _install_stubs()
    from sglang.srt.server_args import ServerArgs

    parser = _RaisingParser(prog="launch_server.py")
    ServerArgs.add_cli_args(parser)
    return parser


def _parse_one(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, Any]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(argv)
    except _ParseError as exc:
        return {"ok": False, "error": str(exc)}
    except SystemExit as exc:  # a custom action that exits on its own
        return {"ok": False, "error": err.getvalue().strip() or f"exit {exc.code}"}
    except Exception as exc:  # a custom action that raises (a bug to report, not a crash)
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    changed = {k: _jsonable(v) for k, v in vars(ns).items() if v != parser.get_default(k)}
    return {"ok": True, "error": None, "set": changed}


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def _flag_info(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    flags = []
    for action in parser._actions:  # argparse has no public accessor for its actions
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        is_bool = action.nargs == 0
        flags.append({
            "names": list(action.option_strings),
            "dest": action.dest,
            "kind": "bool" if is_bool else "value",
            "type": getattr(action.type, "__name__", None) if action.type is not None else None,
            "choices": [str(c) for c in action.choices] if action.choices is not None else None,
            "nargs": action.nargs if not is_bool else None,
            "default": _jsonable(action.default),
            "action": type(action).__name__,
            "const": _jsonable(action.const),
            "required": bool(action.required),
        })
    return flags


def _version() -> str:
    """The installed distribution's version, else the package's own ``__version__`` (a source checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        import sglang

        return str(getattr(sglang, "__version__", "unknown"))


def main() -> int:
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        parser = _make_parser()
        if sys.argv[1:] == ["--info"]:
            import _parser_stubs  # type: ignore[import-not-found,unused-ignore]  # on sys.path when stubs were installed

            answer = {"version": _version(), "flags": _flag_info(parser),
                      "stubbed": sorted(getattr(_parser_stubs, "STUBBED", ()))}
            out.write(json.dumps(answer) + "\n")
            return 0
        for line in sys.stdin:
            if not line.strip():
                continue
            result = _parse_one(parser, [str(x) for x in json.loads(line)])
            out.write(json.dumps(result) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
