"""Headless Chromium for the results browser tests (marker ``browser``).

Tests skip with a clear reason when /usr/bin/chromium is absent (install it with
``apt-get install -y chromium``). Screenshots are kept under the directory in env
``AUTOTUNE_TEST_ARTIFACTS`` when set, else under the test's tmp_path.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"

needs_chromium = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK),
    reason=f"{CHROMIUM} not found: install Debian's chromium (apt-get install -y chromium) to run browser tests",
)


def artifacts_dir(tmp_path: Path) -> Path:
    """Where screenshots are kept: $AUTOTUNE_TEST_ARTIFACTS, else tmp_path/artifacts."""
    root = os.environ.get("AUTOTUNE_TEST_ARTIFACTS")
    out = Path(root) if root else tmp_path / "artifacts"
    out.mkdir(parents=True, exist_ok=True)
    return out


def chromium(
    url: str,
    tmp_path: Path,
    *,
    screenshot: Path | None = None,
    dump_dom: bool = False,
    window: str = "1280,1600",
    budget_ms: int = 8000,
    timeout_s: float = 90,
) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium once on ``url``; the console goes to stderr (--enable-logging)."""
    profile = tmp_path / f"chromium-profile-{os.getpid()}"
    argv = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={profile}",
        f"--window-size={window}",
        f"--virtual-time-budget={budget_ms}",
    ]
    if screenshot is not None:
        argv.append(f"--screenshot={screenshot}")
    if dump_dom:
        argv.append("--dump-dom")
    argv.append(url)
    # A new session, so that a timeout (or a leftover helper) is killed with its whole group.
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=tmp_path
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"chromium did not finish within {timeout_s} s on {url}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        shutil.rmtree(profile, ignore_errors=True)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def console_errors(stderr: str) -> list[str]:
    """Script errors Chromium logged to the console (uncaught exceptions, failed script loads)."""
    bad = ("Uncaught", "ReferenceError", "TypeError:", "SyntaxError", "Failed to load resource")
    return [line for line in stderr.splitlines() if "CONSOLE" in line and any(b in line for b in bad)]
