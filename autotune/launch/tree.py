"""The server's own processes while it serves: a dead scheduler or detokenizer ends the launch.

Real SGLang is a process tree: the launcher (HTTP and tokenizer manager), one
``sglang::scheduler`` per rank and ``sglang::detokenizer``, titled by setproctitle.
When one child dies the rest of the tree may live on: SGLang 0.5.23's own
``SubprocessWatchdog`` notices within a second and ends the tree (its log says
``Subprocess scheduler_0 (pid=N) crashed with exit code -9``), but a build without
it keeps the launcher up, ``/health`` answering, and every stream silent until the
load generator's between-tokens timeout. :class:`TreeWatch` covers both: from
readiness on it polls the members seen at readiness; when one is gone and the
launcher has not ended itself within ``grace_s``, it kills the whole group through
``ServerProcess.kill_now`` with kind ``crashed`` and the evidence: the real log's
failure line when there is one, else what the member's exit said
(``sglang::scheduler_TP0 (pid N) killed by SIGKILL ...``, read from its zombie's
``/proc/<pid>/stat`` while nobody has reaped it).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from autotune.launch.failures import line_failure
from autotune.launch.groups import descendants, proc_stat
from autotune.outcome import FailureKind

logger = logging.getLogger(__name__)

TITLE_PREFIX = "sglang::"
"""SGLang titles its scheduler and detokenizer processes so (the simulator's stand-in too)."""


@dataclass
class Member:
    proc: psutil.Process
    title: str


def command_line(p: psutil.Process) -> str:
    """``p``'s command line (its title, for SGLang's children), or its name, or "" once gone."""
    try:
        return " ".join(p.cmdline()) or p.name()
    except psutil.Error:
        return ""


def is_sglang(p: psutil.Process) -> bool:
    """An SGLang server process: a launcher (``sglang.launch_server``) or a titled child."""
    cmd = command_line(p)
    return "sglang.launch_server" in cmd or TITLE_PREFIX in cmd


def tree_members(leader_pid: int) -> list[Member]:
    """The leader's descendants titled ``sglang::...`` (scheduler(s), detokenizer)."""
    out = []
    for p in descendants(leader_pid):
        title = command_line(p)
        if title.startswith(TITLE_PREFIX):
            out.append(Member(p, title.split()[0]))
    return out


def zombie_status(pid: int) -> str | None:
    """How a zombie ``pid`` ended (``killed by SIGKILL`` / ``exited with code 1``), or None.

    The kernel keeps the wait status in ``/proc/<pid>/stat`` (field 52) until the parent
    reaps the process; after that it is gone and this returns None.
    """
    rest = proc_stat(pid)
    if not rest or rest[0] != "Z" or len(rest) < 50:
        return None
    status = int(rest[49])
    if status & 0x7F:
        try:
            return f"killed by {signal.Signals(status & 0x7F).name}"
        except ValueError:
            return f"killed by signal {status & 0x7F}"
    return f"exited with code {(status >> 8) & 0xFF}"


def _gone(p: psutil.Process) -> bool:
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class TreeWatch:
    """Polls the members seen at readiness; kills the group when one died and the launcher did not end."""

    def __init__(self, leader_alive: Callable[[], bool], kill: Callable[[FailureKind, str], None],
                 log_lines: Callable[[], list[str]], members: list[Member], leader_pid: int, *,
                 poll_s: float = 0.5, grace_s: float = 3.0) -> None:
        self.members = members
        self._leader_alive = leader_alive
        self._kill = kill
        self._log_lines = log_lines
        self._leader_pid = leader_pid
        self.poll_s = poll_s
        self.grace_s = grace_s
        self._stop = threading.Event()
        self.verdict: tuple[FailureKind, str] | None = None
        self._thread = threading.Thread(target=self._run, name="server-tree-watch", daemon=True)

    def start(self) -> TreeWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            if not self._leader_alive():
                return  # the launcher ended (itself, or its teardown): the launch's own checks say why
            dead = next((m for m in self.members if _gone(m.proc)), None)
            if dead is None:
                continue
            how = zombie_status(dead.proc.pid) or "is gone"
            logger.warning("server tree: %s (pid %d) %s; launcher pid %d", dead.title, dead.proc.pid, how,
                           self._leader_pid)
            deadline = time.monotonic() + self.grace_s
            while time.monotonic() < deadline and self._leader_alive() and not self._stop.is_set():
                time.sleep(0.1)  # SGLang's own watchdog may end the tree and say why in its log
            if self._stop.is_set() or not self._leader_alive():
                return
            self.verdict = (FailureKind.CRASHED, self._evidence(dead, how))
            self._kill(*self.verdict)
            return

    def _evidence(self, dead: Member, how: str) -> str:
        for line in reversed(self._log_lines()):
            if line_failure(line) is not None:
                return line.strip()
        return (f"{dead.title} (pid {dead.proc.pid}) {how} while its launcher (pid {self._leader_pid}) "
                f"kept running; the server tree was killed")
