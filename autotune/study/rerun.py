"""Which failed trials run once more: those the node, not the candidate, may have caused.

A Ray worker that died, a port someone else took between the probe and the bind, a
server killed by a signal from outside, a load point that failed because the server
died or hung mid-load: each says nothing certain about the candidate. The trial runs
once more (the re-run carries ``after_death``); a second failure of the same kind
stands, so a candidate that really crashes costs one extra launch, not the study a
lost measurement.
"""

from __future__ import annotations

import re
from typing import Any

from autotune.outcome import FailureKind
from autotune.study.attrs import AFTER_DEATH

ONCE_MORE = {
    FailureKind.WORKER_DIED.value,
    FailureKind.PORT_IN_USE.value,
    FailureKind.LOAD_FAILED.value,
}


# A process of the server killed by a signal: autotune's exit text, or SGLang's SubprocessWatchdog
# ("Subprocess scheduler_0 (pid=N) crashed with exit code -9": a negative code is a signal).
_KILLED = re.compile(r"killed by SIG|crashed with exit code -\d")


def run_once_more(failure_kind: FailureKind | str | None, evidence: str, attrs: dict[str, Any]) -> bool:
    """True when a trial that ended with ``failure_kind`` should run once more."""
    if attrs.get(AFTER_DEATH):
        return False
    if failure_kind is not None and str(failure_kind) in ONCE_MORE:
        return True
    # "exited with no recognised reason" after a signal from outside (kill, host OOM killer)
    return str(failure_kind) == FailureKind.CRASHED.value and _KILLED.search(evidence or "") is not None
