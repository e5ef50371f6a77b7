"""optuna-dashboard for a study, in-process: the study's storage and artifact store,
served with wsgiref on 127.0.0.1 by default.

Why a storage *view*: optuna-dashboard 0.21 reads two things the way older
optuna wrote them, and the driver writes them the optuna 5 way. Rather than write
to the study after the fact (only the driver writes optuna storage), the
dashboard reads the study through :class:`DashboardStorage`, which adds, at read
time and only where the stored data lacks them:

* ``system_attrs["constraints"]``, the legacy list the dashboard shows as
  feasibility, from optuna 5's ``constraints:<name>`` keys (``set_constraint``);
* a readable MIME type (text/plain) for artifacts stored as
  application/octet-stream (server.log, requests_*.jsonl), so "open" shows text.

Notes are generated too, where none was saved: a study note with the best trial
and how to launch it, and a note per trial from its user_attrs (outcome, its
``note``, reason, prediction vs observation, the launch line). The dashboard
keeps saved notes in study system attrs, but generated ones are not added there:
it scans every study attr for every trial it serializes (twice: notes, then
artifacts), so the trial list became quadratic (13.6 s at 2,000 trials), and it
reads the attrs of every study in the storage for each request. A WSGI layer
(:func:`with_notes`) fills them into the study-detail JSON, the only response
that shows notes, where the stored note was never saved (version 0).

A note saved from the dashboard's UI is a real stored note and replaces the
generated one. Everything else is the stored study, unchanged.

Notes are the only thing the dashboard writes: :func:`notes_only` answers 403 to every
other request that is not a read (optuna-dashboard 0.21 would otherwise delete studies,
trials' artifacts and preference history, tell trials, set user attrs, rename, create or
migrate the storage, for anyone who reaches the port: no auth, no confirmation).
"""

from __future__ import annotations

import copy
import json
import logging
import re
import signal
import threading
from collections.abc import Callable, Container
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import optuna
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import ConfigError
from autotune.redact import redact_text
from autotune.results import trials as _trials
from autotune.spec import StudySpec, is_loopback
from autotune.study import attrs

log = logging.getLogger(__name__)

_CONSTRAINT_PREFIX = "constraints:"
_ARTIFACT_PREFIX = "artifacts:"
_TEXT_SUFFIXES = (".log", ".txt", ".sh", ".jsonl", ".out", ".err")
_NOTE_MAX = 2045  # optuna_dashboard._note.SYSTEM_ATTR_MAX_LENGTH


def view_system_attrs(system_attrs: dict[str, Any]) -> dict[str, Any]:
    """A trial's system attrs as the dashboard needs them (a new dict; the input is not changed)."""
    out = dict(system_attrs)
    if "constraints" not in out:
        values = [v for k, v in sorted(out.items()) if k.startswith(_CONSTRAINT_PREFIX)]
        if values:
            out["constraints"] = values
    for key, raw in system_attrs.items():
        if not key.startswith(_ARTIFACT_PREFIX) or not isinstance(raw, str):
            continue
        try:
            meta = json.loads(raw)
        except ValueError:
            continue
        name = str(meta.get("filename", ""))
        if name.endswith(_TEXT_SUFFIXES) and not str(meta.get("mimetype", "")).startswith("text/plain"):
            out[key] = json.dumps({**meta, "mimetype": "text/plain; charset=utf-8"})
    return out


def _view_trial(t: FrozenTrial) -> FrozenTrial:
    attrs = view_system_attrs(t.system_attrs)
    if attrs == t.system_attrs:
        return t
    v = copy.copy(t)  # a shallow copy: the stored trial is not changed
    v.system_attrs = attrs
    return v


def trial_note(t: FrozenTrial) -> str:
    """The generated Markdown note of a trial: what happened, why, and how it was launched."""
    ua = t.user_attrs
    head = f"**{_trials.outcome(t)}**"
    if ua.get(attrs.BASELINE):
        head += " · baseline (SGLang defaults)"
    if t.state == TrialState.COMPLETE and t.value is not None:
        head += f" · value {t.value:.2f}"
        if ua.get(attrs.BEST_POINT):
            head += f" at {ua[attrs.BEST_POINT]}"
    lines = [head, ""]
    if ua.get(attrs.NOTE):
        lines += [str(ua[attrs.NOTE]), ""]
    reason = ua.get(attrs.REASON)
    if reason and t.state != TrialState.COMPLETE and str(reason) not in str(ua.get(attrs.NOTE, "")):
        lines += [f"Reason: {ua[attrs.REASON]}", ""]
    pred, obs = ua.get(attrs.PREDICTION) or {}, ua.get(attrs.OBSERVED) or {}
    if pred:
        lines.append(f"- Memory model: verdict {pred.get('verdict')}, KV tokens {pred.get('kv_tokens')}, "
                     f"min viable mem_fraction_static {pred.get('min_viable_mem_fraction')}")
    if obs.get("kv_tokens") is not None:
        err = ua.get(attrs.KV_TOKENS_ERROR_PCT)
        lines.append(f"- Observed: KV tokens {obs.get('kv_tokens')}"
                     + (f" (prediction off by {err:+.2f} %)" if isinstance(err, (int, float)) else ""))
    if ua.get(attrs.SHELL):
        lines += ["", "Launched with:", "", "```", str(ua[attrs.SHELL]), "```"]
    if any(k.startswith(_ARTIFACT_PREFIX) for k in t.system_attrs):
        lines += ["", "Server log, launch command, load summary and per-request records: see Artifacts below."]
    body = redact_text("\n".join(lines).strip())  # a study recorded before its writes were redacted
    return body if len(body) <= 4 * _NOTE_MAX else body[: 4 * _NOTE_MAX - 3] + "..."


def study_note(study: optuna.Study, spec: StudySpec | None) -> str:
    from autotune.results.summary import baseline_trial, best_trial, gain_over_baseline, shown_value

    best, base = best_trial(study), baseline_trial(study)
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        counts[_trials.outcome(t)] = counts.get(_trials.outcome(t), 0) + 1
    lines = ["**autotune study** · " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), ""]
    if best is not None:
        lines.append(f"Best: trial {best.number}, value {shown_value(study, best):.2f}, "
                     f"params `{_trials.ran_params(best)}`")
        gain = gain_over_baseline(study, best, base)  # the figure `best` and `report` show
        if base is not None and gain is not None:
            lines.append(f"Baseline (SGLang defaults): trial {base.number}, value {shown_value(study, base):.2f}, "
                         f"gain {gain:+.2f} %")
        if spec is not None:
            try:
                from autotune.results.summary import launch_shell

                lines += ["", "Launch the winner:", "", "```", launch_shell(spec, best), "```"]
            except Exception as exc:  # noqa: BLE001 - a note must never break the dashboard
                log.info("no launch command for the study note: %s", exc)
    return "\n".join(lines)


class DashboardStorage(RDBStorage):
    """The study's RDB storage as optuna-dashboard 0.21 should see it (see the module doc).

    Reads are translated; the UI's notes (the only write :func:`notes_only` lets through)
    go to the storage unchanged.
    """

    def __init__(self, url: str, *, spec: StudySpec | None = None, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self._spec = spec

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return _view_trial(super().get_trial(trial_id))

    def _get_trials(self, study_id: int, states: Any, included_trial_ids: set[int],
                    trial_id_greater_than: int) -> list[FrozenTrial]:
        # Plain SELECTs instead of optuna's ORM load (autotune.study.storage.read): 7x faster.
        from autotune.study.storage.read import read_trials

        return read_trials(self.engine, study_id, states, included_trial_ids, trial_id_greater_than)

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return [_view_trial(t) for t in super().get_all_trials(study_id, deepcopy=deepcopy, states=states)]

    def get_trial_system_attrs(self, trial_id: int) -> dict[str, Any]:
        return view_system_attrs(super().get_trial_system_attrs(trial_id))

    def study_note(self, study_id: int) -> str:
        """The generated study note ("" for a study without trials)."""
        from autotune.study.storage.read import count_trials

        if not count_trials(self.engine, study_id):
            return ""
        name = self.get_study_name_from_id(study_id)
        study = optuna.load_study(study_name=name, storage=self)
        return study_note(study, self._spec if self._spec is not None and self._spec.name == name else None)

    def trial_notes(self, study_id: int, trial_ids: Container[int]) -> dict[int, str]:
        """Generated notes of these trials (trial_id -> note body); running ones have none yet."""
        return {t._trial_id: trial_note(t) for t in super().get_all_trials(study_id, deepcopy=False)
                if t._trial_id in trial_ids and t.state != TrialState.RUNNING}


_STUDY_DETAIL = re.compile(r"/api/studies/(\d+)")


def _unsaved(note: dict[str, Any] | None) -> bool:
    return not note or (not note.get("version") and not note.get("body"))


def with_notes(app: Callable[..., Any], storage: DashboardStorage) -> Callable[..., Any]:
    """WSGI middleware: the study-detail JSON (``GET /api/studies/<id>``, the trial list) with the
    generated study and trial notes where none was saved; every other request passes through."""

    def middleware(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        match = _STUDY_DETAIL.fullmatch(environ.get("PATH_INFO", ""))
        if environ.get("REQUEST_METHOD") != "GET" or match is None:
            return app(environ, start_response)
        head: list[Any] = []
        body = b"".join(app(environ, lambda status, headers, exc_info=None: head.extend((status, headers))))
        status, headers = head
        if status.startswith("200"):
            detail, study_id = json.loads(body), int(match.group(1))
            if _unsaved(detail.get("note")):
                detail["note"] = {"version": 0, "body": storage.study_note(study_id)}
            trials = detail.get("trials", []) + detail.get("best_trials", [])
            empty = {t["trial_id"] for t in trials if _unsaved(t.get("note"))}
            notes = storage.trial_notes(study_id, empty) if empty else {}
            for t in trials:
                if t["trial_id"] in notes:
                    t["note"] = {"version": 0, "body": notes[t["trial_id"]]}
            body = json.dumps(detail).encode()
            headers = [(k, str(len(body)) if k.lower() == "content-length" else v) for k, v in headers]
        start_response(status, headers)
        return [body]

    return middleware


_READS = frozenset({"GET", "HEAD"})
# The only writes let through: saving a study's or a trial's note (study system attrs).
_NOTE_PUT = re.compile(r"/api/studies/\d+(?:/\d+)?/note")


def notes_only(app: Callable[..., Any]) -> Callable[..., Any]:
    """WSGI middleware: reads (GET, HEAD) and note saves (``PUT /api/studies/<id>[/<trial>]/note``)
    pass; every other request is answered 403 with a JSON ``reason`` (which the UI shows) before
    optuna-dashboard sees it. Refused, among others: ``DELETE /api/studies/<id>`` (the whole study),
    ``POST /api/trials/<id>/tell`` and ``/user-attrs``, artifact uploads and deletions, rename,
    create, preference history and ``/incompatible-rdb-schema`` (a schema migration). An allow
    list, so a route added by a later optuna-dashboard is refused too."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()  # bottle upper-cases it too
        path = environ.get("PATH_INFO", "")
        if method in _READS or (method == "PUT" and _NOTE_PUT.fullmatch(path)):
            return app(environ, start_response)
        body = json.dumps({"reason": f"{method} {path} refused: autotune's dashboard is read-only except "
                                     "notes (only `autotune run` writes the study)"}).encode()
        start_response("403 Forbidden", [("Content-Type", "application/json"),
                                         ("Content-Length", str(len(body)))])
        return [body]

    return guarded


def open_dashboard_storage(spec: StudySpec) -> DashboardStorage:
    """The study's storage through the dashboard view; ConfigError when the study does not exist."""
    from autotune.study.storage.opening import open_study

    open_study(spec, create=False, same_file=True)  # a clear error for a study that was never run
    url = spec.storage_url
    kwargs = {"engine_kwargs": {"connect_args": {"timeout": 30}}} if url.startswith("sqlite") else {}
    return DashboardStorage(url, spec=spec, **kwargs)


def make_app(spec: StudySpec) -> Callable[..., Any]:
    """The optuna-dashboard WSGI app over the study's storage view and its artifact store: reads
    and note saves only (:func:`notes_only`)."""
    from optuna_dashboard import wsgi

    from autotune.study.storage.opening import artifact_store

    storage = open_dashboard_storage(spec)
    return notes_only(with_notes(wsgi(storage, artifact_store=artifact_store(spec)), storage))


_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def allowed_hosts(host: str, *, expose: bool = False) -> frozenset[str] | None:
    """The names a request's Host header may carry for a server bound to ``host``: loopback and
    ``host`` itself; None (any) only for a wildcard ``--host`` (0.0.0.0, ::) with ``--expose``,
    which anyone who reaches it can use anyway, under any name."""
    bound = host.strip("[]").lower()
    if expose and bound in ("0.0.0.0", "::", ""):
        return None
    return _LOOPBACK_NAMES | {bound}


def _host_of(header: str) -> str:
    """The host of a Host header, without port or IPv6 brackets, lower case ('' when malformed)."""
    h = header.strip().lower()
    if h.startswith("["):  # [::1] or [::1]:8080
        inner, sep, rest = h[1:].partition("]")
        return inner if sep and (not rest or rest.startswith(":")) else ""
    if h.count(":") > 1:  # a bare IPv6 address is not a valid Host
        return ""
    return h.partition(":")[0]


def host_guard(app: Callable[..., Any], allowed: Container[str] | None) -> Callable[..., Any]:
    """``app`` answering 403 to a request whose Host header names no ``allowed`` host: a web page
    that rebinds its own name to 127.0.0.1 (DNS rebinding) reaches the port, but its requests
    carry its name, so it can neither read trials nor edit notes. ``allowed`` None: no check."""
    if allowed is None:
        return app

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if _host_of(environ.get("HTTP_HOST", "")) not in allowed:
            body = b"403 Forbidden: this Host is not the dashboard's address\n"
            start_response("403 Forbidden", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
            return [body]
        return app(environ, start_response)

    return guarded


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        log.debug("%s " + format, self.address_string(), *args)


def make_dashboard_server(spec: StudySpec, host: str = "127.0.0.1", port: int = 8080, *,
                          expose: bool = False) -> WSGIServer:
    """A bound (not yet serving) wsgiref server; port 0 picks a free port (see ``server_port``).
    A host beyond loopback needs ``expose`` (``--expose``): ConfigError before the study is opened."""
    if not (0 <= port <= 65535):
        raise ConfigError(f"--port: must be 0..65535, got {port}")
    if not is_loopback(host) and not expose:
        raise ConfigError(f"--host: {host!r} listens beyond loopback: anyone who can reach it can read trials "
                          "and edit notes; add --expose to allow it (or tunnel 127.0.0.1 with ssh -L)")
    app = host_guard(make_app(spec), allowed_hosts(host, expose=expose))
    try:
        httpd = make_server(host, port, app, handler_class=_QuietHandler)
    except OSError as exc:
        raise ConfigError(f"--host/--port: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    if not is_loopback(host):
        log.warning("the dashboard listens on %s: anyone who can reach it can read trials and edit notes; "
                    "prefer 127.0.0.1 and an ssh tunnel (see dashboards/README.md)", host)
    return httpd


def url_of(httpd: WSGIServer) -> str:
    host, port = httpd.server_address[:2]
    host = host.decode() if isinstance(host, bytes) else host
    return f"http://{host}:{port}/dashboard/"


def serve_in_thread(spec: StudySpec, host: str = "127.0.0.1", port: int = 0, *,
                    expose: bool = False) -> tuple[WSGIServer, threading.Thread]:
    """Start serving in a daemon thread (tests, ``autotune run`` side by side). Stop with
    ``httpd.shutdown(); httpd.server_close(); thread.join()``."""
    httpd = make_dashboard_server(spec, host, port, expose=expose)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2},
                              name="autotune-dashboard", daemon=True)
    thread.start()
    return httpd, thread


def serve(spec: StudySpec, host: str = "127.0.0.1", port: int = 8080,
          on_ready: Callable[[str], None] | None = None, *, expose: bool = False) -> None:
    """Serve until Ctrl-C (KeyboardInterrupt) or SIGTERM, then stop serving, close the socket and
    return (so the storage is closed and SQLite removes its -wal and -shm).

    Requests are served on a daemon thread and the main thread only waits, so the signal
    never lands inside a request (half-done database work) and shutdown is prompt.
    """
    httpd, thread = serve_in_thread(spec, host, port, expose=expose)
    old_term = None
    if threading.current_thread() is threading.main_thread():
        old_term = signal.signal(signal.SIGTERM, _term_as_interrupt)
    try:
        if on_ready is not None:
            on_ready(url_of(httpd))
        while thread.is_alive():
            thread.join(timeout=0.5)
    except KeyboardInterrupt:
        log.info("dashboard stopping")
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)


def _term_as_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM (kill, systemd, a job scheduler) stops the way Ctrl-C does
