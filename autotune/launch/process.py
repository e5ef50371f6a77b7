"""``ServerProcess``: launch one server, wait until it is ready, and tear it down completely.

Lifecycle::

    with ServerProcess(argv, log_path=..., port=free_port(), startup_timeout_s=600) as server:
        server.wait_ready()            # LaunchError(kind, evidence) / ServerNotReady
        ... load against server.url ...
    # leaving the block: TERM the group, grace, KILL, reap, wait for GPU memory

Why the server runs in its own session: SGLang's schedulers and TP workers are
grandchildren; killing one process group ends them all, and a Ctrl-C in the
terminal or Ray's cleanup of the worker's group cannot half-kill the tree. The
price is that nothing else ends the server when the launcher dies, so this
module guarantees it: a watchdog process per server (see ``watchdog``), a
registry entry for the next run's sweep (see ``registry``), signal/atexit
handlers for the live set (see ``cleanup``), and PR_SET_PDEATHSIG on the
direct child when launched from the main thread (pdeathsig fires when the
spawning *thread* exits, so from any other thread it would kill the server
when that thread ends; the watchdog covers those launches).
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import psutil

from autotune.errors import ConfigError, LaunchError, ServerNotReady
from autotune.launch import cleanup
from autotune.launch.artifacts import shell_command
from autotune.launch.failures import classify, line_failure
from autotune.launch.gpu import wait_gpu_released
from autotune.launch.groups import (
    LAUNCH_ID_ENV,
    born_since,
    descendants,
    pids_listening,
    pids_with_env,
    signal_group,
    terminate,
)
from autotune.launch.ports import mark_port_used
from autotune.launch.registry import ProcessRegistry
from autotune.launch.spawn import pdeathsig_preexec, spawn_watchdog
from autotune.launch.tail import LogTail
from autotune.launch.tree import TreeWatch, tree_members
from autotune.limits import SERVER_LOG_BYTES, SERVER_LOG_END_BYTES, SERVER_LOG_HEAD_BYTES
from autotune.outcome import FailureKind
from autotune.redact import redact_text

logger = logging.getLogger(__name__)

_FIRST_READ_TIMEOUT_S = 1.0  # readiness answers (503 or a 1-token generation) are quick ...
_MAX_READ_TIMEOUT_S = 16.0  # ... but a loaded first generation may take longer: back off to this
#: A readiness answer's status line: "HTTP/1.1 200 OK" and a reason; nothing after it is read.
MAX_STATUS_LINE = 4096
#: What SGLang logs once it serves (after its own warm-up request; the simulator logs it too). When the log
#: shows it, ``wait_ready`` probes at once instead of at its next poll, up to ``poll_interval_s`` later
#: (a simulated server ready in 1.3 s was seen at 1.5 s).
READY_LINE = "The server is fired up and ready to roll"
#: How often a poll's sleep looks for that line (the log reader delivers lines every 50 ms).
_READY_LINE_CHECK_S = 0.05


def probe_status(host: str, port: int, path: str, *, connect_s: float, read_s: float) -> int | None:
    """The HTTP status of ``GET path`` on ``host:port``, or None when the answer is not HTTP.

    Only the status line is read, within ``read_s`` in all (TimeoutError past it): not the headers,
    not the body, and no redirect is followed. requests read a whole body (a /health that streamed
    bytes without end grew 8 GB in 30 s, its startup timeout of 6 s long past), followed a 302 to any
    host, and its read timeout was per read, so a status trickled a byte at a time never ended.
    """
    try:
        sock = socket.create_connection((host, port), timeout=connect_s)
    except TimeoutError as exc:  # not the answer's time: the next read is not allowed longer for it
        raise ConnectionError(f"connect timed out after {connect_s:g} s") from exc
    with sock:
        where = f"[{host}]" if ":" in host else host
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {where}:{port}\r\nConnection: close\r\n\r\n".encode())
        end = time.monotonic() + read_s
        line = b""
        while b"\r\n" not in line and len(line) <= MAX_STATUS_LINE:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no status line within {read_s:g} s")
            sock.settimeout(left)
            data = sock.recv(MAX_STATUS_LINE)
            if not data:
                break
            line += data
    parts = line.split(b"\r\n", 1)[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or len(parts[1]) != 3 or not parts[1].isdigit():
        return None
    return int(parts[1])


class ServerProcess:
    """One server process group: start, readiness, kill_now, and a teardown that leaves nothing."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        log_path: str | os.PathLike[str],
        host: str = "127.0.0.1",
        port: int,
        startup_timeout_s: float = 600.0,
        on_line: Callable[[str], None] | None = None,
        registry: ProcessRegistry | None = None,
        tags: Mapping[str, Any] | None = None,
        ready_paths: Sequence[str] = ("/health_generate", "/health"),
        poll_interval_s: float = 0.5,
        gpu_ids: Sequence[int | str] | None = None,
        watchdog: bool = True,
        gpu_release_timeout_s: float = 30.0,
        log_cap_bytes: int | None = SERVER_LOG_BYTES,
        log_keep_bytes: tuple[int, int] = (SERVER_LOG_HEAD_BYTES, SERVER_LOG_END_BYTES),
    ) -> None:
        if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(a, str) for a in argv):
            raise ConfigError(f"argv: expected a non-empty list of strings, got {argv!r}")
        if not isinstance(port, int) or not 0 < port < 65536:
            raise ConfigError(f"port: expected 1..65535, got {port!r}")
        if startup_timeout_s <= 0:
            raise ConfigError(f"startup_timeout_s: must be > 0, got {startup_timeout_s!r}")
        if poll_interval_s <= 0:
            raise ConfigError(f"poll_interval_s: must be > 0, got {poll_interval_s!r}")
        if not ready_paths:
            raise ConfigError("ready_paths: need at least one path, got ()")
        if log_cap_bytes is not None and not (min(log_keep_bytes) >= 0 and sum(log_keep_bytes) < log_cap_bytes):
            raise ConfigError(f"log_cap_bytes: must be more than the head and end kept {log_keep_bytes}, "
                              f"got {log_cap_bytes!r}")
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.host = host
        self.port = port
        self.startup_timeout_s = float(startup_timeout_s)
        self.on_line = on_line
        self.registry = registry
        self.tags = dict(tags or {})
        self.ready_paths = tuple(ready_paths)
        self.poll_interval_s = float(poll_interval_s)
        self.gpu_release_timeout_s = gpu_release_timeout_s
        self.log_cap_bytes = log_cap_bytes  # None: the log grows as the server writes it
        self.log_keep_bytes = log_keep_bytes  # what a cut keeps: the launch's first and last bytes
        self.launch_id = uuid.uuid4().hex
        self.launch_env: dict[str, str] = {str(k): str(v) for k, v in (env or {}).items()}
        if gpu_ids is not None:
            self.launch_env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpu_ids)
        self._use_watchdog = watchdog
        self._proc: subprocess.Popen[bytes] | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._log_fh: IO[bytes] | None = None
        self._tail: LogTail | None = None
        self._create_time: float | None = None
        self._started_at = 0.0
        self._seen: dict[int, psutil.Process] = {}
        self._kill_request: tuple[FailureKind, str] | None = None
        self._wake = threading.Event()
        self._ready_line = threading.Event()  # the log said it serves: probe now (see READY_LINE)
        self._pidfd: int | None = None  # readable once the server exits: wakes wait_ready at once
        self._stopping = False
        self._stopped = False
        self._tree_watch: TreeWatch | None = None
        self.ready = False
        self.timings: dict[str, float] = {}

    # -- facts ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL of the server, e.g. ``http://127.0.0.1:30000``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """Pid of the direct child (the group leader), None before start."""
        return self._proc.pid if self._proc is not None else None

    @property
    def pgid(self) -> int | None:
        """The server's process group id (equal to its pid: it leads its own session)."""
        return self.pid

    @property
    def returncode(self) -> int | None:
        """Exit status of the direct child once it ended, else None."""
        return self._proc.poll() if self._proc is not None else None

    @property
    def failure(self) -> tuple[FailureKind, str] | None:
        """Why autotune killed the server (kill_now: a KV-OOM proof, a bound port, a dead
        scheduler or detokenizer under load), or None."""
        return self._kill_request

    def log_lines(self) -> list[str]:
        """The last lines of the server log read so far."""
        return self._tail.lines() if self._tail is not None else []

    def __repr__(self) -> str:
        return f"ServerProcess(pid={self.pid}, url={self.url!r}, argv0={self.argv[0]!r})"

    # -- start ---------------------------------------------------------------------------

    def start(self) -> ServerProcess:
        """Launch argv (never through a shell) in its own session, output to the log file (appended to,
        and kept within ``log_cap_bytes`` from here on by the log reader: see ``tail``)."""
        if self._proc is not None:
            raise LaunchError("start: this ServerProcess was already started", kind=FailureKind.CRASHED)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_fh = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the server
        offset = self._log_fh.tell()
        env = dict(os.environ)
        env.update(self.launch_env)
        env[LAUNCH_ID_ENV] = self.launch_id
        env.setdefault("PYTHONUNBUFFERED", "1")
        added = {k: v for k, v in self.launch_env.items() if os.environ.get(k) != v}  # not the whole environ
        # Redacted here, not only by the CLI's logging filter: a Ray worker's handlers have none.
        logger.info("launching on %s: %s (log %s)", redact_text(self.url), redact_text(shell_command(self.argv, added)),
                    self.log_path)
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - an argv list, never a shell
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log_fh,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                close_fds=True,
                preexec_fn=pdeathsig_preexec(os.getpid()),  # noqa: PLW1509 - see spawn.pdeathsig_preexec
            )
        except OSError as exc:
            self._log_fh.close()
            self._log_fh = None
            raise LaunchError(f"cannot start {self.argv[0]!r}: {exc}", kind=FailureKind.CRASHED, evidence=str(exc)) from exc
        self._started_at = time.monotonic()
        cleanup.add_live(self)
        try:
            self._pidfd = os.pidfd_open(self._proc.pid)
        except (AttributeError, OSError):  # not Linux >= 5.3: poll at poll_interval_s instead
            self._pidfd = None
        try:
            self._guard()
        except BaseException:
            self.stop(grace_s=0)  # never leave a server running that nothing guards
            raise
        self._tail = LogTail(self.log_path, offset=offset, on_line=self._watch_line, cap_bytes=self.log_cap_bytes,
                             head_bytes=self.log_keep_bytes[0], end_bytes=self.log_keep_bytes[1])
        self._tail.start()
        return self

    def _watch_line(self, line: str) -> None:
        """Every server line: a port already bound before readiness ends the launch at once.

        Real SGLang logs uvicorn's ``[Errno 98] ... address already in use`` and then stays
        up without HTTP (its scheduler still runs), so only the startup timeout would end it.
        """
        if not self.ready and READY_LINE in line:
            self._ready_line.set()
        if not self.ready and self._kill_request is None:
            found = line_failure(line)
            if found is not None and found[0] is FailureKind.PORT_IN_USE:
                self.kill_now(FailureKind.PORT_IN_USE, line.strip())
        if self.on_line is not None:
            self.on_line(line)

    def _guard(self) -> None:
        """Record the new group in the registry and start its watchdog."""
        assert self._proc is not None  # noqa: S101 - called right after Popen
        try:
            self._create_time = psutil.Process(self._proc.pid).create_time()
            if self.registry is not None:
                self.registry.record(self._proc.pid, argv=self.argv, pgid=self._proc.pid, trial=self.tags.get("trial"), launch_id=self.launch_id, tags=self.tags)
        except psutil.NoSuchProcess:  # already exited and reaped: nothing left to guard
            return
        if self._use_watchdog:
            self._watchdog = spawn_watchdog(self._proc.pid, self._create_time, launch_id=self.launch_id, log=self._log_fh)

    # -- readiness -----------------------------------------------------------------------

    def kill_now(self, kind: FailureKind | str, evidence: str) -> None:
        """Kill the whole group at once and make ``wait_ready`` raise LaunchError(kind, evidence).

        Safe to call from ``on_line`` (the reader thread) and from any other thread.
        """
        if self._kill_request is None:
            try:
                fk = FailureKind(str(kind))
            except ValueError:
                fk = FailureKind.CRASHED
            self._kill_request = (fk, evidence)
            logger.info("kill_now(%s): %s", fk, redact_text(evidence))  # a server's log line: may hold a secret
        self.send_signal(signal.SIGKILL)
        self._wake.set()

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the server's group and to every descendant seen so far (no-op after stop)."""
        if self._proc is None or self._stopped:
            return
        self._remember_descendants()
        signal_group(self._proc.pid, sig, list(self._seen.values()))

    def _remember_descendants(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            for p in descendants(self._proc.pid):
                self._seen.setdefault(p.pid, p)

    def _raise_if_dead(self) -> None:
        assert self._proc is not None and self._tail is not None  # noqa: S101 - internal invariant
        if self._kill_request is not None:
            kind, evidence = self._kill_request
            self._tail.pump()
            raise LaunchError(f"launch killed ({kind}): {evidence}", kind=kind, evidence=evidence)
        rc = self._proc.poll()
        if rc is not None:
            time.sleep(0.05)  # let a last line reach the file (grandchildren may still be writing)
            self._tail.pump(final=True)
            if self._kill_request is not None:
                self._raise_if_dead()
            kind, evidence = classify(self._tail.lines(), rc)
            raise LaunchError(f"server exited with {rc} before it was ready ({kind}): {evidence}", kind=kind, evidence=evidence)

    def wait_ready(self) -> ServerProcess:
        """Poll the ready paths until one answers 200; check the process on every poll.

        Raises LaunchError(kind, evidence) as soon as the server dies or
        ``kill_now`` is called, and ServerNotReady(kind="startup_timeout") at
        the deadline (``startup_timeout_s`` after start).
        """
        if self._proc is None or self._tail is None:
            raise LaunchError("wait_ready: the server was not started", kind=FailureKind.CRASHED)
        deadline = self._started_at + self.startup_timeout_s
        paths = list(self.ready_paths)
        idx = 0
        last_scan = 0.0
        read_timeout = _FIRST_READ_TIMEOUT_S
        while True:
            self._raise_if_dead()
            now = time.monotonic()
            if now - last_scan >= 1.0:
                self._remember_descendants()
                last_scan = now
            left = deadline - now
            if left <= 0:
                self._tail.pump()
                _kind, evidence = classify(self._tail.lines(), None)
                raise ServerNotReady(
                    f"server on {self.url} not ready after {self.startup_timeout_s:.0f} s: {evidence}",
                    kind=FailureKind.STARTUP_TIMEOUT,
                    evidence=evidence,
                )
            try:
                status = probe_status(self.host, self.port, paths[idx], connect_s=min(1.0, left),
                                      read_s=min(read_timeout, left))
            except TimeoutError:
                # Slow health generation (or someone else's silent listener): look at the
                # process again soon, and allow the next answer a little longer.
                status = None
                read_timeout = min(read_timeout * 2, _MAX_READ_TIMEOUT_S)
            except OSError:
                status = None
            if status == 200:
                self._raise_if_dead()  # a 200 from someone else's server on a reused port
                self._tail.pump()  # every line written before readiness is dispatched on return
                self.ready = True
                self.timings["startup_s"] = time.monotonic() - self._started_at
                logger.info("server %s ready after %.1f s", self.url, self.timings["startup_s"])
                self._watch_tree()
                return self
            if status in (404, 405) and idx + 1 < len(paths):
                idx += 1  # this server does not serve that path: try the next one now
                continue
            self._sleep(min(self.poll_interval_s, max(0.0, deadline - time.monotonic())))

    def _watch_tree(self) -> None:
        """From readiness on, a scheduler or detokenizer that dies kills the group (see ``tree``)."""
        assert self._proc is not None and self._tail is not None  # noqa: S101 - called once ready
        members = tree_members(self._proc.pid)
        if not members:
            return
        proc, tail = self._proc, self._tail

        def log_lines() -> list[str]:
            tail.pump()
            return tail.lines()

        self._tree_watch = TreeWatch(lambda: proc.poll() is None, self.kill_now, log_lines, members, proc.pid,
                                     poll_s=self.poll_interval_s).start()

    def _sleep(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s``, waking early when the server exits, kill_now is called or the log
        shows :data:`READY_LINE` (once per such line: a probe that still finds it not ready sleeps again)."""
        end = time.monotonic() + timeout_s
        while True:
            if self._ready_line.is_set():
                self._ready_line.clear()
                return
            left = end - time.monotonic()
            if left <= 0:
                return
            step = min(left, _READY_LINE_CHECK_S)
            if self._pidfd is not None and not self._wake.is_set():
                if select.select([self._pidfd], [], [], step)[0]:  # kill_now SIGKILLs, which also wakes this
                    return
            elif self._wake.wait(step):
                return

    # -- teardown ------------------------------------------------------------------------

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the group, wait ``grace_s``, SIGKILL, reap; also end escaped descendants.

        Then stop the watchdog and the log reader, forget the registry entry,
        put the port in cooldown and wait (with nvidia-ml-py and GPUs named in
        the env) until the GPU memory is released. Idempotent.
        """
        if self._proc is None or self._stopped:
            return
        if self._stopping:  # re-entered from a signal handler during teardown: escalate
            self.send_signal(signal.SIGKILL)
            return
        self._stopping = True
        t0 = time.monotonic()
        if self._tree_watch is not None:
            self._tree_watch.stop()  # a teardown's deaths are no crash
        try:
            self._remember_descendants()
            if self._create_time is not None:  # descendants that left the group and lost their parent
                # (found by the launch's variable, or, with their environment cleared, by the port they hold)
                found = pids_with_env(LAUNCH_ID_ENV, self.launch_id) + pids_listening(self.port)
                for p in born_since(found, self._create_time):
                    if p.pid != os.getpid():
                        self._seen.setdefault(p.pid, p)
            extras = list(self._seen.values())
            pgid = self._proc.pid
            left = terminate(pgid, extras, grace_s=grace_s, kill_wait_s=5.0, leader_first=True)
            try:
                self._proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                logger.warning("server pid %d not reaped after SIGKILL", pgid)
            self._stop_watchdog()
            if self._tail is not None:
                self._tail.stop()
            if self._log_fh is not None:
                self._log_fh.close()
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
            env = dict(os.environ)
            env.update(self.launch_env)
            wait_gpu_released([pgid, *self._seen], env, timeout_s=self.gpu_release_timeout_s)
            if self.registry is not None and not left:
                self.registry.forget(pgid)
            mark_port_used(self.port, self.host)
            self._stopped = True
            self.timings["teardown_s"] = time.monotonic() - t0
            logger.info("server pid %d stopped in %.1f s (rc %s)", pgid, self.timings["teardown_s"], self._proc.returncode)
        finally:
            self._stopping = False
            if self._stopped:  # an interrupted stop stays in the live set for the atexit hook
                cleanup.discard_live(self)

    def _stop_watchdog(self) -> None:
        wd = self._watchdog
        if wd is None or wd.poll() is not None:
            return
        wd.terminate()
        try:
            wd.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            wd.kill()
            wd.wait(timeout=2.0)

    def __enter__(self) -> ServerProcess:
        if self._proc is None:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
