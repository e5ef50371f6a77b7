"""Follow a server's log file as it grows, line by line, in a background thread.

Why a file and not a pipe: the server writes straight to its log file, so its
output is complete even when the orchestrator stalls or dies, a slow
``on_line`` callback can never block the server on a full pipe, and a
grandchild that escaped the process group cannot hold a pipe open and stall
the reader. The reader polls the file every ``interval_s`` (50 ms), which is
prompt enough to kill a doomed launch on the line that proves it.

The server may be broken or hostile, so what one call reads is bounded: at most ``READ_BYTES`` a
call (a flood is read over several calls; one read of everything held the lock, and so readiness,
for as long as its lines took: 196 MB of log made a 20 s startup timeout 79 s), and a line at most
``LINE_BYTES`` (a longer one is cut there and the rest of it skipped: one line without a newline
grew without bound and was re-joined on every call). The last call (``final``) reads the last
``READ_BYTES`` of what is left, from a line's start: the server is gone, and its last lines tell why.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

#: The most bytes one ``pump`` reads (a startup log is well under 1 MiB).
READ_BYTES = 4 * 2**20
#: The longest line kept (SGLang's longest, its server arguments, is a few KB).
LINE_BYTES = 64 * 2**10


class LogTail:
    """Reads new lines of ``path`` from byte ``offset`` on, keeps the last ``keep`` lines,
    and calls ``on_line(line)`` for each (from the reader thread, or from ``pump()``'s caller)."""

    def __init__(self, path: Path, *, offset: int = 0, on_line: Callable[[str], None] | None = None, keep: int = 500, interval_s: float = 0.05) -> None:
        self.path = path
        self._offset = offset
        self._on_line = on_line
        self._lines: collections.deque[str] = collections.deque(maxlen=keep)
        self._partial = b""
        self._skipping = False  # the rest of a line already cut at LINE_BYTES
        self._interval_s = interval_s
        self._lock = threading.RLock()  # on_line may call lines()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.count = 0

    def start(self) -> None:
        """Start the reader thread."""
        self._thread = threading.Thread(target=self._run, name=f"logtail:{self.path.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.pump()
            self._stop.wait(self._interval_s)
        self.pump(final=True)

    def pump(self, *, final: bool = False) -> int:
        """Read what was appended since the last call and dispatch whole lines; returns how many.

        With ``final`` a trailing line without newline is dispatched too.
        """
        with self._lock:
            try:
                with open(self.path, "rb") as fh:
                    if final:
                        end = fh.seek(0, 2)
                        if end - self._offset > READ_BYTES:  # skip to the last READ_BYTES, at a line's start
                            self._offset = end - READ_BYTES
                            self._partial, self._skipping = b"", True
                    fh.seek(self._offset)
                    data = fh.read(READ_BYTES)
            except OSError:
                return 0
            self._offset += len(data)
            # tqdm progress uses bare '\r'; treat it as a line break as well.
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            *complete, rest = data.split(b"\n")
            if complete:
                first = complete[0]
                if self._skipping:
                    complete = complete[1:]  # the end of a line already cut
                    if self._partial:
                        complete.insert(0, self._partial)
                else:
                    complete[0] = self._partial + first[: LINE_BYTES - len(self._partial)]
                self._partial, self._skipping = b"", False
            if self._skipping:
                pass  # still inside a cut line
            elif len(self._partial) + len(rest) > LINE_BYTES:
                self._partial += rest[: LINE_BYTES - len(self._partial)]
                self._skipping = True
            else:
                self._partial += rest
            if final and self._partial:
                complete.append(self._partial)
                self._partial, self._skipping = b"", False
            for raw in complete:
                line = raw[:LINE_BYTES].decode("utf-8", "replace")
                if not line.strip():
                    continue
                self._lines.append(line)
                self.count += 1
                if self._on_line is not None:
                    try:
                        self._on_line(line)
                    except Exception:  # a callback bug must not stop the log from being read
                        logger.exception("on_line callback raised on %r", line[:200])
            return len(complete)

    def lines(self) -> list[str]:
        """The last lines read (up to ``keep``)."""
        with self._lock:
            return list(self._lines)

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the reader thread after a last read (safe to call from ``on_line`` itself)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        if thread is None:
            self.pump(final=True)
