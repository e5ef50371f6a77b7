"""``autotune plan`` and ``autotune calibrate``: the seed vectors through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from autotune.cli import main

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "studies" / "models"

# Real-looking 0.5.9 log of the seed node: every rank's lines, noise in between.
SEED_LOG = "\n".join(
    [f"[2026-02-10 10:00:0{r} TP{r}] Init torch distributed ends. mem usage=1.{r} GB" for r in range(8)]
    + ["some unrelated warning line", "Loading safetensors checkpoint shards: 100% 64/64"]
    + [f"[2026-02-10 10:01:0{r} TP{r}] Load weight begin. avail mem={94.00 + r * 0.01:.2f} GB" for r in range(8)]
    + [f"[2026-02-10 10:05:0{r} TP{r}] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, "
       f"avail mem={21.71 + r * 0.02:.2f} GB, mem usage=72.29 GB." for r in range(8)]
    + [f"[2026-02-10 10:05:1{r} TP{r}] KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB" for r in range(8)]
    + ["[2026-02-10 10:06:00 TP0] Capture cuda graph end. Time elapsed: 41.2 s. mem usage=0.88 GB. avail mem=9.80 GB."]
)


def _study(tmp_path: Path, calibration: dict | None = None) -> Path:
    data = {
        "name": "plan",
        "server": {"backend": "sim", "sglang_version": "0.5.9", "model_path": str(MODELS / "kimi-k2-class"),
                   "tp_size": 8},
        "hardware": {"gpu": "rtx-pro-6000", "num_gpus": 8, "interconnect": "pcie"},
        "search_space": {"mem_fraction_static": {"low": 0.5, "high": 0.95, "step": 0.05},
                         "cuda_graph_max_bs": {"choices": [128, 512]}},
    }
    if calibration:
        data["calibration"] = calibration
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _rows(capsys, argv: list[str]) -> list[dict]:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)["candidates"]


def test_plan_seed_vectors(tmp_path: Path, capsys):
    study = _study(tmp_path, {"p_gib": 94.0, "a_gib": 21.71})
    rows = _rows(capsys, ["plan", str(study), "--json", "--set", "mem_fraction_static=0.88,0.55"])
    assert [r["mem_fraction_static"] for r in rows] == [0.88, 0.55]
    fits, oom = rows
    assert fits["verdict"] == "fits" and fits["kv_tokens"] == 159_368
    assert oom["verdict"] == "kv_oom" and oom["min_viable_mem_fraction"] == pytest.approx(0.769)
    assert "rest = 21.71 - 94.00 x (1 - 0.55) = -20.59 GiB < 0" in oom["reason"]
    for r in rows:
        for key in ("reason", "kv_tokens", "kv_gib", "p_gib", "a_gib", "slack_gib", "min_viable_mem_fraction"):
            assert key in r
        assert r["command"][1:3] == ["-m", "sglang.launch_server"]
        assert "--mem-fraction-static" in r["command"]
    assert not (tmp_path / "plan.db").exists(), "plan launches nothing and stores nothing"


def test_plan_grid_covers_every_candidate(tmp_path: Path, capsys):
    study = _study(tmp_path, {"p_gib": 94.0, "a_gib": 21.71})
    rows = _rows(capsys, ["plan", str(study), "--json"])
    assert len(rows) == 10 * 2  # 0.50..0.95 step 0.05 x two graph sizes
    verdicts = {r["mem_fraction_static"]: r["verdict"] for r in rows}
    assert verdicts[0.75] == "kv_oom" and verdicts[0.8] == "fits"
    assert {tuple(r["command"][r["command"].index("--cuda-graph-max-bs") + 1 :][:1]) for r in rows} == {
        ("128",),
        ("512",),
    }


def test_plan_bad_set_is_one_line_exit_2(tmp_path: Path, capsys):
    study = _study(tmp_path)
    assert main(["plan", str(study), "--set", "mem_fraction_static=lots"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "mem_fraction_static" in err and "lots" in err
    assert main(["plan", str(study), "--set", "warp_drive=1"]) == 2
    assert "warp_drive" in capsys.readouterr().err


def test_calibrate_from_log_then_plan_uses_it(tmp_path: Path, capsys):
    study = _study(tmp_path)
    log = tmp_path / "server.log"
    log.write_text(SEED_LOG)
    assert main(["calibrate", str(study), "--from-log", str(log), "--json"]) == 0
    cal = json.loads(capsys.readouterr().out)
    # P and A are the minimum over ranks, as SGLang takes them.
    assert cal["p_gib"] == pytest.approx(94.00) and cal["a_gib"] == pytest.approx(21.71)
    assert cal["kv_tokens"] == 159_277 and cal["graph_gib"] == pytest.approx(0.88)
    rows = _rows(capsys, ["plan", str(study), "--json", "--set", "mem_fraction_static=0.88"])
    assert rows[0]["p_gib"] == pytest.approx(94.0) and rows[0]["kv_tokens"] == 159_368


def test_calibrate_never_builds_the_sampler_nor_walks_the_grid(tmp_path: Path, capsys, monkeypatch):
    """Storing a calibration opens the study's storage only: the sampler (``sampler.kind: auto``
    sizes the grid to choose one) is the driver's, so the search space costs ``calibrate`` nothing."""
    from autotune import space
    from autotune.spec import load_study_spec
    from autotune.study.search.samplers import make_sampler
    from autotune.study.storage.opening import open_study

    def no_grid(spec):
        raise AssertionError("the grid was enumerated")

    monkeypatch.setattr(space, "iter_grid", no_grid)
    monkeypatch.setattr(space, "grid_size", no_grid)  # counted, not listed, since issue 34: no walk at all
    study = _study(tmp_path)
    with pytest.raises(AssertionError, match="enumerated"):  # what building the sampler would do
        make_sampler(load_study_spec(study))
    log = tmp_path / "server.log"
    log.write_text(SEED_LOG)
    assert main(["calibrate", str(study), "--from-log", str(log), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_tokens"] == 159_277
    assert open_study(load_study_spec(study), create=False).user_attrs["calibration"]["kv_tokens"] == 159_277


def test_calibrate_rejects_a_log_without_memory_lines(tmp_path: Path, capsys):
    study = _study(tmp_path)
    log = tmp_path / "server.log"
    log.write_text("nothing to see\n")
    assert main(["calibrate", str(study), "--from-log", str(log)]) == 2
    assert "--from-log" in capsys.readouterr().err


def _fp8_study(tmp_path: Path, name: str, *, knob: str | None, extra: list[str]) -> Path:
    study = _study(tmp_path, {"p_gib": 94.0, "a_gib": 21.71})
    data = yaml.safe_load(study.read_text())
    data["server"]["extra_args"] = extra
    if knob is not None:
        data["search_space"]["kv_cache_dtype"] = {"choices": [knob]}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_plan_reads_kv_cache_dtype_from_extra_args_like_the_knob(tmp_path: Path, capsys):
    """The predictor reads the final argv: an fp8 cache given through extra_args is an fp8 cache."""
    knob = _fp8_study(tmp_path, "knob", knob="fp8_e4m3", extra=[])
    extra = _fp8_study(tmp_path, "extra", knob=None, extra=["--kv-cache-dtype", "fp8_e4m3"])
    plain = _fp8_study(tmp_path, "plain", knob=None, extra=[])
    (by_knob,) = _rows(capsys, ["plan", str(knob), "--json", "--set", "mem_fraction_static=0.88",
                                "--set", "kv_cache_dtype=fp8_e4m3"])
    (by_extra,) = _rows(capsys, ["plan", str(extra), "--json", "--set", "mem_fraction_static=0.88"])
    (bf16,) = _rows(capsys, ["plan", str(plain), "--json", "--set", "mem_fraction_static=0.88"])
    assert by_extra["kv_tokens"] == pytest.approx(by_knob["kv_tokens"], rel=1e-3)
    assert by_extra["kv_tokens"] == pytest.approx(2 * bf16["kv_tokens"], rel=0.01)  # 1-byte cell, not 2


def test_plan_refuses_extra_args_that_contradict_a_knob(tmp_path: Path, capsys):
    study = _fp8_study(tmp_path, "both", knob="fp8_e5m2", extra=["--kv-cache-dtype", "fp8_e4m3"])
    assert main(["plan", str(study), "--json", "--set", "mem_fraction_static=0.88",
                 "--set", "kv_cache_dtype=fp8_e5m2"]) == 2
    err = capsys.readouterr().err
    assert "server.extra_args" in err and "kv_cache_dtype" in err and "fp8_e5m2" in err


LOGS = ROOT / "tests" / "data" / "logs"


@pytest.mark.parametrize(("log", "wording", "kv_tokens"), [
    ("eagle-0.5.9.log", "0.5.9", 159_277), ("eagle-0.5.23.log", "0.5.23", 141_056),
])
def test_calibrate_an_eagle_log_takes_the_targets_lines(tmp_path: Path, capsys, log: str, wording: str,
                                                        kv_tokens: int):
    """The draft runner prints the same Load weight / KV lines after the target's: they must not be taken for P, A."""
    study = _study(tmp_path)
    assert main(["calibrate", str(study), "--from-log", str(LOGS / log), "--json"]) == 0
    cal = json.loads(capsys.readouterr().out)
    assert cal["p_gib"] == pytest.approx(94.00) and cal["a_gib"] == pytest.approx(21.71)
    assert cal["kv_tokens"] == kv_tokens and cal["log_wording"] == wording


def test_calibrate_a_partial_excerpt_gives_what_it_shows(tmp_path: Path, capsys):
    study = _study(tmp_path)
    assert main(["calibrate", str(study), "--from-log", str(LOGS / "excerpt-load-begin-kv.log"), "--json"]) == 0
    cal = json.loads(capsys.readouterr().out)
    assert cal["p_gib"] == pytest.approx(94.00) and cal["kv_tokens"] == 159_277
    assert cal["a_gib"] is None and cal["graph_gib"] is None and cal["log_wording"] == "0.5.9"
