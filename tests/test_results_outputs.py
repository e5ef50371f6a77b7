"""`export` and `report` -o: never the study's own files, never through a symlink or over a
user's file, one line (exit 2) for a path that cannot be written or a directory that is not there
(as `bench --output-file`), no temporary left behind."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from autotune.cli import main


def _copy(finished_spec, tmp_path: Path, storage: str = "study.db") -> Path:
    """The shared finished study copied into tmp_path (its storage renamed to ``storage``)."""
    src = Path(finished_spec.source_path)
    study = tmp_path / "study.yaml"
    study.write_text(src.read_text().replace("storage: study.db", f"storage: {storage}"))
    shutil.copyfile(src.parent / "study.db", tmp_path / storage)
    return study


def _one_line_exit_2(capsys, argv: list[str], *words: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, err


@pytest.mark.parametrize(("command", "storage", "target"), [
    ("report", "study.db", "study.db"),
    ("report", "study.db", "study.yaml"),
    ("report", "study.db", "study.db-wal"),  # a stale -wal beside the database would be replayed
    ("export", "study.csv", "study.csv"),  # a storage whose name has the output's suffix
])
def test_the_output_is_never_the_studys_own_file(finished_spec, tmp_path, capsys, command, storage, target):
    study = _copy(finished_spec, tmp_path, storage)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    _one_line_exit_2(capsys, [command, str(study), "-o", str(tmp_path / target)], "-o/--output", "study's own file")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_the_output_is_the_study_file_by_another_name(finished_spec, tmp_path, capsys):
    study = _copy(finished_spec, tmp_path)
    (tmp_path / "sub").mkdir()
    db = tmp_path / "study.db"
    before = db.read_bytes()
    os.link(db, tmp_path / "same.csv")  # the same inode
    _one_line_exit_2(capsys, ["export", str(study), "-o", str(tmp_path / "same.csv")], "study's own file")
    _one_line_exit_2(capsys, ["report", str(study), "-o", str(tmp_path / "sub" / ".." / "study.db")],
                     "study's own file")
    assert db.read_bytes() == before


@pytest.mark.parametrize("command", ["export", "report"])
def test_the_temporary_never_follows_a_symlink_nor_replaces_a_users_file(finished_spec, tmp_path, command):
    study = _copy(finished_spec, tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / ("t.csv" if command == "export" else "t.html")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (out_dir / (out.name + ".tmp")).symlink_to(victim)
    (out_dir / ("." + out.name + ".tmp")).write_text("mine")
    assert main([command, str(study), "-o", str(out)]) == 0
    assert victim.read_text() == "precious"
    assert (out_dir / ("." + out.name + ".tmp")).read_text() == "mine"
    assert sorted(p.name for p in out_dir.iterdir()) == sorted([out.name, out.name + ".tmp", "." + out.name + ".tmp"])
    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()  # not mkstemp's 0600
    if command == "export":
        assert len(pd.read_csv(out)) > 0


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


@pytest.mark.parametrize("command", ["export", "report"])
def test_an_output_that_cannot_be_written_is_one_line_before_any_work(finished_spec, tmp_path, capsys, command):
    study = _copy(finished_spec, tmp_path)
    name = "x.csv" if command == "export" else "x.html"
    adir = tmp_path / f"adir.{name}"
    adir.mkdir()
    afile = tmp_path / "afile"
    afile.write_text("a file")
    _one_line_exit_2(capsys, [command, str(study), "-o", str(adir)], "-o/--output", "is a directory")
    _one_line_exit_2(capsys, [command, str(study), "-o", str(afile / "deeper" / name)], "-o/--output",
                     "no directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["study.yaml", "study.db", adir.name, "afile"])
    assert list(adir.iterdir()) == []


def test_a_failed_write_leaves_the_old_output_and_no_temporary(finished_spec, tmp_path, capsys, monkeypatch):
    study = _copy(finished_spec, tmp_path)
    out = tmp_path / "t.csv"
    out.write_text("old")

    def full_disk(*_a, **_kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full_disk)
    assert main(["export", str(study), "-o", str(out)]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.db", "study.yaml", "t.csv"]


@pytest.mark.parametrize(("command", "option", "name"), [
    ("report", "-o", "r.html"), ("export", "-o", "t.csv"), ("bench", "--output-file", "runs.jsonl"),
    ("bench", "--output-details", "requests.jsonl")])
def test_a_missing_output_directory_is_refused_alike_by_every_command(finished_spec, tmp_path, capsys, command,
                                                                       option, name):
    """A directory that is not there is a typo to name (one line, exit 2, before any work), not a tree to
    make: report and export used to create it while bench refused."""
    study = _copy(finished_spec, tmp_path)
    out = tmp_path / "resutls" / "b" / name
    argv = ([command, str(study), option, str(out)] if command != "bench"
            else ["bench", "--url", "http://127.0.0.1:9", "--num-prompts", "1", option, str(out)])
    field = "-o/--output" if command != "bench" else option
    _one_line_exit_2(capsys, argv, f"{field}: no directory {str(out.parent)!r} to write it in (got {str(out)!r})")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.db", "study.yaml"]
