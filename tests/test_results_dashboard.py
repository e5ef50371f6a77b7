"""`autotune dashboard`: optuna-dashboard in-process, with constraints, notes and artifacts."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from support.browser import artifacts_dir, chromium, console_errors, needs_chromium
from support.finished_study import make_finished_study

from autotune.results.dashboard import serve_in_thread, url_of
from autotune.study.storage.opening import open_study


@contextmanager
def dashboard(spec) -> Iterator[str]:
    httpd, thread = serve_in_thread(spec, "127.0.0.1", 0)
    try:
        yield url_of(httpd).removesuffix("/dashboard/")
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
    assert not thread.is_alive()


def _get(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read()


def _study_detail(base: str) -> dict:
    studies = json.loads(_get(base + "/api/studies")[2])["study_summaries"]
    assert len(studies) == 1
    return json.loads(_get(f"{base}/api/studies/{studies[0]['study_id']}")[2])


def test_trials_show_constraints_notes_and_artifacts(finished_spec):
    with dashboard(finished_spec) as base:
        detail = _study_detail(base)
        by_number = {t["number"]: t for t in detail["trials"]}
        assert len(by_number) == len(open_study(finished_spec, create=False).trials)
        # feasibility from set_constraint, which the dashboard alone would not show
        assert by_number[0]["constraints"] == [-1.0]
        assert by_number[1]["constraints"] == [1.0] and by_number[2]["constraints"] == [1.0]
        # notes generated from user_attrs
        assert "predicted_oom" in by_number[1]["note"]["body"] and "KV budget" in by_number[1]["note"]["body"]
        assert "graph_capture_oom" in by_number[3]["note"]["body"]
        assert "baseline" in by_number[0]["note"]["body"] and "Artifacts" in by_number[0]["note"]["body"]
        assert "sglang.launch_server" in detail["note"]["body"]
        # artifacts: each completed trial's log, command, load summary and per-request records
        arts = {a["filename"]: a for a in by_number[0]["artifacts"]}
        assert {"server.log", "command.sh", "load_c64.json", "requests_c64.jsonl"} <= set(arts)
        tid = by_number[0]["trial_id"]
        status, ctype, body = _get(
            f"{base}/artifacts/{detail['trials'][0]['study_id']}/{tid}/{arts['server.log']['artifact_id']}"
        )
        assert status == 200 and ctype.startswith("text/plain") and b"Load weight end" in body


def test_viewing_writes_nothing_and_a_ui_note_replaces_the_generated_one(tmp_path):
    spec = make_finished_study(tmp_path, n_complete=2)
    study = open_study(spec, create=False)
    before = dict(study._storage.get_study_system_attrs(study._study_id))
    with dashboard(spec) as base:
        detail = _study_detail(base)
        assert dict(study._storage.get_study_system_attrs(study._study_id)) == before
        t0 = detail["trials"][0]
        req = urllib.request.Request(
            f"{base}/api/studies/{t0['study_id']}/{t0['trial_id']}/note",
            method="PUT",
            data=json.dumps({"version": t0["note"]["version"] + 1, "body": "checked by hand"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status in (200, 204)
        time.sleep(0.1)
        again = _study_detail(base)
        assert again["trials"][0]["note"]["body"] == "checked by hand"
        assert "predicted_oom" in again["trials"][1]["note"]["body"]  # others still generated


def test_generated_notes_are_filled_into_the_trial_list_not_the_study_attrs(finished_spec):
    # The dashboard scans every study system attr for each trial it serializes: generated
    # trial notes kept there made its trial list quadratic in the number of trials.
    from autotune.results.dashboard import open_dashboard_storage

    storage = open_dashboard_storage(finished_spec)
    sid = open_study(finished_spec, create=False)._study_id
    assert not [k for k in storage.get_study_system_attrs(sid) if k.startswith("dashboard:")]
    with dashboard(finished_spec) as base:
        full = _study_detail(base)
        later = json.loads(_get(f"{base}/api/studies/{sid}?after=2")[2])  # the UI's incremental poll
    assert "sglang.launch_server" in full["note"]["body"] and later["note"] == full["note"]
    assert all(t["note"]["body"] for t in full["trials"] + full["best_trials"])
    assert [t["number"] for t in later["trials"]] == [t["number"] for t in full["trials"][2:]]
    assert [t["note"] for t in later["trials"]] == [t["note"] for t in full["trials"][2:]]


def test_cli_prints_url_and_stops_cleanly_on_ctrl_c(finished_spec):
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "dashboard", finished_spec.source_path, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        line = proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/dashboard/", line)
        assert m, line + proc.stderr.read() if proc.poll() is not None else line
        assert _get(m.group(0) + "")[0] == 200
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
        err = proc.stderr.read()
        assert rc == 0, f"rc {rc} after {time.monotonic() - t0:.1f} s: {err[-2000:]}"
        assert "Traceback" not in err and "dashboard stopped" in err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_unknown_study_and_busy_port_are_config_errors(finished_spec, tmp_path):
    from autotune.cli import main

    other = tmp_path / "other.yaml"
    other.write_text(
        open(finished_spec.source_path)
        .read()
        .replace("name: results-test", "name: never-run")
        .replace("storage: study.db", f"storage: {tmp_path / 'none.db'}")
    )
    assert main(["dashboard", str(other), "--port", "0"]) == 2
    with dashboard(finished_spec) as base:
        port = base.rsplit(":", 1)[1]
        assert main(["dashboard", finished_spec.source_path, "--port", port]) == 2


@pytest.mark.browser
@needs_chromium
def test_dashboard_trials_page_in_chromium(finished_spec, tmp_path):
    shots = artifacts_dir(tmp_path)
    with dashboard(finished_spec) as base:
        sid = _study_detail(base)["trials"][0]["study_id"]
        url = f"{base}/dashboard/studies/{sid}/trials"
        res = chromium(url, tmp_path, dump_dom=True, budget_ms=15000)
        assert res.returncode == 0, res.stderr[-2000:]
        dom = res.stdout
        assert "mem_fraction_static" in dom, dom[:2000]
        assert re.search(r"Trial\s*(<!-- -->)?\s*\d", dom) or "predicted_oom" in dom
        assert "server.log" in dom or "Artifacts" in dom
        assert console_errors(res.stderr) == []
        shot = shots / "dashboard-trials.png"
        chromium(url, tmp_path, screenshot=shot, window="1400,1800", budget_ms=15000)
        assert shot.is_file() and shot.stat().st_size > 10_000
        print(f"dashboard screenshot kept at {shot}")


def test_view_system_attrs_adds_only_what_is_missing():
    from autotune.results.dashboard import view_system_attrs

    log_meta = json.dumps({"artifact_id": "a", "filename": "server.log", "mimetype": "application/octet-stream"})
    json_meta = json.dumps({"artifact_id": "b", "filename": "load_c64.json", "mimetype": "application/json"})
    stored = {"constraints:memory": 1.0, "artifacts:a": log_meta, "artifacts:b": json_meta}
    view = view_system_attrs(stored)
    assert view["constraints"] == [1.0]
    assert json.loads(view["artifacts:a"])["mimetype"].startswith("text/plain")
    assert view["artifacts:b"] == json_meta
    assert "constraints" not in stored  # the stored dict is not changed
    legacy = {"constraints": [-2.0], "constraints:memory": 1.0}
    assert view_system_attrs(legacy)["constraints"] == [-2.0]  # a stored legacy list wins
    assert "constraints" not in view_system_attrs({"fixed_params": {}})


def _wsgi_get(app, host: str | None, path: str = "/api/studies") -> tuple[str, bytes]:
    from wsgiref.util import setup_testing_defaults

    environ: dict = {"PATH_INFO": path, "REQUEST_METHOD": "GET"}
    setup_testing_defaults(environ)
    environ.pop("HTTP_HOST", None)
    if host is not None:
        environ["HTTP_HOST"] = host
    got: list[str] = []
    body = b"".join(app(environ, lambda status, headers, exc_info=None: got.append(status)))
    return got[0], body


@pytest.mark.parametrize(("host", "allowed"), [
    ("127.0.0.1:8080", True), ("localhost:8080", True), ("LOCALHOST", True), ("[::1]:8080", True),
    ("evil.example", False), ("evil.example:8080", False), ("127.0.0.1.evil.example:8080", False),
    ("::1", False), ("[::1]x", False), ("", False), (None, False),
])
def test_the_dashboard_answers_only_its_own_host_names(finished_spec, host, allowed):
    """DNS rebinding: a web page whose name now points at 127.0.0.1 reaches the port, but its
    requests carry its own name in Host: refused (403) before the dashboard reads anything."""
    from autotune.results.dashboard import make_dashboard_server

    httpd = make_dashboard_server(finished_spec, "127.0.0.1", 0)
    try:
        status, body = _wsgi_get(httpd.get_app(), host)
    finally:
        httpd.server_close()
    if allowed:
        assert status.startswith("200"), status
        assert b"results-test" in body
    else:
        assert status.startswith("403"), status
        assert b"results-test" not in body


def test_the_host_asked_for_is_allowed_and_a_wildcard_with_expose_allows_any():
    from autotune.results.dashboard import allowed_hosts, host_guard

    def app(environ, start_response):
        start_response("200 OK", [])
        return [b"ok"]

    assert _wsgi_get(host_guard(app, allowed_hosts("10.1.2.3", expose=True)), "10.1.2.3:8080")[0] == "200 OK"
    assert _wsgi_get(host_guard(app, allowed_hosts("10.1.2.3", expose=True)), "evil.example")[0].startswith("403")
    assert _wsgi_get(host_guard(app, allowed_hosts("0.0.0.0", expose=True)), "gpu-node:8080")[0] == "200 OK"


def test_cli_stops_cleanly_on_sigterm_and_leaves_no_wal(finished_spec, tmp_path):
    """SIGTERM (kill, a scheduler) stops the dashboard as Ctrl-C does: exit 0, the storage closed,
    so SQLite removes the -wal and -shm its connection made beside a WAL-mode study."""
    import shutil
    import sqlite3

    src = os.path.dirname(finished_spec.source_path)
    shutil.copyfile(finished_spec.source_path, tmp_path / "study.yaml")
    shutil.copyfile(os.path.join(src, "study.db"), tmp_path / "study.db")
    con = sqlite3.connect(tmp_path / "study.db")
    assert con.execute("pragma journal_mode=wal").fetchone() == ("wal",)
    con.close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "dashboard", str(tmp_path / "study.yaml"), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        line = proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/dashboard/", line)
        assert m, line + (proc.stderr.read() if proc.poll() is not None else "")
        assert _get(m.group(0).replace("/dashboard/", "/api/studies"))[0] == 200
        assert (tmp_path / "study.db-wal").exists()  # the connection is open
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        err = proc.stderr.read()
        assert rc == 0, err[-2000:]
        assert "Traceback" not in err and "dashboard stopped" in err
        assert not (tmp_path / "study.db-wal").exists() and not (tmp_path / "study.db-shm").exists()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wsgi(app, method: str, path: str, body: dict | None = None) -> tuple[str, bytes]:
    import io
    from wsgiref.util import setup_testing_defaults

    data = json.dumps(body).encode() if body is not None else b""
    environ: dict = {"PATH_INFO": path, "REQUEST_METHOD": method, "CONTENT_TYPE": "application/json",
                     "CONTENT_LENGTH": str(len(data)), "wsgi.input": io.BytesIO(data)}
    setup_testing_defaults(environ)
    got: list[str] = []
    out = b"".join(app(environ, lambda status, headers, exc_info=None: got.append(status)))
    return got[0], out


def test_the_dashboard_refuses_every_write_but_notes(tmp_path):
    """Anyone who reached the port could DELETE the whole study (204, gone for good), tell trials
    or set their attrs: every request that is not a read or a note save is now 403 with a JSON
    reason, and the study is unchanged; saving a note still works."""
    from autotune.results.dashboard import make_app

    spec = make_finished_study(tmp_path, n_complete=2)
    study = open_study(spec, create=False)
    sid, trials = study._study_id, study.trials
    tid = trials[0]._trial_id
    before = [(t.number, t.state, t.values, t.user_attrs) for t in trials]
    app = make_app(spec)
    art = "0" * 8 + "-0000-0000-0000-" + "0" * 12
    refused = [
        ("DELETE", f"/api/studies/{sid}", {"remove_associated_artifacts": True}),
        ("delete", f"/api/studies/{sid}", None),  # bottle upper-cases the method
        ("POST", f"/api/trials/{tid}/tell", {"state": "Fail"}),
        ("POST", f"/api/trials/{tid}/user-attrs", {"user_attrs": {"x": 1}}),
        ("POST", f"/api/studies/{sid}/rename", {"study_name": "renamed"}),
        ("POST", "/api/studies", {"study_name": "new", "directions": ["maximize"]}),
        ("POST", f"/api/studies/{sid}/{tid}/skip", None),
        ("POST", f"/api/studies/{sid}/preference", {"mode": "ChooseWorst", "candidates": [0], "clicked": 0}),
        ("PUT", f"/api/studies/{sid}/preference_feedback_component", {"output_type": "note"}),
        ("DELETE", f"/api/studies/{sid}/preference/x", None),
        ("DELETE", f"/api/artifacts/{sid}/{tid}/{art}", None),
        ("DELETE", f"/api/artifacts/{sid}/{art}", None),
        ("POST", f"/api/artifacts/{sid}/{tid}", None),
        ("POST", "/incompatible-rdb-schema", None),
        ("PATCH", f"/api/studies/{sid}/note", {"version": 1, "body": "x"}),
        ("PUT", f"/api/studies/{sid}/note/", {"version": 1, "body": "x"}),
    ]
    for method, path, body in refused:
        status, out = _wsgi(app, method, path, body)
        assert status.startswith("403"), (method, path, status)
        assert "read-only except notes" in json.loads(out)["reason"], out
    again = open_study(spec, create=False)
    assert [s.study_name for s in again._storage.get_all_studies()] == [spec.name]
    assert [(t.number, t.state, t.values, t.user_attrs) for t in again.trials] == before
    assert again._storage.get_study_system_attrs(sid) == study._storage.get_study_system_attrs(sid)
    # notes: the study's and a trial's are saved (204), as before
    assert _wsgi(app, "PUT", f"/api/studies/{sid}/note", {"version": 1, "body": "study ok"})[0].startswith("204")
    assert _wsgi(app, "PUT", f"/api/studies/{sid}/{tid}/note", {"version": 1, "body": "trial ok"})[0].startswith("204")
    detail = json.loads(_wsgi(app, "GET", f"/api/studies/{sid}")[1])
    assert detail["note"]["body"] == "study ok" and detail["trials"][0]["note"]["body"] == "trial ok"
    assert _wsgi(app, "HEAD", "/api/studies")[0].startswith("200")
