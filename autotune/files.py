"""Reading a file autotune was pointed at, bounded: a regular file, under a size limit, UTF-8 where text.

``/dev/zero``, a FIFO, a directory or a symlink to any of them is refused before a byte is read
(opened without blocking, then ``fstat``: a FIFO with no writer would block ``open`` forever and
``/dev/zero`` never ends); a file over the limit is refused by its size, and one that grows while
it is read stops at the limit. Every refusal is one :class:`ConfigError` line naming the field and
the path.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.limits import clip, shown

__all__ = ["check_writable", "read_bytes", "read_json", "read_lines", "read_text", "regular_file"]


def _p(path: str | Path) -> str:
    return shown(str(path), 200)


def _human(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def regular_file(path: str | Path, field: str, limit: int) -> Path:
    """``path`` when it is a regular file no larger than ``limit`` bytes (without opening it)."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise ConfigError(f"{field}: no such file (got {_p(path)})") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise ConfigError(f"{field}: cannot read it ({type(exc).__name__}) (got {_p(path)})") from None
    _check_stat(st, field, path, limit)
    return p


def _check_stat(st: os.stat_result, field: str, path: str | Path, limit: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) \
            else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file"
        raise ConfigError(f"{field}: must be a regular file, this is {kind} (got {_p(path)})")
    if st.st_size > limit:
        raise ConfigError(f"{field}: {_human(st.st_size)}, more than the {_human(limit)} autotune reads "
                          f"(got {_p(path)})")


def _open(path: str | Path, field: str, limit: int) -> int:
    """A descriptor of ``path`` once it is known to be a regular file of at most ``limit`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ConfigError(f"{field}: no such file (got {_p(path)})") from None
    except IsADirectoryError:
        raise ConfigError(f"{field}: must be a regular file, this is a directory (got {_p(path)})") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{field}: cannot read it ({exc.strerror if isinstance(exc, OSError) else exc}) "
                          f"(got {_p(path)})") from None
    try:
        _check_stat(os.fstat(fd), field, path, limit)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _grew(field: str, path: str | Path, limit: int) -> ConfigError:
    return ConfigError(f"{field}: grew past the {_human(limit)} autotune reads (got {_p(path)})")


def _not_utf8(field: str, path: str | Path, data: bytes, at: int, offset: int = 0) -> ConfigError:
    return ConfigError(f"{field}: unreadable, not UTF-8 text (byte {offset + at}: {shown(data[at:at + 4])}) "
                       f"(got {_p(path)})")


def read_bytes(path: str | Path, field: str, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes."""
    fd = _open(path, field, limit)
    try:
        chunks: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:
            raise _grew(field, path, limit)
        return b"".join(chunks)
    except OSError as exc:
        raise ConfigError(f"{field}: cannot read it ({exc.strerror}) (got {_p(path)})") from None
    finally:
        os.close(fd)


def read_lines(path: str | Path, field: str, limit: int, *, line_limit: int | None = None
               ) -> Iterator[tuple[int, str]]:
    """The lines of a regular file of at most ``limit`` bytes as UTF-8 text, numbered from 1, without their
    line ends, read as they are asked for: the file is never held whole (one line is), so a reader that
    refuses what the lines build stops reading there. With ``line_limit``, a line longer than that many
    bytes (its line end aside) is refused once that many are read, so a file without newlines is not held
    whole either."""
    fd = _open(path, field, limit)
    got = 0
    size = -1 if line_limit is None else line_limit + 2  # room for the line's own "\r\n"
    try:
        with os.fdopen(fd, "rb", buffering=1 << 20, closefd=False) as f:
            number = 0
            while raw := f.readline(size):
                number += 1
                got += len(raw)
                if got > limit:
                    raise _grew(field, path, limit)
                if line_limit is not None and len(raw.rstrip(b"\r\n")) > line_limit:
                    raise ConfigError(f"{field}: line {number} is longer than the {_human(line_limit)} a line "
                                      f"may hold (the rest is not read) (got {_p(path)})")
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise _not_utf8(field, path, raw, exc.start, got - len(raw)) from None
                yield number, text.rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(f"{field}: cannot read it ({exc.strerror}) (got {_p(path)})") from None
    finally:
        os.close(fd)


def read_text(path: str | Path, field: str, limit: int, *, errors: str = "strict") -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes (``errors="replace"`` for logs)."""
    data = read_bytes(path, field, limit)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise _not_utf8(field, path, data, exc.start) from None


def read_json(path: str | Path, field: str, limit: int) -> Any:
    """The JSON document of a regular file of at most ``limit`` bytes."""
    text = read_text(path, field, limit)
    try:
        return json.loads(text)
    except RecursionError:
        raise ConfigError(f"{field}: nested too deep to read (got {_p(path)})") from None
    except ValueError as exc:  # JSONDecodeError, and an integer of more than 4,300 digits
        raise ConfigError(f"{field}: not JSON ({clip(str(exc), 80)}) (got {_p(path)})") from None


def check_writable(path: str | Path, field: str) -> Path:
    """``path`` when a file can be written there (checked before the work whose result it will hold):
    its directory exists and is writable, and it is not a directory or a FIFO (which would block)."""
    p = Path(path)
    try:
        st = p.stat()
    except (FileNotFoundError, NotADirectoryError):  # not there, or under a file: the directory says which
        st = None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{field}: cannot write there ({type(exc).__name__}) (got {_p(path)})") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
            raise ConfigError(f"{field}: is a {'directory' if stat.S_ISDIR(st.st_mode) else 'FIFO'}, not a file "
                              f"(got {_p(path)})")
        if not os.access(p, os.W_OK):
            raise ConfigError(f"{field}: not writable (got {_p(path)})")
        return p
    parent = p.parent
    if not parent.is_dir():
        raise ConfigError(f"{field}: no directory {_p(parent)} to write it in (got {_p(path)})")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{field}: directory {_p(parent)} is not writable (got {_p(path)})")
    return p


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether ``a`` and ``b`` are one file however spelled (``./``, ``..``, a symlink, a hard link);
    when either does not exist yet, whether they would be (their resolved paths)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # either missing: compare where they would be
        try:
            return Path(a).resolve() == Path(b).resolve()
        except (OSError, RuntimeError, ValueError):
            return False
