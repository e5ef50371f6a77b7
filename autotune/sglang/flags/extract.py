"""Extract one SGLang release's launch_server flags from its wheel into autotune's per-release table.

    python -m autotune.sglang.flags.extract sglang-0.5.24-...whl [more wheels or versions]

For each wheel (or a version, fetched from the registry), builds its
parser-only environment (:mod:`autotune.sglang.flags.parser_env`), asks SGLang's
REAL parser for every flag it declares (``_real_parser_script.py --info``) and
writes ``autotune/sglang/flags/release_tables/<version>.json``. It then prints what
changed against the nearest older table (flags added, removed, choices and
types changed) for the review. Adding a release is this command, a review of
that summary, and a row in :mod:`autotune.sglang.releases` for its automatic values.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError
from autotune.sglang.flags import parser_env
from autotune.sglang.flags.release_tables import TABLE_DIR, known_versions, load_table
from autotune.sglang.versions import as_version

SCRIPT = Path(__file__).with_name("_real_parser_script.py")
_WHEEL_RE = re.compile(r"^sglang-(?P<version>[^-]+)-")


def _version_of(source: str) -> tuple[str, Path | None]:
    path = Path(source)
    if path.suffix == ".whl":
        m = _WHEEL_RE.match(path.name)
        if not m:
            raise AutotuneError(f"wheel: cannot read a version from {path.name!r}")
        return str(as_version(m["version"])), path
    return str(as_version(source)), None


def extract(source: str) -> dict[str, Any]:
    """The table of one release: ``{"version", "stubbed", "flags": [...]}`` as SGLang's parser declares it."""
    version, wheel = _version_of(source)
    env = parser_env.ensure(version, wheel=wheel)
    proc = subprocess.run([str(env.python), str(SCRIPT), "--info"], capture_output=True, text=True, timeout=600,
                          check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise AutotuneError(f"SGLang {version}: the parser did not import: {proc.stderr.strip()[-500:]}")
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    if str(as_version(info["version"])) != version:
        raise AutotuneError(f"SGLang {version}: the environment reports {info['version']}")
    flags = []
    for f in info["flags"]:
        default = f["default"]
        if isinstance(default, str) and default.startswith("<autotune stub"):
            default = "<computed at import>"
        flags.append({k: f[k] for k in ("names", "dest", "kind", "type", "choices", "nargs", "action", "const", "required")}
                     | {"default": default})
    return {"version": version, "stubbed": info.get("stubbed", []), "flags": flags}


def _summary(new: dict[str, Any]) -> list[str]:
    older = [v for v in known_versions() if as_version(v) < as_version(new["version"])]
    if not older:
        return [f"{new['version']}: {len(new['flags'])} flags (no older table to compare with)"]
    old = load_table(older[-1])
    old_by = {n: f for f in old.flags for n in f["names"]}
    new_by = {n: f for f in new["flags"] for n in f["names"]}
    lines = [f"{new['version']} vs {old.version}: {len(new['flags'])} flags (was {len(old.flags)})"]
    lines += [f"  + {n}" for n in sorted(set(new_by) - set(old_by))]
    lines += [f"  - {n}" for n in sorted(set(old_by) - set(new_by))]
    for n in sorted(set(new_by) & set(old_by)):
        a, b = old_by[n], new_by[n]
        for key in ("kind", "type", "choices", "nargs", "action"):
            if a[key] != b[key]:
                lines.append(f"  ~ {n} {key}: {a[key]} -> {b[key]}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autotune.sglang.flags.extract", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", nargs="+", help="sglang wheel files, or versions to fetch from the registry")
    ap.add_argument("--out", type=Path, default=TABLE_DIR, help=f"folder of the tables (default {TABLE_DIR})")
    args = ap.parse_args(argv)
    for source in args.sources:
        try:
            table = extract(source)
        except AutotuneError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        path = args.out / f"{table['version']}.json"
        path.write_text(json.dumps(table, indent=None, separators=(",", ":")).replace('},{"names"', '},\n{"names"')
                        + "\n")
        print("\n".join(_summary(table)))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
