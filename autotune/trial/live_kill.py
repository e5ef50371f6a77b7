"""The live KV-OOM kill: the weights-loaded line that proves ``rest = A - P x (1 - f)`` negative
ends the launch at once (seconds instead of the rest of the startup).

Both evaluators feed it the server's log lines: the live one as the launched server
writes them, the offline one as the simulator's startup writes them in modelled time.
"""

from __future__ import annotations

import math
from typing import Protocol

from autotune.outcome import FailureKind
from autotune.sglang.logparse import LogEvent, RoleTagger, is_target, parse_line

__all__ = ["MAX_EVENTS", "KillTarget", "LiveKill"]

#: Recognised lines one launch keeps (they become its ``events.json`` and its observed summary): a TP-8
#: startup logs about a hundred; a server that printed "Load weight begin" 2,000,000 times kept them all.
MAX_EVENTS = 10_000


class KillTarget(Protocol):
    def kill_now(self, kind: str, evidence: str) -> None: ...


class LiveKill:
    """Watches startup lines (``on_line``); kills ``server`` as soon as the formula goes negative."""

    def __init__(self, f: float | None, p_pred: float | None) -> None:
        self.f = f
        self.p_pred = p_pred
        self.p_seen: float | None = None
        self.events: list[LogEvent] = []
        self.server: KillTarget | None = None
        self._roles = RoleTagger()

    def __call__(self, line: str) -> None:
        if len(self.events) >= MAX_EVENTS:  # no startup logs this many: a flood (or a hostile server)
            return
        ev = parse_line(line)
        if ev is None:
            return
        ev = self._roles.tag(ev)
        self.events.append(ev)
        if not is_target(ev):
            # A speculative launch's draft runner logs the same unlabelled lines after the
            # target's: its "avail mem" is what the target left, not P or A of the formula.
            return
        # "Load weight begin. avail mem=P" (and 0.5.23's baseline line) carry P as avail_gib.
        if ev.kind == "baseline" and ev.values.get("avail_gib") is not None:
            p = float(ev.values["avail_gib"])
            if math.isfinite(p):  # 400 nines read as inf: no measurement, and -inf rest would kill the launch
                self.p_seen = p if self.p_seen is None else min(self.p_seen, p)
        if ev.kind == "weights_loaded" and self.f is not None and self.server is not None:
            a = ev.values.get("avail_gib")
            p_gib = self.p_seen if self.p_seen is not None else self.p_pred
            if a is None or p_gib is None or not math.isfinite(a):
                return
            rest = float(a) - p_gib * (1 - self.f)
            if rest <= 0:
                evidence = (
                    f"rest = {a:.2f} - {p_gib:.2f} x (1 - {self.f:.3f}) = {rest:.2f} GiB < 0 "
                    f"(from: {line.strip()[:200]})"
                )
                self.server.kill_now(FailureKind.KV_OOM.value, evidence)
