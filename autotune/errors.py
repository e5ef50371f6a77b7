"""The one exception root of autotune.

::

    AutotuneError
     +-- ConfigError        bad input: study file, CLI value, model directory (exit code 2)
     +-- LaunchError        a server could not be started; carries ``kind`` and ``evidence``
     |    +-- ServerNotReady    it started but never became ready (timeout, died while waiting)
     +-- LoadGenError       the load generator could not run a load point
     +-- ExportError        results could not be written or read back

The CLI catches ``AutotuneError`` only. Anything else is a bug and shows a traceback.
"""

from __future__ import annotations


class AutotuneError(Exception):
    """Root of every error autotune raises on purpose."""


class ConfigError(AutotuneError):
    """Bad input. The message is one line naming the field and the value."""

    exit_code = 2


class LaunchError(AutotuneError):
    """A server launch failed. ``kind`` is a failure kind from :mod:`autotune.outcome`."""

    def __init__(self, message: str, *, kind: str = "crashed", evidence: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.evidence = evidence


class ServerNotReady(LaunchError):
    """The server process started but did not become ready."""


class LoadGenError(AutotuneError):
    """The load generator failed to run a load point."""


class ExportError(AutotuneError):
    """Results could not be exported."""
