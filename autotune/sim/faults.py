"""Fault injection for the simulated server (``--sim-fault SPEC``, repeatable).

Each fault proves that the orchestrator survives one way a real server misbehaves:

==========================  =============================================================
``crash_after:N``           exit abruptly (no goodbye, exit code 1) once N requests finished
``hang_startup``            never become ready: the port listens, health stays 503
``slow_tokens:FACTOR``      tokens reach clients FACTOR times slower (wall clock) than the
                            speed model says; ``/sim/stats`` still holds the modelled truth
``malformed_sse:N``         the Nth streamed SSE chunk of the server's life is broken JSON
``health_fail_after:N``     after N health checks, ``/health`` and ``/health_generate`` 503
``memory_imbalance``        startup fails at distributed init with SGLang's imbalance error
==========================  =============================================================

Counters are server-wide (not per request) so a fault fires once, where a test expects it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from autotune.errors import ConfigError
from autotune.limits import MAX_SIM_FACTOR, clip

FAULT_KINDS = (
    "crash_after",
    "hang_startup",
    "slow_tokens",
    "malformed_sse",
    "health_fail_after",
    "memory_imbalance",
)
_NEEDS_INT = {"crash_after", "malformed_sse", "health_fail_after"}
_NEEDS_FLOAT = {"slow_tokens"}
_NO_VALUE = {"hang_startup", "memory_imbalance"}


@dataclass
class Faults:
    """The parsed faults of one server, plus the counters that decide when they fire."""

    crash_after: int | None = None
    hang_startup: bool = False
    slow_tokens: float = 1.0
    malformed_sse: int | None = None
    health_fail_after: int | None = None
    memory_imbalance: bool = False
    requests_finished: int = 0
    sse_chunks_sent: int = 0
    health_checks: int = 0

    def to_dict(self) -> dict[str, object]:
        """The active faults as plain data (for ``/server_info``'s ``sim`` block)."""
        out: dict[str, object] = {}
        for name in FAULT_KINDS:
            value = getattr(self, name)
            if value not in (None, False) and not (name == "slow_tokens" and value == 1.0):
                out[name] = value
        return out

    def on_request_finished(self) -> bool:
        """Count a finished request; True when ``crash_after`` says the server must die now."""
        self.requests_finished += 1
        return self.crash_after is not None and self.requests_finished >= self.crash_after

    def next_sse_chunk_is_malformed(self) -> bool:
        """Count one streamed chunk; True for exactly the ``malformed_sse``-th chunk."""
        self.sse_chunks_sent += 1
        return self.malformed_sse is not None and self.sse_chunks_sent == self.malformed_sse

    def health_check_fails(self) -> bool:
        """Count one health check; True once more than ``health_fail_after`` were answered."""
        self.health_checks += 1
        return self.health_fail_after is not None and self.health_checks > self.health_fail_after


def parse_faults(specs: Iterable[str]) -> Faults:
    """Parse ``--sim-fault`` values (``KIND`` or ``KIND:VALUE``); ConfigError on a bad one."""
    faults = Faults()
    for spec in specs:
        for part in (p.strip() for p in spec.split(",")):
            if not part:
                continue
            kind, _, value = part.partition(":")
            kind = kind.strip().replace("-", "_")
            if kind not in FAULT_KINDS:
                raise ConfigError(f"--sim-fault: unknown fault {kind!r} (known: {', '.join(FAULT_KINDS)})")
            if kind in _NO_VALUE:
                if value:
                    raise ConfigError(f"--sim-fault: {kind} takes no value, got {part!r}")
                setattr(faults, kind, True)
                continue
            try:
                number: float = int(value) if kind in _NEEDS_INT else float(value)
            except ValueError:
                raise ConfigError(f"--sim-fault: {kind} needs a number, got {part!r}") from None
            if number < (1 if kind in _NEEDS_INT else 1e-9):
                raise ConfigError(f"--sim-fault: {kind} must be positive, got {clip(part, 60)!r}")
            if kind in _NEEDS_FLOAT and not number <= MAX_SIM_FACTOR:  # nan and inf too: sleeps stretched by it
                raise ConfigError(f"--sim-fault: {kind} must be at most {MAX_SIM_FACTOR:g}, got {clip(part, 60)!r}")
            setattr(faults, kind, number)
    return faults
