"""Malformed study files: exit code 2, one line naming the field and the value, nothing stored."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from autotune.cli import main
from autotune.spec import load_study_spec, parse_study

pytestmark = pytest.mark.usefixtures("cli_signal_handlers")  # `autotune run` in this process sets handlers

GOOD = {
    "name": "t",
    "n_trials": 3,
    "server": {"backend": "sim", "sglang_version": "0.5.9", "model_path": "m", "tp_size": 8},
    "hardware": {"gpu": "rtx-pro-6000", "num_gpus": 8, "interconnect": "pcie"},
    "search_space": {
        "mem_fraction_static": {"low": 0.5, "high": 0.95, "step": 0.01},
        "cuda_graph_max_bs": {"choices": [64, 128]},
        "custom_allreduce": {"choices": [True, False]},
        "speculative": {"algorithm": {"choices": ["none", "EAGLE3"]}, "draft_model_path": "d",
                        "num_steps": {"low": 1, "high": 3}},
    },
    "workload": {"input_len": 128, "output_len": 32, "num_prompts": 10, "concurrency": [4]},
    "objective": {"metric": "output_throughput", "direction": "maximize"},
    "sampler": {"kind": "tpe", "seed": 1},
}


def _set(d: dict, dotted: str, value: object) -> dict:
    d = copy.deepcopy(d)
    keys = dotted.split(".")
    cur = d
    for k in keys[:-1]:
        cur = cur[k]
    if value is _DELETE:
        del cur[keys[-1]]
    else:
        cur[keys[-1]] = value
    return d


_DELETE = object()

# (mutation path, value, text the one-line error must contain)
CASES = [
    ("bogus_key", 1, "bogus_key"),
    ("server.bogus", 1, "server.bogus"),
    ("name", "has space", "name"),
    ("n_trials", 0, "n_trials"),
    ("n_trials", "many", "n_trials"),
    ("server.backend", "vllm", "server.backend"),
    ("server.sglang_version", "latest", "server.sglang_version"),
    ("server.tp_size", 0, "server.tp_size"),
    ("server.model_path", _DELETE, "server.model_path"),
    ("hardware.interconnect", "infiniband", "hardware.interconnect"),
    ("hardware.num_gpus", 4, "hardware.num_gpus"),  # tp 8 needs 8
    ("search_space.mem_fraction_static.low", 0.99, "search_space.mem_fraction_static"),
    ("search_space.mem_fraction_static.high", 1.5, "search_space.mem_fraction_static"),
    ("search_space.mem_fraction_static.step", -0.1, "search_space.mem_fraction_static"),
    ("search_space.cuda_graph_max_bs.choices", [], "search_space.cuda_graph_max_bs.choices"),
    ("search_space.cuda_graph_max_bs.choices", [0, 64], "search_space.cuda_graph_max_bs.choices"),
    ("search_space.custom_allreduce.choices", ["maybe"], "search_space.custom_allreduce.choices"),
    ("search_space.speculative.algorithm.choices", ["MEDUSA"], "search_space.speculative.algorithm"),
    ("search_space.speculative.draft_model_path", _DELETE, "search_space.speculative"),
    ("search_space.speculative.num_steps.low", 9, "search_space.speculative.num_steps"),
    ("workload.concurrency", [0], "workload.concurrency"),
    ("workload.input_len", -5, "workload.input_len"),
    ("objective.metric", "tokens", "objective.metric"),
    ("objective.direction", "up", "objective.direction"),
    ("sampler.kind", "cmaes", "sampler.kind"),
    ("server.extra_args", ["--port", "1"], "server.extra_args"),
]


@pytest.mark.parametrize("path,value,needle", CASES, ids=[c[0] + "=" + repr(c[1])[:20] for c in CASES])
def test_malformed_study_exits_2_with_one_line(tmp_path: Path, capsys, path, value, needle):
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(_set(GOOD, path, value)))
    code = main(["run", str(study)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert needle in err, err
    assert "Traceback" not in err
    # The value received is named (except for a missing key).
    if value is not _DELETE and not isinstance(value, list) and path != "hardware.num_gpus":
        assert repr(value)[:10] in err or str(value) in err, err
    assert not list(tmp_path.glob("*.db")), "nothing may be stored for a bad study file"


def test_yaml_syntax_error_is_one_line(tmp_path: Path, capsys):
    study = tmp_path / "study.yaml"
    study.write_text("name: [unclosed\n")
    assert main(["status", str(study)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "line" in err


def test_not_a_mapping_and_missing_file(tmp_path: Path, capsys):
    study = tmp_path / "study.yaml"
    study.write_text("- just\n- a list\n")
    assert main(["run", str(study)]) == 2
    assert "mapping" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    assert "not found" in capsys.readouterr().err


def test_bad_file_does_not_touch_an_existing_study(tmp_path: Path, capsys):
    db = tmp_path / "t.db"
    db.write_bytes(b"sentinel")
    bad = _set(GOOD, "n_trials", -1)
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(bad))
    assert main(["run", str(study)]) == 2
    assert db.read_bytes() == b"sentinel"


def test_good_study_resolves_paths_relative_to_the_file(tmp_path: Path):
    study = tmp_path / "sub" / "study.yaml"
    study.parent.mkdir()
    study.write_text(yaml.safe_dump(GOOD))
    spec = load_study_spec(study)
    assert spec.storage_url == f"sqlite:///{study.parent.resolve() / 't.db'}"
    assert spec.resolve_path("m") == str(study.parent.resolve() / "m")
    assert spec.run_path == study.parent.resolve() / "runs" / "t"


def test_every_shipped_study_validates():
    studies = sorted(Path(__file__).resolve().parents[1].joinpath("studies").glob("*.yaml"))
    assert studies, "studies/ ships example study files"
    for path in studies:
        spec = load_study_spec(path)
        assert Path(spec.resolve_path(spec.server.model_path)).is_dir(), path


def test_parse_study_rejects_unknown_keys_directly():
    with pytest.raises(Exception) as exc:
        parse_study({**GOOD, "extra": 1})
    assert "extra" in str(exc.value)
