"""Option bundles and output helpers shared by the commands."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_study_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", metavar="STUDY.yaml", help="the study file")


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document instead of a table")


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
