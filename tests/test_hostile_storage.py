"""Hostile or careless storage, Ray and host settings (issue 34): one line naming the field and the
value, the right exit code, nothing written, nothing waited for.

* a command that only reads (status, best, export, report, plan, dashboard) never writes: a SQLite
  file of another application is refused and left byte for byte as it was; a missing file is one
  line, not a new empty database; a database in memory is refused by every command;
* a database with a damaged page, or a read-only one given to ``run``: one line, exit 2, no
  traceback and no minutes of retries;
* a PostgreSQL password in ``storage`` is in no message;
* a Ray address that is malformed or does not resolve: exit 2 before ``ray.init`` (which retries
  for minutes); one where nothing answers: exit 1;
* ``server.host`` beyond loopback needs ``server.expose: true``; ``dashboard --host`` needs ``--expose``.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.cli import main

MODELS = Path(__file__).resolve().parents[1] / "studies" / "models"

pytestmark = pytest.mark.usefixtures("cli_signal_handlers")


def _study(tmp_path: Path, *, storage: str | None = None, name: str = "guard", **over: Any) -> Path:
    data: dict[str, Any] = {
        "name": name, "n_trials": 2, "executor": {"kind": "inline"},
        "server": {"backend": "sim", "model_path": str(MODELS / "kimi-k2-class"), "tp_size": 8,
                   "sim": {"time_scale": 200}},  # the two studies that launch assert no figure: startups 4x shorter
        "hardware": {"gpu": "rtx-pro-6000", "num_gpus": 8, "interconnect": "pcie"},
        "workload": {"input_len": 64, "output_len": 16, "num_prompts": 8, "concurrency": [4]},
    }
    if storage is not None:
        data["storage"] = storage
    for key, value in over.items():
        data[key] = value
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _fails(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 2) -> str:
    """Run ``argv``; it must exit ``code`` with exactly one line on stderr, no traceback. That line."""
    assert main(argv) == code, argv
    cap = capsys.readouterr()
    lines = [ln for ln in cap.err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, cap.err
    assert "Traceback" not in cap.err + cap.out
    return lines[0]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


READERS = (["status"], ["best"], ["export", "-o", "{tmp}/t.csv"], ["report", "-o", "{tmp}/r.html"], ["plan"])


def _argv(cmd: list[str], study: Path, tmp_path: Path) -> list[str]:
    return [cmd[0], str(study), *(a.format(tmp=tmp_path) for a in cmd[1:])]


# ---- read-only commands never write --------------------------------------------------------

@pytest.mark.parametrize("cmd", [*READERS, ["run", "--no-progress"]], ids=lambda c: c[0])
def test_a_sqlite_file_of_another_application_is_refused_and_left_as_it_was(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], cmd: list[str]) -> None:
    other = tmp_path / "crm.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    con.executemany("INSERT INTO customers (name) VALUES (?)", [(f"c{i}",) for i in range(50)])
    con.commit()
    con.close()
    before, listing = _sha(other), sorted(os.listdir(tmp_path))
    study = _study(tmp_path, storage="crm.db")
    line = _fails(capsys, _argv(cmd, study, tmp_path))
    assert "storage:" in line and str(other) in line and "not an optuna study database" in line, line
    assert _sha(other) == before  # not one of optuna's 25 tables created in it
    assert sorted(os.listdir(tmp_path)) == sorted([*listing, study.name])  # no journal, no export


@pytest.mark.parametrize("cmd", READERS, ids=lambda c: c[0])
def test_a_missing_study_file_is_one_line_not_a_new_database(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], cmd: list[str]) -> None:
    study = _study(tmp_path, storage="nowhere/guard.db")
    if cmd[0] == "plan":  # plan does without a stored study: it predicts from the study file alone
        assert main(_argv(cmd, study, tmp_path)) == 0
    else:
        line = _fails(capsys, _argv(cmd, study, tmp_path))
        assert "no study 'guard'" in line and str(tmp_path / "nowhere" / "guard.db") in line, line
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("storage", ["sqlite:///:memory:", "sqlite://"])
@pytest.mark.parametrize("cmd", [["status"], ["best"], ["run", "--no-progress"]], ids=lambda c: c[0])
def test_a_database_in_memory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], cmd: list[str],
                                         storage: str) -> None:
    line = _fails(capsys, _argv(cmd, _study(tmp_path, storage=storage), tmp_path))
    assert line.startswith("error: storage:") and "in memory" in line and repr(storage) in line, line


# ---- a broken store -----------------------------------------------------------------------------

def _finished_copy(finished_spec: Any, tmp_path: Path) -> tuple[Path, Path]:
    """The finished results study, copied into one plain SQLite file (no WAL) beside a study file."""
    src = sqlite3.connect(finished_spec.storage_url.removeprefix("sqlite:///"))
    db = tmp_path / "study.db"
    dst = sqlite3.connect(db)
    src.backup(dst)
    dst.execute("PRAGMA journal_mode=DELETE")
    src.close()
    dst.close()
    study = tmp_path / "study.yaml"
    data = yaml.safe_load(Path(finished_spec.source_path).read_text())
    data["executor"] = {"kind": "inline"}  # `run` stops at the storage: no Ray instance to start for that
    study.write_text(yaml.safe_dump(data))
    return study, db


@pytest.mark.parametrize("cmd", [["status"], ["best"], ["export", "-o", "{tmp}/t.csv"], ["run", "--no-progress"]],
                         ids=lambda c: c[0])
def test_a_damaged_page_is_one_line(finished_spec: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    cmd: list[str]) -> None:
    study, db = _finished_copy(finished_spec, tmp_path)
    con = sqlite3.connect(db)
    page = con.execute("PRAGMA page_size").fetchone()[0]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'trial_user_attributes'").fetchone()[0]
    con.close()
    with db.open("r+b") as fh:  # one page of the trials' attributes overwritten: the b-tree is malformed
        fh.seek((root - 1) * page)
        fh.write(b"\xff" * page)
    line = _fails(capsys, _argv(cmd, study, tmp_path))
    assert line.startswith("error: storage:") and "is damaged" in line and str(db) in line, line


@pytest.mark.parametrize("cmd", READERS, ids=lambda c: c[0])
def test_a_reader_leaves_no_wal_or_shm_beside_a_study_database(finished_spec: Any, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str],
                                                              cmd: list[str]) -> None:
    """A study's database is in WAL mode; a read-only connection to it made -wal and -shm beside it and left
    them there. With no writer connected (neither file there) a reader opens it immutable: nothing created."""
    study, db = _finished_copy(finished_spec, tmp_path)
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")  # as run leaves it (autotune.study.storage.retry.sqlite_fast_commits)
    con.close()
    before = _sha(db)
    assert not list(tmp_path.glob("study.db-*"))
    assert main(_argv(cmd, study, tmp_path)) == 0, capsys.readouterr().err
    assert not list(tmp_path.glob("study.db-*")), list(tmp_path.glob("study.db-*"))
    assert _sha(db) == before


def test_a_reader_beside_a_live_writer_reads_its_log_and_leaves_nothing(finished_spec: Any, tmp_path: Path) -> None:
    """While a writer is connected (its -wal and -shm there), a reader opens plainly read-only and sees what the
    writer committed to the log; once the writer closes, SQLite removes both as before."""
    study, db = _finished_copy(finished_spec, tmp_path)
    writer = sqlite3.connect(db)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")  # the committed change stays in the log
    writer.execute("UPDATE studies SET study_name = 'renamed-in-the-log'")
    writer.commit()
    assert (tmp_path / "study.db-wal").stat().st_size > 0
    root = Path(__file__).resolve().parents[1]
    try:  # a process of its own, as the command runs: its connections end with it
        proc = subprocess.run([sys.executable, "-m", "autotune", "status", str(study)], capture_output=True,  # noqa: S603
                              text=True, timeout=60, check=False, env={**os.environ, "PYTHONPATH": str(root)})
        assert proc.returncode == 2, proc.stderr
        assert "no study" in proc.stderr  # the study's name is only in the log now, and the reader read it
    finally:
        writer.close()
    assert not list(tmp_path.glob("study.db-*"))


def test_a_write_refused_by_the_database_is_one_line_at_once(finished_spec: Any, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """What SQLite answers for a read-only file ("attempt to write a readonly database") is not an
    outage: no retry (the backoff's sleep is never called), one line naming the storage."""
    import optuna

    from autotune.errors import ConfigError
    from autotune.storage_check import read_only_url
    from autotune.study.storage.opening import StudyStorage
    from autotune.study.storage.retry import Backoff

    _, db = _finished_copy(finished_spec, tmp_path)

    def no_sleep(self: Backoff, *_a: Any, **_k: Any) -> None:
        raise AssertionError("a read-only database was retried")

    monkeypatch.setattr(Backoff, "__init__", _with_sleep(Backoff.__init__, no_sleep))
    storage = StudyStorage(read_only_url(db), skip_table_creation=True, where="study.db")
    study = optuna.load_study(study_name=finished_spec.name, storage=storage)
    with pytest.raises(ConfigError, match=r"^storage: study.db is read-only: .*\(readonly database\)$"):
        study.set_user_attr("x", 1)


def _with_sleep(init: Any, sleep: Any) -> Any:
    def patched(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.sleep = lambda s: sleep(self, s)
    return patched


def _make_read_only(path: Path) -> bool:
    """Make ``path`` unwritable for this process (chmod; chattr +i for root); False if impossible here."""
    path.chmod(0o444)
    if os.access(path, os.W_OK):
        subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
    return not os.access(path, os.W_OK)


def test_run_on_a_read_only_database_is_one_line_before_anything_starts(
        finished_spec: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study, db = _finished_copy(finished_spec, tmp_path)
    if not _make_read_only(db):
        pytest.skip("cannot make a file read-only here (root without chattr)")
    try:
        before = _sha(db)
        line = _fails(capsys, ["run", str(study), "--no-progress"])
        assert line == f"error: storage: {db} is read-only: the study records every trial there " \
                       "(make it writable, or point storage at another file)"
        assert _sha(db) == before and not (tmp_path / "runs").exists()
        assert main(["status", str(study)]) == 0  # reading it needs no write
    finally:
        subprocess.run(["chattr", "-i", str(db)], capture_output=True, check=False)
        db.chmod(0o644)


# ---- passwords ------------------------------------------------------------------------------------

def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("cmd", [["status"], ["best"], ["run", "--no-progress"]], ids=lambda c: c[0])
def test_a_storage_password_is_in_no_message(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
                                             cmd: list[str]) -> None:
    monkeypatch.setenv("AUTOTUNE_STORAGE_RETRY_S", "0.5")  # nothing listens there: no need to wait for it
    url = f"postgresql+psycopg://bob:hunter2pw@127.0.0.1:{_closed_port()}/studies"
    line = _fails(capsys, _argv(cmd, _study(tmp_path, storage=url), tmp_path), code=1)
    assert "bob:***@127.0.0.1" in line and "hunter2pw" not in line, line
    assert "hunter2pw" not in caplog.text


@pytest.mark.parametrize("cmd", [["status"], ["plan"], ["doctor"], ["run", "--no-progress"]], ids=lambda c: c[0])
@pytest.mark.parametrize("userinfo", ["bob:PGPW%2Fx/y@SECRETPW", "bob:p@SECRETPW", "bob:a@b@SECRETPW"])
def test_a_raw_at_in_a_storage_password_is_refused_without_a_fragment(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch, cmd: list[str], userinfo: str) -> None:
    """SQLAlchemy ends the password at the first '@', autotune's rule at the last: the rest became the host
    the driver named (failed to resolve host 'SECRETPW@127.0.0.1')."""
    monkeypatch.setenv("AUTOTUNE_STORAGE_RETRY_S", "0.5")
    url = f"postgresql+psycopg://{userinfo}@127.0.0.1:{_closed_port()}/studies"
    line = _fails(capsys, _argv(cmd, _study(tmp_path, storage=url), tmp_path))
    assert line.startswith("error: ") and "storage: " in line and "%40" in line, line
    assert "SECRETPW" not in line and "PGPW" not in line and "SECRETPW" not in caplog.text, line


@pytest.mark.parametrize("url", ["postgresql+psycopg://bob:p%40ss@127.0.0.1:1/db?options=a@b",
                                 "sqlite:////tmp/a@b/c@d.db", "postgresql+psycopg://127.0.0.1:1/db@x"])
def test_an_at_outside_the_userinfo_is_accepted(url: str) -> None:
    from autotune.spec import storage_url_problem

    assert storage_url_problem(url) is None


def test_a_driver_error_shows_no_piece_of_the_password_however_it_was_split() -> None:
    from autotune.study.storage.retry import _why, url_secrets

    url = "postgresql://bob:PGPW%2Fx/y@SECRETPW@127.0.0.1:1/db"
    exc = RuntimeError("failed to resolve host 'SECRETPW@127.0.0.1' as bob with PGPW/x/y")
    line = _why(exc, url_secrets(url))
    assert "SECRETPW" not in line and "PGPW" not in line, line
    assert "127.0.0.1" in line


def test_the_doctor_probe_hides_the_password_as_the_driver_read_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlalchemy as sa

    from autotune.study.storage import retry

    def create_engine(url: str, **_kw: Any) -> Any:
        raise RuntimeError(f"could not connect to {sa.engine.make_url(url).host!r} as password "
                           f"{sa.engine.make_url(url).password!r}")

    monkeypatch.setattr(sa, "create_engine", create_engine)
    err = retry.probe_storage("postgresql://bob:PGPW%2Fx/y@SECRETPW@127.0.0.1:1/db")
    assert err is not None and "SECRETPW" not in err and "PGPW" not in err, err


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-5", "abc", "NaN"])
def test_a_storage_retry_deadline_that_is_not_seconds_is_the_default(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: str) -> None:
    """nan was min(nan, 15) = nan: the opening deadline never passed, run hung forever."""
    from autotune.study.storage.retry import DEFAULT_DEADLINE_S, deadline_s

    monkeypatch.setenv("AUTOTUNE_STORAGE_RETRY_S", value)
    assert deadline_s() == DEFAULT_DEADLINE_S
    assert "AUTOTUNE_STORAGE_RETRY_S" in caplog.text
    monkeypatch.setenv("AUTOTUNE_STORAGE_RETRY_S", "2.5")
    assert deadline_s() == 2.5


# ---- Ray ----------------------------------------------------------------------------------------

@pytest.fixture
def no_ray_init(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")

    def init(*_a: Any, **_k: Any) -> None:
        raise AssertionError("ray.init was handed an address that could have been refused first")

    monkeypatch.setattr(ray, "init", init)


@pytest.mark.usefixtures("no_ray_init")
@pytest.mark.parametrize(("address", "says"), [
    ("no-such-host.invalid:6379", "does not resolve"),
    ("head.example:ray", "not a Ray address"),
    ("10.0.0.1", "not a Ray address"),
])
def test_a_ray_address_that_cannot_be_used_is_one_line_before_ray(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], address: str, says: str) -> None:
    study = _study(tmp_path, executor={"kind": "ray", "address": address})
    line = _fails(capsys, ["run", str(study), "--no-progress"])
    assert line.startswith("error: executor.address:") and says in line and repr(address) in line, line
    assert not (tmp_path / "guard.db").exists() and not (tmp_path / "runs").exists()


@pytest.mark.usefixtures("no_ray_init")
def test_ray_address_from_the_environment_is_named_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "no-such-host.invalid:6379")
    line = _fails(capsys, ["run", str(_study(tmp_path, executor={"kind": "ray"})), "--no-progress"])
    assert line.startswith("error: RAY_ADDRESS: host 'no-such-host.invalid' does not resolve"), line


@pytest.mark.usefixtures("no_ray_init")
def test_a_ray_head_that_does_not_answer_is_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    study = _study(tmp_path, executor={"kind": "ray", "address": address})
    line = _fails(capsys, ["run", str(study), "--no-progress"], code=1)
    assert f"no Ray head answers at {address!r}" in line, line
    assert not (tmp_path / "guard.db").exists()


# ---- binding beyond loopback ---------------------------------------------------------------

@pytest.mark.parametrize("cmd", [["plan"], ["run", "--no-progress"], ["status"]], ids=lambda c: c[0])
def test_server_host_beyond_loopback_needs_the_study_to_say_so(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               cmd: list[str]) -> None:
    server = {"backend": "sim", "model_path": str(MODELS / "kimi-k2-class"), "tp_size": 8, "host": "0.0.0.0"}
    line = _fails(capsys, _argv(cmd, _study(tmp_path, server=server), tmp_path))
    assert "server.host: listens beyond loopback" in line and "server.expose: true" in line \
        and "(got '0.0.0.0')" in line, line


@pytest.mark.usefixtures("no_ray_init")
def test_an_exposed_study_is_warned_about_at_the_start_of_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              caplog: pytest.LogCaptureFixture) -> None:
    server = {"backend": "sim", "model_path": str(MODELS / "kimi-k2-class"), "tp_size": 8, "host": "0.0.0.0",
              "expose": True}
    # The run stops at its Ray address, after the warning: nothing is launched on 0.0.0.0 here.
    study = _study(tmp_path, server=server, executor={"kind": "ray", "address": "no-such-host.invalid:1"})
    _fails(capsys, ["run", str(study), "--no-progress"])
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("server.host '0.0.0.0' (server.expose: true)" in m and "beyond loopback" in m for m in warned), warned
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        server = {"backend": "sim", "model_path": str(MODELS / "kimi-k2-class"), "tp_size": 8, "host": host}
        assert main(["plan", str(_study(tmp_path, server=server)), "--json"]) == 0, host


def test_the_dashboard_beyond_loopback_needs_expose(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # No study was ever run here: the refusal comes before the storage is opened.
    line = _fails(capsys, ["dashboard", str(_study(tmp_path)), "--host", "0.0.0.0", "--port", "0"])
    assert line.startswith("error: --host: '0.0.0.0' listens beyond loopback") and "--expose" in line, line
    assert not (tmp_path / "guard.db").exists()


@pytest.mark.postgres
@pytest.mark.parametrize("cmd", READERS[:4], ids=lambda c: c[0])
def test_a_server_database_without_the_study_gets_no_table(
        pg: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], cmd: list[str]) -> None:
    """On PostgreSQL too, a command that only reads creates nothing: optuna's tables are not
    created in a database that lacks them (the study is just not there)."""
    import sqlalchemy as sa

    url = pg.createdb("no_study_here")
    line = _fails(capsys, _argv(cmd, _study(tmp_path, storage=url), tmp_path))
    assert line.startswith("error: name: no study 'guard' in postgresql"), line
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            assert sa.inspect(conn).get_table_names() == []
    finally:
        engine.dispose()


# ---- paths that cannot be resolved -----------------------------------------------------------

@pytest.mark.parametrize(("field", "over"), [
    ("server.model_path", {"server": {"backend": "sim", "model_path": "loopa", "tp_size": 8}}),
    ("workload.dataset_path", {"workload": {"dataset_path": "loopa", "input_len": 64, "output_len": 16,
                                            "num_prompts": 8, "concurrency": [4]}}),
    ("storage", {"storage": "loopa"}),
    ("warm_start[0]", {"warm_start": ["loopa"]}),
    ("run_dir", {"run_dir": "loopa/runs"}),
])
@pytest.mark.parametrize("cmd", [["plan"], ["status"], ["run", "--no-progress"]], ids=lambda c: c[0])
def test_a_symlink_loop_in_a_relative_path_is_one_line_naming_the_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, over: dict[str, Any], cmd: list[str]) -> None:
    """Path.resolve() raised RuntimeError('Symlink loop from ...'): a traceback, exit 1."""
    (tmp_path / "loopa").symlink_to("loopb")
    (tmp_path / "loopb").symlink_to("loopa")
    line = _fails(capsys, _argv(cmd, _study(tmp_path, **over), tmp_path))
    assert f"{field}: cannot be resolved, a symlink loop (got 'loopa" in line, line
    assert not list(tmp_path.glob("*.db")), "nothing recorded for a study that was refused"


# ---- one run per study --------------------------------------------------------------------------

def test_a_second_run_of_one_study_in_another_run_dir_is_refused(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The lock was per run directory: the same study (storage + name) with another run_dir ran twice at
    once, both launched the baseline and the budget read 4/3. And the refusal comes before the driver opens
    anything: it had made the second run directory and its empty artifacts/ folder first."""
    import psutil

    first = _study(tmp_path)
    assert main(["run", "--no-progress", str(first)]) == 0  # a finished study, its trials recorded
    capsys.readouterr()
    db = tmp_path / "guard.db"
    before = _sha(db)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:  # a live run of the study (its lock beside the database), from another run directory
        lock = Path(os.path.realpath(db)).with_name("guard.db.guard.lock")
        lock.write_text(f"{other.pid} {psutil.Process(other.pid).create_time()!r}\n")
        (tmp_path / "b").mkdir()
        second = _study(tmp_path / "b", storage=f"sqlite:///{tmp_path}/./guard.db", run_dir="runs_b", n_trials=4)
        line = _fails(capsys, ["run", "--no-progress", str(second)])
        assert f"already being run by pid {other.pid}" in line, line
        assert _sha(db) == before, "the refused run recorded nothing"
        written = [p for p in (tmp_path / "b").rglob("*") if p.name != "guard.yaml"]  # folders too
        assert not written, written
    finally:
        other.kill()
        other.wait()


def test_a_run_with_a_malformed_orchestrator_pid_finishes_its_trials(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import optuna

    monkeypatch.setenv("AUTOTUNE_ORCHESTRATOR_PID", "abc")
    assert main(["run", "--no-progress", str(_study(tmp_path))]) == 0, capsys.readouterr().err
    study = optuna.load_study(study_name="guard", storage=f"sqlite:///{tmp_path / 'guard.db'}")
    assert {t.state for t in study.trials} == {optuna.trial.TrialState.COMPLETE}
