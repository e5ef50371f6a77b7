"""The one line a user mistake gets says what was wrong with what the user wrote: no field that is
not at fault, no value twice, no hint cut mid-word, no "bad value" without why."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune.cli import main

pytestmark = pytest.mark.usefixtures("cli_signal_handlers")  # `autotune run` in this process may set handlers

ROOT = Path(__file__).resolve().parents[1]


def _study(tmp_path: Path, **server: object) -> Path:
    data = {
        "name": "lines",
        "server": {"backend": "sim", "sglang_version": "0.5.9",
                   "model_path": str(ROOT / "studies" / "models" / "qwen3-32b-class"), "tp_size": 1, **server},
        "hardware": {"gpu": "h100", "num_gpus": 1},
        "search_space": {"mem_fraction_static": {"low": 0.8, "high": 0.9, "step": 0.05}},
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_a_release_too_old_is_the_versions_fault_not_extra_args(tmp_path: Path, capsys) -> None:
    line = _line(capsys, ["plan", str(_study(tmp_path, sglang_version="0.4.0"))])
    assert line.startswith("error: server.sglang_version: 0.4.0 is older than 0.5.9"), line
    assert "extra_args" not in line, line


def test_a_value_the_validator_named_is_not_named_again(tmp_path: Path, capsys) -> None:
    study = _study(tmp_path, sglang_version="latest")
    line = _line(capsys, ["plan", str(study)])
    assert line == f"error: {study}: server.sglang_version: must look like 0.5.9, got 'latest'", line


def test_an_unknown_gpus_hint_is_whole(tmp_path: Path, capsys) -> None:
    study = _study(tmp_path)
    study.write_text(study.read_text().replace("gpu: h100", "gpu: voodoo-9000"))
    line = _line(capsys, ["plan", str(study)])
    assert "(describe it: hardware.memory_mib, hbm_tb_s, bf16_tflops; or gpu: auto on the node)" in line, line
    assert "..." not in line and line.endswith("rtx-pro-6000, cpu (got 'voodoo-9000')"), line


@pytest.mark.parametrize(("value", "why"), [
    ("mem_fraction_static=1.7", "'1.7' (a fraction of GPU memory: must be > 0 and <= 1)"),
    ("mem_fraction_static=lots", "'lots' (must be a number)"),
    ("cuda_graph_max_bs=0", "'0' (must be > 0 and <= 2147483647)"),
    ("cuda_graph_max_bs=1.5", "'1.5' (must be a whole number)"),
    ("custom_allreduce=maybe", "'maybe' (must be true or false, 1 or 0, on or off, yes or no)"),
])
def test_a_bad_set_value_says_why(tmp_path: Path, capsys, value: str, why: str) -> None:
    line = _line(capsys, ["plan", str(_study(tmp_path)), "--set", value])
    assert line == f"error: --set: bad value for {value.partition('=')[0]}: {why}", line


@pytest.mark.parametrize("storage", [":memory:", "bad/:memory:", "sqlite:///:memory:"])
@pytest.mark.parametrize("command", ["plan", "run", "status"])
def test_a_memory_database_shows_what_the_study_says(tmp_path: Path, capsys, storage: str, command: str) -> None:
    study = _study(tmp_path)
    study.write_text(study.read_text() + f"storage: '{storage}'\n")
    line = _line(capsys, [command, str(study)])
    assert line.startswith("error: storage: a database in memory") and line.endswith(f"(got {storage!r})"), line
    assert not list(tmp_path.rglob("*.db"))


@pytest.mark.parametrize(("where", "line_no"), [("name: lines\n", 2), ("  tp_size: 1\n", 4)])
def test_a_key_written_twice_is_named_with_its_line(tmp_path: Path, capsys, where: str, line_no: int) -> None:
    """safe_load keeps the last of two equal keys silently; a study file must not."""
    study = _study(tmp_path)
    lines = study.read_text().splitlines(keepends=True)
    at = lines.index(where) + 1
    key = where.strip().partition(":")[0]
    study.write_text("".join(lines[:at] + [where] + lines[at:]))
    line = _line(capsys, ["plan", str(study)])
    assert line == f"error: {study}: line {at + 1}: duplicate key '{key}'", line


def test_a_merge_key_may_still_be_overridden(tmp_path: Path, capsys) -> None:
    study = _study(tmp_path)
    study.write_text("defaults: &d {tp_size: 2}\n" + study.read_text().replace("server:\n", "server:\n  <<: *d\n"))
    from autotune.safe_yaml import load_yaml

    assert load_yaml(study.read_text(), "study.yaml")["server"]["tp_size"] == 1


def test_the_shipped_yaml_files_have_no_key_twice() -> None:
    from autotune.safe_yaml import load_yaml

    files = [p for d in ("studies", "benchmarks", "tests/data") for p in (ROOT / d).rglob("*.yaml")]
    assert len(files) > 10
    for path in files:
        load_yaml(path.read_text(), str(path))  # raises ConfigError on a duplicate key
