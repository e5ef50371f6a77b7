"""The suite guards itself: a test that leaves state behind fails (a pytest plugin, not a test module).

After every test the guard compares the pytest process with what it was before the test:

* processes: the pytest process's descendants, and every process carrying this session's
  marker (``AUTOTUNE_TEST_SESSION`` in its environment: servers that left the process
  group or were reparented to init still carry it);
* a Ray instance this process joined (``ray.is_initialized()``);
* sockets the pytest process listens on (in-process servers; a child's port dies with it);
* signal dispositions and the blocked-signal mask (a SIGINT left ignored is inherited by every
  process started afterwards: Ctrl-C then reaches none of them);
* the environment and the working directory.

What a test left is reported as an error of that test, then cleaned up (processes killed,
environment, directory and handlers restored) so that the next test starts clean and the
failure is not blamed on it. Processes get a short grace to exit (polled, not slept out).

Module- and session-scoped fixtures may hold processes, ports or environment entries for the
tests that share them, but only those named in :data:`SHARED_ON_PURPOSE`; any other
higher-scoped fixture that starts something fails the first test that uses it. Whatever a
shared fixture started must be gone once it is torn down.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psutil
import pytest

SESSION_ENV = "AUTOTUNE_TEST_SESSION"
# Entries that change on their own between the guard's two looks.
IGNORED_ENV = frozenset({"PYTEST_CURRENT_TEST"})
# Set once per process by a library's first import, never undone: absent -> this value is no leak.
IMPORT_SIDE_EFFECTS = {"RAY_CLIENT_MODE": "0"}  # ray/_private/client_mode_hook.py, on `import ray`
#: How long a test's processes and ports get to go before they are its leaks (polled: a clean test waits
#: nothing). tests/test_leak_guard.py's inner sessions, whose leaks never go, wait 1 s (this variable).
GRACE_ENV = "AUTOTUNE_TEST_LEAK_GRACE_S"
GRACE_S = float(os.environ.get(GRACE_ENV, "5.0"))

# Fixtures that hold a process, a port or an environment entry for many tests on purpose.
# Keep this short: each entry is a server (or Ray instance) the tests share to save its startup.
SHARED_ON_PURPOSE: dict[str, str] = {
    "pg": "a throwaway PostgreSQL server per module (tests/support/postgres.py)",
    "ray_owner": "one local Ray instance for tests/test_ray_executor.py",
    "cluster_address": "one two-node Ray cluster for tests/test_ray_nodes.py",
    "server": "one server (real SGLang, or the fake load server) shared by a module's tests",
    "paced": "one paced fake load server for tests/test_load_accuracy.py",
    "sim": "one simulated SGLang server shared by a module's tests",
    "shared_real_server": "one real SGLang server on CPU shared by the session's real-engine tests",
}

# Processes a shared Ray instance starts later on its own (workers) or detached (the guards
# of trials and of a local instance): allowed while the Ray fixture lives.
_RAY_PARTS = ("ray::", "/ray/", "raylet", "gcs_server", "autotune.study.execution.ray.guard")


@dataclass(frozen=True)
class Proc:
    pid: int
    start: int  # clock ticks since boot: a pid reused later is another process


@dataclass
class State:
    procs: set[Proc]
    ports: set[tuple[str, int]]
    signals: dict[int, Any]
    mask: frozenset[int]
    env: dict[str, str]
    cwd: str
    ray: bool


@dataclass
class Allowance:
    """What a shared fixture holds while it lives."""

    name: str
    procs: set[Proc] = field(default_factory=set)
    cmds: set[str] = field(default_factory=set)  # the same server restarted by a test is still the fixture's
    ports: set[tuple[str, int]] = field(default_factory=set)
    env: dict[str, str | None] = field(default_factory=dict)  # key -> value before the fixture
    ray: bool = False


def _marker() -> bytes:
    return f"{SESSION_ENV}={os.environ.get(SESSION_ENV, '')}".encode()


def _start_ticks(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2:].split()[19])


_SESSION_START = _start_ticks()  # nothing older than the pytest process can be one of its processes


def _scan() -> dict[int, tuple[int, int, bool, str]]:
    """pid -> (ppid, start ticks, carries this session's marker, cmdline head) of the live, non-zombie
    processes started since pytest was."""
    marker = _marker()
    out: dict[int, tuple[int, int, bool, str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            rest = stat[stat.rindex(b")") + 2:].split()
            start = int(rest[19])
            if rest[0] in (b"Z", b"X") or start < _SESSION_START:
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read(400).replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        out[int(name)] = (int(rest[1]), start, marker + b"\0" in env + b"\0", cmd)
    return out


def our_processes(table: dict[int, tuple[int, int, bool, str]] | None = None) -> dict[Proc, str]:
    """This session's processes (descendants of pytest, or carrying the marker), pytest excluded."""
    table = _scan() if table is None else table
    me = os.getpid()
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_rest) in table.items():
        children.setdefault(ppid, []).append(pid)
    ours = {pid for pid, row in table.items() if row[2]}
    todo = list(children.get(me, []))
    seen: set[int] = set()
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(children.get(pid, []))
    ours |= seen
    ours.discard(me)
    return {Proc(pid, table[pid][1]): table[pid][3] for pid in ours}


def listening_ports() -> set[tuple[str, int]]:
    try:
        conns = psutil.Process().net_connections(kind="inet")
    except psutil.Error:
        return set()
    return {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN}


def _signals() -> dict[int, Any]:
    out = {}
    for sig in signal.valid_signals():
        try:
            out[int(sig)] = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
    return out


def _ray_joined() -> bool:
    ray = sys.modules.get("ray")
    try:
        return bool(ray is not None and ray.is_initialized())
    except Exception:  # noqa: BLE001 - a half-imported ray is not a joined one
        return False


def snapshot() -> State:
    return State(procs=set(our_processes()), ports=listening_ports(), signals=_signals(),
                 mask=frozenset(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
                 env={k: v for k, v in os.environ.items() if k not in IGNORED_ENV}, cwd=os.getcwd(),
                 ray=_ray_joined())


def _sig_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def _handler_name(h: Any) -> str:
    if h in (signal.SIG_DFL, signal.SIG_IGN):
        return signal.Handlers(h).name
    return getattr(h, "__qualname__", repr(h))


@dataclass
class Leaks:
    procs: dict[Proc, str] = field(default_factory=dict)
    ports: set[tuple[str, int]] = field(default_factory=set)
    signals: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    mask: tuple[frozenset[int], frozenset[int]] | None = None
    env: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    cwd: tuple[str, str] | None = None
    ray: bool = False

    def __bool__(self) -> bool:
        return bool(self.procs or self.ports or self.signals or self.mask or self.env or self.cwd or self.ray)

    def lines(self) -> list[str]:
        out = [f"a process: pid {p.pid}: {cmd.strip()[:160] or '?'}" for p, cmd in sorted(self.procs.items(),
                                                                                       key=lambda kv: kv[0].pid)]
        out += [f"a listening port: {ip}:{port}" for ip, port in sorted(self.ports)]
        out += [f"a signal handler: {_sig_name(s)} {_handler_name(a)} -> {_handler_name(b)}"
                for s, (a, b) in sorted(self.signals.items())]
        if self.mask:
            out.append(f"the blocked-signal mask: {sorted(map(_sig_name, self.mask[0]))} -> "
                       f"{sorted(map(_sig_name, self.mask[1]))}")
        out += [f"an environment variable: {k}={a!r} -> {b!r}" for k, (a, b) in sorted(self.env.items())]
        if self.cwd:
            out.append(f"the working directory: {self.cwd[0]} -> {self.cwd[1]}")
        if self.ray:
            out.append("a Ray instance still joined (ray.is_initialized())")
        return out


def _ray_part(cmd: str) -> bool:
    return any(part in cmd for part in _RAY_PARTS)


def compare(before: State, after: State, allowances: list[Allowance] | None = None,
            table: dict[int, tuple[int, int, bool, str]] | None = None) -> Leaks:
    """What ``after`` holds that ``before`` did not, less what live shared fixtures may hold."""
    allowances = allowances or []
    allowed_procs = set().union(*(a.procs for a in allowances)) if allowances else set()
    allowed_ports = set().union(*(a.ports for a in allowances)) if allowances else set()
    allowed_env = {k for a in allowances for k in a.env}
    ray_allowed = any(a.ray for a in allowances)
    new_procs = after.procs - before.procs - allowed_procs
    leaks = Leaks()
    if new_procs:
        table = _scan() if table is None else table
        allowed_cmds = {c for a in allowances for c in a.cmds}
        shared_pids = {p.pid for p in allowed_procs} | {p.pid for p in new_procs
                                                         if table.get(p.pid, (0, 0, False, ""))[3] in allowed_cmds}
        for p in new_procs:
            if p.pid in shared_pids:
                continue
            row = table.get(p.pid)
            cmd = row[3] if row else ""
            if _descends(p.pid, shared_pids, table) or (ray_allowed and _ray_part(cmd)):
                continue  # started by a shared server or Ray instance (a worker, a postgres backend)
            leaks.procs[p] = cmd
    leaks.ports = after.ports - before.ports - allowed_ports
    leaks.signals = {s: (before.signals.get(s), h) for s, h in after.signals.items()
                     if before.signals.get(s) != h and not _per_test_timer(before.signals.get(s), h)}
    if before.mask != after.mask:
        leaks.mask = (before.mask, after.mask)
    for k in set(before.env) | set(after.env):
        if k in allowed_env or (k not in before.env and IMPORT_SIDE_EFFECTS.get(k, None) == after.env.get(k)):
            continue
        if before.env.get(k) != after.env.get(k):
            leaks.env[k] = (before.env.get(k), after.env.get(k))
    if before.cwd != after.cwd:
        leaks.cwd = (before.cwd, after.cwd)
    leaks.ray = after.ray and not before.ray and not ray_allowed
    return leaks


def _per_test_timer(old: Any, new: Any) -> bool:
    """pytest-timeout's SIGALRM handler: set anew for each test and unset when one fails."""
    return any(getattr(h, "__module__", "") == "pytest_timeout" for h in (old, new))


def _descends(pid: int, roots: set[int], table: dict[int, tuple[int, int, bool, str]]) -> bool:
    seen = set()
    while pid in table and pid not in seen:
        seen.add(pid)
        pid = table[pid][0]
        if pid in roots:
            return True
    return False


def check(before: State, allowances: list[Allowance] | None = None, grace_s: float = GRACE_S) -> Leaks:
    """Leaks after a test; processes and ports get ``grace_s`` to go (polled)."""
    deadline = time.monotonic() + grace_s
    while True:
        leaks = compare(before, snapshot(), allowances)
        if not (leaks.procs or leaks.ports) or time.monotonic() >= deadline:
            return leaks
        time.sleep(0.1)


def clean_up(before: State, leaks: Leaks) -> None:
    """Undo what a test left so that the next one starts clean (the test has already failed)."""
    procs = []
    for p in leaks.procs:
        try:
            proc = psutil.Process(p.pid)
            proc.kill()
            procs.append(proc)
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)
    for s, (old, _new) in leaks.signals.items():
        try:
            signal.signal(s, old)
        except (OSError, ValueError, TypeError):
            pass
    if leaks.mask:
        signal.pthread_sigmask(signal.SIG_SETMASK, leaks.mask[0])
    for k, (old, _new) in leaks.env.items():
        if old is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = old
    if leaks.cwd:
        os.chdir(leaks.cwd[0])
    if leaks.ray:
        import ray

        ray.shutdown()


# --- the plugin ------------------------------------------------------------------------------------

_allowances: dict[int, tuple[Allowance, State]] = {}  # id(fixturedef) -> (what it holds, state before it)
_fixture_errors: list[str] = []


def live_allowances() -> list[Allowance]:
    return [a for a, _ in _allowances.values()]


@contextmanager
def held_by(name: str) -> Iterator[None]:
    """What the body starts belongs to the live shared fixture ``name``: a shared server that a test
    stopped, started again for the next one. Outside a live fixture of that name (its own setup,
    which the fixture hook records) it adds nothing."""
    held = [a for a in live_allowances() if a.name == name]
    before = snapshot()
    yield
    if not held:
        return
    started = compare(before, snapshot(), live_allowances())
    for allowance in held:
        allowance.procs |= set(started.procs)
        allowance.cmds |= set(started.procs.values())
        allowance.ports |= started.ports


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault(SESSION_ENV, uuid.uuid4().hex)


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Iterator[None]:
    if fixturedef.scope == "function":
        yield
        return
    before = snapshot()
    yield
    after = snapshot()
    leaks = compare(before, after, live_allowances())
    if not leaks:
        return
    name = fixturedef.argname
    if name not in SHARED_ON_PURPOSE:
        clean_up(before, leaks)
        _fixture_errors.append(f"{fixturedef.scope}-scoped fixture {name!r} holds state for many tests but is not "
                               f"in tests/support/leak_guard.py SHARED_ON_PURPOSE:\n  " + "\n  ".join(leaks.lines()))
        return
    _allowances[id(fixturedef)] = (Allowance(name, procs=set(leaks.procs), cmds=set(leaks.procs.values()),
                                             ports=set(leaks.ports),
                                             env={k: a for k, (a, _b) in leaks.env.items()},
                                             ray=leaks.ray or any(_ray_part(c) for c in leaks.procs.values())),
                                   before)


def pytest_fixture_post_finalizer(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> None:
    held = _allowances.pop(id(fixturedef), None)
    if held is None:
        return
    allowance, before = held
    leaks = check(before, live_allowances())
    if leaks:
        clean_up(before, leaks)
        pytest.fail(f"shared fixture {allowance.name!r} left, once torn down:\n  " + "\n  ".join(leaks.lines()),
                    pytrace=False)


@pytest.fixture(autouse=True)
def _leak_guard() -> Iterator[None]:
    """Fail the test that leaves a process, a port, a Ray instance, a signal handler, an env var or a cwd."""
    if _fixture_errors:
        msg = _fixture_errors.pop()
        pytest.fail(msg, pytrace=False)
    before = snapshot()
    yield
    leaks = check(before, live_allowances())
    if leaks:
        clean_up(before, leaks)
        pytest.fail("this test left behind:\n  " + "\n  ".join(leaks.lines()), pytrace=False)


def leaky(fn: Callable[[], object], allowances: list[Allowance] | None = None, grace_s: float = 1.0) -> list[str]:
    """What ``fn`` leaves behind (after cleaning it up): the guard's check on one call."""
    before = snapshot()
    fn()
    leaks = check(before, allowances, grace_s=grace_s)
    clean_up(before, leaks)
    return leaks.lines()
