"""Before launching real SGLang: its version and its own parser are asked first.

A stand-in ``sglang`` package on PYTHONPATH plays the installed SGLang (its parser
knows only a few flags), so this runs everywhere; the real parsers of 0.5.9 and
0.5.23 are exercised by tests/test_sglang_real_parser.py where SGLang is installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from autotune.cli import main
from autotune.errors import ConfigError
from autotune.sglang.flags.installed import check_version, probe

pytestmark = pytest.mark.usefixtures("cli_signal_handlers")  # `autotune run` in this process sets handlers

ROOT = Path(__file__).resolve().parents[1]

FAKE_ARGS = '''
class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        for flag in ("--model-path", "--host"):
            parser.add_argument(flag)
        for flag in ("--tp-size", "--port", "--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"):
            parser.add_argument(flag, type=int)
        parser.add_argument("--mem-fraction-static", type=float)
'''


@pytest.fixture
def fake_sglang(tmp_path: Path, monkeypatch) -> Path:
    pkg = tmp_path / "site" / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "0.5.23"\n')
    (pkg / "srt" / "__init__.py").write_text("")
    (pkg / "srt" / "server_args.py").write_text(FAKE_ARGS)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    return tmp_path / "site"


def test_probe_and_refusals(fake_sglang: Path):
    inst = probe(sys.executable)
    assert inst is not None and inst.version == "0.5.23"
    errors = inst.refusals([["--model-path", "m", "--cuda-graph-max-bs", "128"],
                            ["--model-path", "m", "--cuda-graph-max-bs-decode", "128"]])
    assert "ambiguous option: --cuda-graph-max-bs" in errors[0]
    assert errors[1] is None
    with pytest.raises(ConfigError, match="server.sglang_version: the study says '0.5.9'"):
        check_version(inst, "0.5.9")
    check_version(inst, "0.5.23")


def test_check_version_reads_the_releases_spelling() -> None:
    from autotune.sglang.flags.installed import InstalledSglang

    with pytest.raises(ConfigError, match="server.sglang_version: the study says '0.5.21'"):
        check_version(InstalledSglang(python="python", version="0.5.22"), "0.5.21")  # --attn-dp-size from 0.5.22
    with pytest.raises(ConfigError, match="the study says '0.5.13'"):
        check_version(InstalledSglang(python="python", version="0.5.14"), "0.5.13")  # -decode spelling, regime B
    check_version(InstalledSglang(python="python", version="0.5.19"), "0.5.14")  # same spelling and regime


def test_probe_without_sglang_is_none(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # nothing called sglang there
    if probe(sys.executable) is not None:
        pytest.skip("a real SGLang is importable here")
    assert probe(sys.executable) is None


def _study(tmp_path: Path, version: str, space: dict) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({
        "name": "real", "n_trials": 2, "executor": {"kind": "inline"},
        "server": {"backend": "sglang", "sglang_version": version,
                   "model_path": str(ROOT / "studies" / "models" / "qwen3-32b-class"), "tp_size": 1},
        "hardware": {"gpu": "h100", "num_gpus": 1},
        "search_space": space,
    }))
    return path


def test_run_refuses_a_study_of_another_dialect_before_any_launch(fake_sglang: Path, tmp_path: Path, capsys):
    study = _study(tmp_path, "0.5.9", {"cuda_graph_max_bs": {"choices": [64]}})
    assert main(["run", str(study)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "server.sglang_version" in err and "0.5.23" in err
    assert not list((tmp_path / "runs").glob("real/trials/*")), "nothing was launched"


def test_run_without_sglang_is_refused(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    if probe(sys.executable) is not None:
        pytest.skip("a real SGLang is importable here")
    study = _study(tmp_path, "0.5.23", {"cuda_graph_max_bs": {"choices": [64]}})
    assert main(["run", str(study)]) == 2
    assert "cannot import SGLang" in capsys.readouterr().err


def test_run_without_sglang_starts_nothing_and_writes_nothing(tmp_path: Path, caplog, capsys):
    """`run` of a Ray study whose server.python cannot import SGLang started a local Ray
    instance, made the run directory and wrote the study's database (an empty study) before
    refusing it. Now: refused first, exit 2, no .db, no runs/, no Ray."""
    no_sglang = tmp_path / "python-without-sglang"
    no_sglang.write_text("#!/bin/sh\necho 'ModuleNotFoundError: sglang' >&2\nexit 1\n")
    no_sglang.chmod(0o755)
    study = _study(tmp_path, "0.5.23", {"cuda_graph_max_bs": {"choices": [64]}})
    data = yaml.safe_load(study.read_text())
    data["server"]["python"] = str(no_sglang)
    data["executor"] = {"kind": "ray"}
    study.write_text(yaml.safe_dump(data))
    before = set(tmp_path.iterdir())
    with caplog.at_level("INFO"):
        assert main(["run", str(study)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: server.backend: 'sglang' but") and str(no_sglang) in err, err
    assert set(tmp_path.iterdir()) == before, sorted(p.name for p in set(tmp_path.iterdir()) - before)
    assert not list(tmp_path.glob("*.db")) and not (tmp_path / "runs").exists()
    assert "Ray" not in caplog.text, caplog.text


def test_a_knob_the_installed_parser_lacks_is_pruned_before_launch(fake_sglang: Path, tmp_path: Path):
    """The stand-in parser has no --disable-custom-all-reduce: that candidate never launches."""
    from autotune.spec import load_study_spec
    from autotune.study.candidates import Candidates
    from autotune.study.prediction import Predictor
    from autotune.study.storage.opening import open_study

    spec = load_study_spec(_study(tmp_path, "0.5.23", {"custom_allreduce": {"choices": [False]}}))
    # TP 2 on NVLink: custom allreduce matters there (at TP 1 the space would drop it before the study)
    spec = spec.model_copy(update={"server": spec.server.model_copy(update={"tp_size": 2}),
                                   "hardware": spec.hardware.model_copy(update={"num_gpus": 2})})
    study = open_study(spec)
    candidates = Candidates(spec, study, Predictor(spec, lambda: None))
    candidates.preflight()
    study.enqueue_trial({"custom_allreduce": False})
    trial = study.ask()
    cand = candidates.candidate(trial)
    assert cand.params == {"custom_allreduce": False}
    assert cand.invalid and "refuses this launch" in cand.invalid and "--disable-custom-all-reduce" in cand.invalid
