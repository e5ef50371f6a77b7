"""``autotune calibrate --from-log`` holds the log against the study before storing anything.

The public report: a QwQ-32B TP-4 log from an L4 node was stored into a Kimi-K2 TP-8 study without a word.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from autotune.cli import main

MODELS = Path(__file__).resolve().parents[1] / "studies" / "models"

# QwQ-32B on 4 x L4 (24 GiB cards, 0.5.9 wording): another architecture, another TP size, another GPU.
L4_QWQ_LOG = "\n".join(
    ["[2026-03-01 09:00:00] server_args=ServerArgs(model_path='Qwen/QwQ-32B', tp_size=4, dp_size=1, "
     "mem_fraction_static=0.85, chunked_prefill_size=2048)"]
    + [f"[2026-03-01 09:00:1{r} TP{r}] Load weight begin. avail mem=21.0{r} GB" for r in range(4)]
    + [f"[2026-03-01 09:02:0{r} TP{r}] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, "
       f"avail mem=5.6{r} GB, mem usage=15.40 GB." for r in range(4)]
    + [f"[2026-03-01 09:02:1{r} TP{r}] KV Cache is allocated. #tokens: 25000, K size: 1.53 GB, V size: 1.53 GB"
       for r in range(4)]
)
# Kimi-K2 class on 8 x H200, 0.5.23 wording (server_args as a dict): what the study runs.
H200_KIMI_LOG = "\n".join(
    ["[2026-03-02 10:00:00] server_args={'model_path': '/models/kimi-k2', 'tp_size': 8, 'dp_size': 1}"]
    + [f"[2026-03-02 10:00:1{r} TP{r}] Load weight begin. avail mem=138.9{r} GB" for r in range(8)]
    + [f"[2026-03-02 10:02:0{r} TP{r}] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, "
       f"avail mem=66.6{r} GB, mem usage=72.29 GB." for r in range(8)]
)


def _study(tmp_path: Path) -> Path:
    data = {"name": "kimi-h200",
            "server": {"backend": "sim", "sglang_version": "0.5.23", "model_path": str(MODELS / "kimi-k2-class"),
                       "tp_size": 8},
            "hardware": {"gpu": "h200", "num_gpus": 8, "interconnect": "nvlink"},
            "search_space": {"mem_fraction_static": {"low": 0.8, "high": 0.9, "step": 0.05}}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _plan_p(study: Path, capsys) -> dict:
    assert main(["plan", str(study), "--json", "--set", "mem_fraction_static=0.85"]) == 0
    return json.loads(capsys.readouterr().out)["candidates"][0]


def test_a_log_of_another_model_tp_and_gpu_is_refused_and_nothing_stored(tmp_path: Path, capsys) -> None:
    study, log = _study(tmp_path), tmp_path / "qwq-l4.log"
    log.write_text(L4_QWQ_LOG)
    before = _plan_p(study, capsys)
    assert main(["calibrate", str(study), "--from-log", str(log)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "Qwen2ForCausalLM" in err and "DeepseekV3ForCausalLM" in err  # both sides of each contradiction
    assert "tp_size=4" in err and "TP 8" in err
    assert "21.00 GiB" in err and "h200: 140.40 GiB" in err
    assert "nothing stored" in err and "--force" in err
    after = _plan_p(study, capsys)
    assert after["p_gib"] == pytest.approx(before["p_gib"]) and after["p_gib"] > 130  # still the capacity estimate


def test_force_stores_it_and_says_so(tmp_path: Path, capsys) -> None:
    study, log = _study(tmp_path), tmp_path / "qwq-l4.log"
    log.write_text(L4_QWQ_LOG)
    assert main(["calibrate", str(study), "--from-log", str(log), "--force"]) == 0
    out = capsys.readouterr().out
    assert "stored despite (--force): architecture: the log loaded Qwen2ForCausalLM" in out
    assert "calibration stored: P=21.0 GiB" in out and "(forced)" in out
    assert _plan_p(study, capsys)["p_gib"] == pytest.approx(21.0)


def test_a_log_of_the_study_itself_is_stored(tmp_path: Path, capsys) -> None:
    study, log = _study(tmp_path), tmp_path / "kimi-h200.log"
    log.write_text(H200_KIMI_LOG)
    assert main(["calibrate", str(study), "--from-log", str(log), "--json"]) == 0
    cal = json.loads(capsys.readouterr().out)
    assert cal["p_gib"] == pytest.approx(138.90) and cal["forced"] == []


def test_only_the_tp_size_differs(tmp_path: Path, capsys) -> None:
    study, log = _study(tmp_path), tmp_path / "kimi-tp4.log"
    log.write_text(H200_KIMI_LOG.replace("'tp_size': 8", "'tp_size': 4"))
    assert main(["calibrate", str(study), "--from-log", str(log)]) == 2
    err = capsys.readouterr().err
    assert "tp_size=4" in err and "architecture" not in err and "memory" not in err


def test_no_public_log_contradicts_its_own_models_architecture():
    """Every public log (tests/data/public_logs) names a class its own config.json may be served by."""
    import json
    from pathlib import Path

    from autotune.sglang.logparse import is_target, parse_log
    from autotune.study.log_check import same_architecture

    root = Path(__file__).parent / "data" / "public_logs"
    checked = 0
    for entry in json.loads((root / "manifest.json").read_text()):
        if not entry.get("config"):
            continue
        study = json.loads((root / entry["config"]).read_text())["architectures"][0]
        events = parse_log((root / entry["id"] / "server.log").read_text())
        logged = next((e.values["architecture"] for e in events if e.kind == "weights_loaded"
                       and e.values.get("architecture") and is_target(e)), None)
        if logged:
            checked += 1
            assert same_architecture(logged, study), entry["id"]
    assert checked >= 10
    assert not same_architecture("Qwen2ForCausalLM", "DeepseekV3ForCausalLM")  # the public QwQ-into-Kimi case


@pytest.mark.parametrize("key,digits", [("tp_size", 5000), ("tp_size", 4000), ("dp_size", 5000), ("tp_size", 14)])
def test_a_logged_size_past_2_40_is_one_line_naming_the_log_and_the_key(tmp_path: Path, capsys, key: str,
                                                                       digits: int) -> None:
    """5,000 digits were a ValueError traceback, 4,000 an OverflowError in the weights arithmetic (exit 1)."""
    study, log = _study(tmp_path), tmp_path / "kimi-h200.log"
    log.write_text(H200_KIMI_LOG.replace(f"'{key}': {8 if key == 'tp_size' else 1}", f"'{key}': {'9' * digits}"))
    assert main(["calibrate", str(study), "--from-log", str(log), "--force"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and len(err) < 300
    assert f"--from-log: kimi-h200.log: server_args {key}=999" in err and "2^40" in err
    assert ("..." in err) == (digits > 60)


def test_every_value_echoed_from_a_log_is_clipped(tmp_path: Path, capsys) -> None:
    """A ``type=`` of 2 MB was a 2 MB error line; a rank tag of 4,000 digits was printed whole."""
    study, log = _study(tmp_path), tmp_path / ("n" * 200 + ".log")
    log.write_text(L4_QWQ_LOG.replace("type=Qwen2ForCausalLM", "type=Qwen2" + "A" * 200_000)
                   .replace("tp_size=4, ", "").replace(" TP3]", " TP" + "9" * 4000 + "]"))
    assert main(["calibrate", str(study), "--from-log", str(log)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and len(err) < 1000
    assert "the log loaded Qwen2AAAA" in err and "AAA..." in err and "DeepseekV3ForCausalLM" in err
    assert "rank TP<an integer of about 4001 digits>" in err and "nnn..." in err
