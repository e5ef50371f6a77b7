"""Follow a server's log file as it grows, line by line, in a background thread.

Why a file and not a pipe: the server writes straight to its log file, so its
output is complete even when the orchestrator stalls or dies, a slow
``on_line`` callback can never block the server on a full pipe, and a
grandchild that escaped the process group cannot hold a pipe open and stall
the reader. The reader polls the file every ``interval_s`` (50 ms), which is
prompt enough to kill a doomed launch on the line that proves it.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)


class LogTail:
    """Reads new lines of ``path`` from byte ``offset`` on, keeps the last ``keep`` lines,
    and calls ``on_line(line)`` for each (from the reader thread, or from ``pump()``'s caller)."""

    def __init__(self, path: Path, *, offset: int = 0, on_line: Callable[[str], None] | None = None, keep: int = 500, interval_s: float = 0.05) -> None:
        self.path = path
        self._offset = offset
        self._on_line = on_line
        self._lines: collections.deque[str] = collections.deque(maxlen=keep)
        self._partial = b""
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
                    fh.seek(self._offset)
                    data = fh.read()
            except OSError:
                return 0
            self._offset += len(data)
            data = self._partial + data
            # tqdm progress uses bare '\r'; treat it as a line break as well.
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            *complete, self._partial = data.split(b"\n")
            if final and self._partial:
                complete.append(self._partial)
                self._partial = b""
            for raw in complete:
                line = raw.decode("utf-8", "replace")
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
