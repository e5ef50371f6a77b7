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

So is the file itself, given a ``cap_bytes`` (``ServerProcess`` gives ``limits.SERVER_LOG_BYTES``): a
server that flooded its log filled the disk during a long trial. The server writes through a descriptor
opened for append, so a check that finds the launch's part of the file (from ``offset`` on) past the cap
cuts out its middle: it truncates the file to the launch's head (``head_bytes``, to its last whole line:
the startup, which calibration and failure diagnosis read) and appends one marker line, ``[autotune] log
capped at N bytes: M bytes dropped`` (M counts every cut of the launch), and the file's end as it was
(``end_bytes``, from a line's start: the lines the reader may not have read yet, and a failure's tail).
The server's next write lands after them, and the server never notices. The reader's place moves with
the cut: to the same byte when it was inside the end kept, else to the marker (lines of the middle it had
not read are never read), so it neither reads a line twice nor takes a piece of a dropped line for a line.
The size is checked on every call and, while a call's lines are handled (a 4 MiB read of them may take a
second), every ``interval_s``: the file stays within the cap plus what the server writes in that time.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

#: The most bytes one ``pump`` reads (a startup log is well under 1 MiB).
READ_BYTES = 4 * 2**20
#: The longest line kept (SGLang's longest, its server arguments, is a few KB).
LINE_BYTES = 64 * 2**10


class LogTail:
    """Reads new lines of ``path`` from byte ``offset`` on, keeps the last ``keep`` lines,
    and calls ``on_line(line)`` for each (from the reader thread, or from ``pump()``'s caller).

    With ``cap_bytes``, the file from ``offset`` on is kept within it: cut to its first ``head_bytes``,
    a marker line and its last ``end_bytes`` whenever a check finds it longer (``dropped``, ``cuts``).
    """

    def __init__(self, path: Path, *, offset: int = 0, on_line: Callable[[str], None] | None = None, keep: int = 500,
                 interval_s: float = 0.05, cap_bytes: int | None = None, head_bytes: int = 0,
                 end_bytes: int = 0) -> None:
        if cap_bytes is not None and not (head_bytes >= 0 and end_bytes >= 0 and head_bytes + end_bytes < cap_bytes):
            raise ValueError(f"cap_bytes={cap_bytes}: must be more than head_bytes + end_bytes "
                             f"({head_bytes} + {end_bytes})")
        self.path = path
        self._start = offset  # where this launch's part of the file begins
        self._offset = offset
        self._cap = cap_bytes
        self._head = head_bytes
        self._end_bytes = end_bytes
        self._checked = 0.0  # when the size was last checked against the cap
        self._head_end: int | None = None  # the end of the head a cut keeps, once found
        self._marker = 0  # bytes of the marker the last cut wrote (autotune's, not the server's)
        self.dropped = 0  # bytes of the server's log the cuts dropped
        self.cuts = 0
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
                self._check_cap()
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
                if time.monotonic() - self._checked >= self._interval_s:
                    self._check_cap()  # a read's lines may take a second: the server writes on meanwhile
            return len(complete)

    def _check_cap(self) -> None:
        """Cut the file if the launch's part of it has passed the cap (with the lock held)."""
        self._checked = time.monotonic()
        if self._cap is None:
            return
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return
        if size - self._start > self._cap:
            self._cut(self._cap)

    def _cut(self, cap: int) -> None:
        """Truncate the file to the launch's head and append the marker line and the end of the log, so the
        server's next write lands after them; then move the read offset to the same place in the cut file."""
        try:
            with open(self.path, "rb") as fh:
                if self._head_end is None:  # the head, to its last whole line (all of it, when it holds none)
                    fh.seek(self._start)
                    head = fh.read(self._head)
                    newline = head.rfind(b"\n")
                    self._head_end = self._start + (newline + 1 if newline >= 0 else len(head))
                keep = self._head_end
                end = fh.seek(0, 2)
                fh.seek(max(keep, end - self._end_bytes))
                last = fh.read(end - fh.tell())
            # What the server writes between this read and the truncation is dropped uncounted; what it
            # writes between the truncation and the append lands before the marker.
            os.truncate(self.path, keep)
        except OSError as exc:  # not ours to cut (a read-only file): the server writes on, uncut
            logger.warning("cannot cap the server log %s at %d bytes: %s", self.path, cap, exc)
            self._cap = None
            return
        newline = last.find(b"\n")
        last = last[newline + 1:] if newline >= 0 else b""  # from a line's start
        since = end - len(last)  # where the end kept began, before the cut
        self.dropped += since - keep - self._marker
        marker = f"\n[autotune] log capped at {cap:,} bytes: {self.dropped:,} bytes dropped\n".encode()
        written, at = 0, keep
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                written = os.write(fd, marker + last)
                at = os.lseek(fd, 0, os.SEEK_CUR) - written  # where the marker landed
            finally:
                os.close(fd)
        except OSError as exc:
            logger.warning("cannot mark the cut of the server log %s: %s", self.path, exc)
        if written < len(marker) + len(last):  # the disk is full: the end kept is gone with the middle
            self.dropped += len(last)
            since, last = end, b""
        self._marker = written - len(last)
        if self._offset >= since:  # the reader had reached the end kept: the same byte, now after the marker
            self._offset = at + self._marker + (self._offset - since)
        elif self._offset > keep:  # the rest of what it was reading is gone: go on from the marker
            self._offset = keep
            self._partial, self._skipping = b"", False
        self.cuts += 1
        if self.cuts == 1:
            logger.warning("server log %s passed %d bytes from its launch: cut to its first %d and its last %d, "
                           "and again each time it does", self.path, cap, keep - self._start, len(last))

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
