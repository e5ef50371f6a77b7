"""Why a failed load point failed: the server's own reason when it died or its log proves one."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.outcome import FailureKind
from autotune.trial import live
from autotune.trial.contract import TrialResult, TrialState

OOM = "RuntimeError: Decode out of memory. Try to lower your batch size."


class _Server:
    """The part of ServerProcess ``_why_server_failed`` reads: alive for ``polls`` polls, then exited."""

    failure = None

    def __init__(self, polls: int | None) -> None:
        self.polls = polls

    @property
    def returncode(self) -> int | None:
        if self.polls is None:
            return None  # never exits
        self.polls -= 1
        return 1 if self.polls <= 0 else None


def _failed_load(tmp_path: Path, lines: list[str]) -> tuple[Path, TrialResult]:
    log = tmp_path / "server.log"
    log.write_text("\n".join(["[2026-12-02 08:40:01] The server is fired up and ready to roll!", *lines]) + "\n")
    result = TrialResult(state=TrialState.FAILED)
    result.fail(FailureKind.LOAD_FAILED, "load point failed: no request completed (server error x17)")
    return log, result


def test_a_server_that_exits_just_after_its_clients_failed_is_judged_by_its_log(tmp_path: Path) -> None:
    """The OOM under load: requests fail first, the process exits a few polls later."""
    log, result = _failed_load(tmp_path, ["Traceback (most recent call last):", OOM])
    live._why_server_failed(_Server(polls=5), log, result)  # type: ignore[arg-type]
    assert (result.failure_kind, result.evidence) == (FailureKind.RUNTIME_OOM, OOM)


def test_a_server_still_up_whose_log_proves_an_oom_is_judged_by_it(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "DYING_GRACE_S", 0.2)
    log, result = _failed_load(tmp_path, [OOM])
    live._why_server_failed(_Server(polls=None), log, result)  # type: ignore[arg-type]
    assert result.failure_kind == FailureKind.RUNTIME_OOM


def test_a_server_still_up_with_nothing_in_its_log_stays_a_load_failure(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Alive and silent after the grace: not a startup timeout, not a crash; the load's own reason stands."""
    monkeypatch.setattr(live, "DYING_GRACE_S", 0.2)
    log, result = _failed_load(tmp_path, ["INFO: 127.0.0.1 - POST /v1/completions 200 OK"])
    live._why_server_failed(_Server(polls=None), log, result)  # type: ignore[arg-type]
    assert result.failure_kind == FailureKind.LOAD_FAILED
    assert result.evidence.startswith("load point failed")
