"""An optuna RDB storage that rides out a database restart.

Every storage call that fails because the database cannot be reached (connection
refused, connection dropped, server shutting down) is retried with exponential backoff
until it succeeds or ``deadline_s`` has passed since the first failure; then
:class:`StorageUnavailable` is raised and the driver stops cleanly (servers torn down,
the study resumable). Errors that are not about reaching the database (integrity, bad
data) are raised at once.

It is an :class:`optuna.storages.RDBStorage`, so optuna still wraps it in its write-through
cache and every reader (status, dashboard) sees a plain RDB storage.

Duplicates: a retried write either committed or did not. Finishing a trial is retried as
"make it so" (a retry that finds the trial already in the wanted state succeeds). A new
trial whose COMMIT was sent but whose answer was lost could, in principle, be created twice;
a server restart aborts uncommitted transactions, so only a connection cut in that very
round trip can do it, and resume would mark such a trial interrupted.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

import optuna
from optuna.storages import RDBStorage

from autotune.errors import AutotuneError, ConfigError
from autotune.limits import shown
from autotune.redact import REDACTED, redact_text

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_DEADLINE_S = 300.0  # a database restart or fail-over takes seconds to a minute
DEADLINE_ENV = "AUTOTUNE_STORAGE_RETRY_S"
OPEN_DEADLINE_S = 15.0


class StorageUnavailable(AutotuneError):
    """The study's storage could not be reached for longer than the retry deadline."""


def is_unreachable(exc: BaseException) -> bool:
    """True when ``exc`` (or what it wraps) says the database could not be reached."""
    from sqlalchemy import exc as sa_exc

    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.DisconnectionError)):
            text = str(cur).lower()
            # SQLite's "database is locked" is contention, not absence: retried the same way.
            # A read-only or damaged file does not come back by waiting (storage_fault).
            return "no such table" not in text and "syntax error" not in text and storage_fault(cur) is None
        if isinstance(cur, sa_exc.DBAPIError) and cur.connection_invalidated:
            return True
        cur = cur.__cause__ or cur.__context__
    return False


#: What a database says when waiting cannot help, and what autotune says about it.
_FAULTS = (
    (("readonly database", "read-only database", "read-only file system"),
     "is read-only: the study cannot record its trials there (make it writable, or point storage "
     "at another file)"),
    (("database disk image is malformed", "file is not a database", "database corruption"),
     "is damaged: restore it from a copy, or point storage at another file"),
)


def storage_fault(exc: BaseException) -> str | None:
    """What is wrong with a database that answers but cannot do its work (a read-only or
    damaged SQLite file), in words; None for anything else."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        text = str(cur).lower()
        for markers, words in _FAULTS:
            hit = next((m for m in markers if m in text), None)
            if hit is not None:
                return f"{words} ({hit})"
        cur = cur.__cause__ or cur.__context__
    return None


def url_secrets(url: str) -> list[str]:
    """Every text of ``url`` that is its password, however it is read: the password as SQLAlchemy
    splits it (at the first '@', the one the driver gets), raw and percent-decoded, and each
    '@'-separated piece of the userinfo as autotune's rule reads it (up to the last '@'): a
    driver's message that names a host or database SQLAlchemy split out of the password still
    shows none of it. Longest first, so a piece never leaves part of a longer one."""
    from urllib.parse import unquote

    from sqlalchemy.engine import make_url

    found: set[str] = set()
    try:
        password = make_url(url).password
    except Exception:  # noqa: BLE001 - not a URL: nothing parsed, nothing to hide by it
        password = None
    if password:
        found.add(str(password))
    rest = url.partition("://")[2]
    userinfo = rest[:rest.rfind("@")] if "@" in rest else ""
    user, colon, raw = userinfo.partition(":")
    if colon:
        for piece in (raw, *raw.split("@")):
            found.update(p for p in (piece, unquote(piece)) if p)
    return sorted(found, key=len, reverse=True)


def hide_secrets(text: str, secrets: list[str]) -> str:
    """``text`` with every one of ``secrets`` replaced by ``***``, then every other secret
    (:func:`~autotune.redact.redact_text`)."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return redact_text(text)


def _why(exc: BaseException, secrets: list[str] | None = None) -> str:
    """The first line of what the database said, secrets hidden (the storage URL's password as
    :func:`url_secrets` reads it, and anything :func:`~autotune.redact.redact_text` hides): optuna's
    "an exception is raised during the commit" says nothing, the error it wraps does."""
    if isinstance(exc, optuna.exceptions.StorageInternalError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return hide_secrets((str(exc).strip().splitlines() or [type(exc).__name__])[0], secrets or [])


def deadline_s() -> float:
    """``AUTOTUNE_STORAGE_RETRY_S`` in seconds; the default (300) when it is unset, not a number,
    negative, NaN or infinite (a NaN deadline compared false with every elapsed time: it never
    ended), with a warning for a value that was set."""
    raw = os.environ.get(DEADLINE_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_DEADLINE_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        log.warning("%s=%s is not a number of seconds >= 0: using %.0f s", DEADLINE_ENV, shown(raw),
                    DEFAULT_DEADLINE_S)
        return DEFAULT_DEADLINE_S
    return value


class Backoff:
    """Retry ``fn`` while the database is unreachable: 0.25 s doubling to 8 s, for ``deadline_s``."""

    def __init__(self, deadline: float | None = None, *, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, where: str = "the study's database") -> None:
        self.deadline = deadline_s() if deadline is None else deadline
        self.where = where  # the storage URL, its password hidden: named by a fault's one line
        self.secrets: list[str] = []  # the URL's password as each parser reads it (url_secrets)
        self.sleep = sleep
        self.clock = clock
        self.retries = 0  # total retried calls, for the benchmarks and the logs
        self.outages = 0

    def call(self, what: str, fn: Callable[[], T], *, on_retry: Callable[[BaseException], T | None] | None = None) -> T:
        first: float | None = None
        delay = 0.25
        while True:
            try:
                return fn()
            except Exception as exc:
                fault = storage_fault(exc)
                if fault is not None:  # read-only or damaged: one line now, not retries for minutes
                    raise ConfigError(f"storage: {self.where} {fault}") from None
                if first is not None and on_retry is not None:
                    settled = on_retry(exc)  # a retried write that had committed after all
                    if settled is not None:
                        return settled
                if not is_unreachable(exc):
                    raise
                now = self.clock()
                if first is None:
                    first = now
                    self.outages += 1
                    log.warning("storage unreachable (%s): retrying for up to %.0f s: %s", what, self.deadline,
                                _why(exc, self.secrets)[:200])
                if now - first >= self.deadline:
                    raise StorageUnavailable(
                        f"storage: unreachable for {now - first:.0f} s ({what}, {self.where}): "
                        f"{_why(exc, self.secrets)[:160]}; the study resumes with `autotune run` "
                        "once it is back") from None
                self.retries += 1
                self.sleep(delay)
                delay = min(delay * 2, 8.0)


# The calls optuna's cache and study make on an RDBStorage.
_RETRIED = (
    "create_new_study", "delete_study", "set_study_user_attr", "set_study_system_attr",
    "get_study_id_from_name", "get_study_name_from_id", "get_study_directions", "get_study_user_attrs",
    "get_study_system_attrs", "get_all_studies", "create_new_trial", "_create_new_trial", "set_trial_param",
    "_set_trial_param", "get_trial_id_from_study_id_trial_number", "get_best_trial", "_get_best_trial_id",
    "set_trial_intermediate_value", "set_trial_user_attr", "set_trial_system_attr", "get_trial",
    "get_all_trials", "get_n_trials", "get_trial_param", "get_trial_number_from_id",
    "record_heartbeat", "_get_stale_trial_ids",
)


class RetryingRDBStorage(RDBStorage):
    """:class:`RDBStorage` whose calls retry while the database is unreachable (see module doc)."""

    def __init__(self, url: str, *, backoff: Backoff | None = None, where: str | None = None,
                 **kwargs: Any) -> None:
        self.backoff = backoff or Backoff()
        if where is not None:
            self.backoff.where = where
        self.backoff.secrets = url_secrets(url)
        # Opening is not riding out an outage: a database that is not there at the start is
        # reported within seconds, not after the whole deadline.
        opening = Backoff(min(self.backoff.deadline, OPEN_DEADLINE_S), sleep=self.backoff.sleep,
                          clock=self.backoff.clock, where=self.backoff.where)
        opening.secrets = self.backoff.secrets
        opening.call("connect", lambda: RDBStorage.__init__(self, url, **kwargs))
        if url.startswith("sqlite") and "mode=ro" not in url:  # a reader changes nothing, the journal mode included
            sqlite_fast_commits(self.engine)

    def set_trial_state_values(self, trial_id: int, state: optuna.trial.TrialState,
                               values: Any = None) -> bool:
        def settled(exc: BaseException) -> bool | None:
            # The first attempt committed but its answer was lost: the trial is already so.
            if isinstance(exc, RuntimeError) and not is_unreachable(exc):
                try:
                    return True if RDBStorage.get_trial(self, trial_id).state == state else None
                except Exception:  # noqa: BLE001 - still unreachable: keep retrying
                    return None
            return None

        return self.backoff.call("finish trial", lambda: RDBStorage.set_trial_state_values(
            self, trial_id, state=state, values=values), on_retry=settled)

    def _get_trials(self, study_id: int, states: Any, included_trial_ids: set[int],
                    trial_id_greater_than: int) -> list[optuna.trial.FrozenTrial]:
        from autotune.study.storage.read import read_trials

        return self.backoff.call("get trials", lambda: read_trials(
            self.engine, study_id, states, included_trial_ids, trial_id_greater_than))

    def __getstate__(self) -> dict[Any, Any]:
        state = RDBStorage.__getstate__(self)
        state.pop("backoff", None)
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        RDBStorage.__setstate__(self, state)
        self.backoff = Backoff()
        self.backoff.secrets = url_secrets(self.url)


def _retrying(name: str) -> Callable[..., Any]:
    base = getattr(RDBStorage, name)

    def method(self: RetryingRDBStorage, *args: Any, **kwargs: Any) -> Any:
        return self.backoff.call(name.strip("_").replace("_", " "), lambda: base(self, *args, **kwargs))

    method.__name__ = name
    method.__doc__ = base.__doc__
    return method


for _name in _RETRIED:
    if hasattr(RDBStorage, _name):
        setattr(RetryingRDBStorage, _name, _retrying(_name))


def sqlite_fast_commits(engine: Any) -> None:
    """WAL journal with ``synchronous=NORMAL`` on every connection of ``engine``.

    A commit then appends to the write-ahead log without an fsync (measured: 10 ms per
    commit on the development disk in the default rollback journal, and a trial makes
    some 45 of them). Committed trials survive a killed process, as before; only an OS
    crash or power loss may take back the last transactions. Readers (status, the
    dashboard) no longer block the driver's writes. WAL needs a local file system (not NFS).
    """
    from sqlalchemy import event

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
        finally:
            cur.close()

    event.listen(engine, "connect", on_connect)
    engine.dispose()  # connections opened while optuna created the schema get the pragmas too


def engine_kwargs(url: str) -> dict[str, Any]:
    """Connection settings per database: a busy timeout for SQLite; for servers, a
    connect timeout and a liveness ping so a restarted server's dead connections are replaced."""
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 30}}
    kw: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("postgresql"):
        kw["connect_args"] = {"connect_timeout": 10}
    return kw


def probe_storage(url: str, timeout_s: float = 5.0) -> str | None:
    """None when the database answers ``SELECT 1``; else the first line of why not."""
    import sqlalchemy as sa

    try:
        kw = engine_kwargs(url)
        if url.startswith("postgresql"):
            kw["connect_args"] = {"connect_timeout": max(1, int(timeout_s))}
        engine = sa.create_engine(url, **kw)
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        finally:
            engine.dispose()
    except Exception as exc:  # noqa: BLE001 - any failure is the answer
        return hide_secrets((str(exc).splitlines() or [type(exc).__name__])[0], url_secrets(url))[:200]
    return None
