"""Fixtures shared across test modules, the leak guard, and the suite's process-wide settings."""

import signal
from collections.abc import Iterator

import pytest
from support.ci import SLOW_TIER_MARKERS, in_ci

# Fixtures and hooks live in tests/support/ (its __init__ is the map); no test module imports another.
pytest_plugins = (
    "support.leak_guard",  # fails the test that leaves a process, port, Ray instance, handler, env var or cwd behind
    "support.finished_study",  # finished_spec: one finished study for the results tests
    "support.postgres",  # pg: a throwaway PostgreSQL server (skips outside CI when it cannot start)
    "support.real_sglang",  # real_server: one real SGLang server on CPU shared by the tests that only load it
    "pytester",  # tests/test_leak_guard.py runs a leaky inner session
)


def pytest_configure(config: pytest.Config) -> None:
    # A shell without job control starts background commands (`pytest ... &`, nohup, CI
    # harnesses) with SIGINT ignored, and an ignored SIGINT is inherited through fork and
    # exec by every process the suite starts: the Ctrl-C tests' orchestrators and dashboard,
    # and the workers of a Ray instance, whose soft cancel is a SIGINT (interrupt_main), then
    # never see it and time out. The suite runs as if started from a terminal.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# The slow tier (support/ci.py SLOW_TIER_MARKERS): deselected by the default command (pyproject's
# addopts: -m "not slow_tier"), run with `python3 -m pytest -q -m slow_tier`.
@pytest.hookimpl(tryfirst=True)  # before pytest's own -m deselection reads the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(m) for m in SLOW_TIER_MARKERS):
            item.add_marker(pytest.mark.slow_tier)


@pytest.fixture
def cli_signal_handlers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`autotune run` called in this process installs its SIGINT/SIGTERM handlers (once per process):
    a test that calls it uses this fixture to put the suite's handlers back afterwards."""
    from autotune.launch import cleanup

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(cleanup, "_installed", False)
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    # CI builds every engine, server and browser the slow tier needs: one missing is a broken CI.
    if rep.skipped and in_ci() and item.get_closest_marker("slow_tier") and not hasattr(rep, "wasxfail"):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = f"CI=true: a slow-tier test may not skip: {reason}"
