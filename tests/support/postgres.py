"""The ``pg`` fixture: a throwaway PostgreSQL server per module (autotune.testing.pg_server).

When the binaries or the driver are missing, the fixture skips with the reason, except
under CI=true, where it fails (the CI script installs both).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.testing.pg_server import PgServer, find_bindir
from support.ci import in_ci


def _unavailable(reason: str) -> None:
    if in_ci():
        pytest.fail(f"PostgreSQL tests must run in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    """A running PostgreSQL for the module; stopped (and its files removed) afterwards."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed (pip install -e '.[test]')")
    bindir = find_bindir()
    if bindir is None:
        _unavailable("PostgreSQL is not installed (initdb not found; apt-get install postgresql)")
    assert bindir is not None
    root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    server = PgServer(bindir, root)
    try:
        server.init()
        server.start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        _unavailable(f"PostgreSQL could not be started: {exc}")
    try:
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
