"""The SGLang that will really be launched: its version and its real argument parser.

When the python that runs ``sglang.launch_server`` can import SGLang, autotune asks
it (in a subprocess, so autotune's own interpreter needs no SGLang) for its version
and feeds it every candidate's argv before launch: a knob the installed version
lacks is refused up front, with SGLang's own error, instead of by a crashed launch.
"""

from __future__ import annotations

import json
import logging
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from autotune.errors import ConfigError
from autotune.sglang.versions import parse_version

log = logging.getLogger(__name__)

SCRIPT = Path(__file__).with_name("_real_parser_script.py")


@dataclass
class InstalledSglang:
    python: str
    version: str
    _cache: dict[tuple[str, ...], str | None] = field(default_factory=dict)

    def refusals(self, argvs: list[list[str]], *, timeout_s: float = 600.0) -> list[str | None]:
        """SGLang's parser error for each argv (flags only, without ``python -m module``), None if accepted.

        The parser process imports SGLang (seconds when idle; over 120 s seen on 2 busy cores)."""
        todo = [a for a in argvs if tuple(a) not in self._cache]
        if todo:
            payload = "".join(json.dumps(a) + "\n" for a in todo)
            proc = subprocess.run([self.python, str(SCRIPT)], input=payload, capture_output=True, text=True,
                                  timeout=timeout_s, check=False)
            lines = proc.stdout.splitlines()
            if proc.returncode != 0 or len(lines) != len(todo):
                raise ConfigError(f"server.python: {self.python!r} could not run SGLang's parser: "
                                  f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
            for argv, line in zip(todo, lines, strict=False):
                ans = json.loads(line)
                self._cache[tuple(argv)] = None if ans.get("ok") else (ans.get("error") or "refused")
        return [self._cache[tuple(a)] for a in argvs]


def probe(python: str, *, timeout_s: float = 600.0) -> InstalledSglang | None:
    """The SGLang importable by ``python``, or None when it cannot import ``sglang.srt.server_args``."""
    try:
        proc = subprocess.run([python, str(SCRIPT), "--info"], capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.info("no SGLang parser from %s: %s", python, exc)
        return None
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    try:
        info = json.loads(proc.stdout.splitlines()[-1])
    except json.JSONDecodeError:
        return None
    return InstalledSglang(python=python, version=str(info.get("version")))


#: The flags whose presence (or deprecation) decides how autotune spells a launch (flags.render_argv).
_SPELLING_FLAGS = (("--cuda-graph-max-bs", True), ("--disable-cuda-graph", True),
                   ("--flashinfer-allreduce-fusion-backend", False), ("--attn-dp-size", False))


def _spelling(version: str) -> tuple[bool, ...]:
    from autotune.sglang.flags.argv import has_flag

    return tuple(has_flag(version, name, current=current) for name, current in _SPELLING_FLAGS)


def check_version(installed: InstalledSglang, wanted: str) -> None:
    """Refuse a study whose flag spelling or memory regime differs from the installed SGLang's.

    The spelling is read from both releases' flag tables (e.g. 0.5.21 and 0.5.22 differ: --attn-dp-size).
    """
    have, want = parse_version(installed.version), parse_version(wanted)
    if (have.dialect, have.regime) != (want.dialect, want.regime) or _spelling(str(have)) != _spelling(str(want)):
        raise ConfigError(
            f"server.sglang_version: the study says {wanted!r} but {installed.python} runs SGLang "
            f"{installed.version} (flag dialect {have.dialect}, memory regime {have.regime}); set it to "
            f"{installed.version!r}"
        )
    if have != want:
        log.warning("study says SGLang %s, installed is %s (same dialect and regime)", wanted, installed.version)
