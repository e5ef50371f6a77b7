"""An ``uncertain`` that says how uncertain (issue 36): where a family's pool rule varies by build or release
(DeepSeek V4: the SWA ratio a build sets, 0.5.23's request-cap mode, the platform's layouts), the prediction
carries the range its KV tokens can be in, ``autotune plan`` shows it, and no candidate is pruned on it until a
launch has shown the pool."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.sglang.config import ServerConfig
from autotune.sglang.memory import Calibration, predict
from autotune.sglang.models import ModelProfile, load_model_profile
from autotune.sglang.profiles.dsv4 import dsv4_coef

V4_PRO = Path(__file__).resolve().parent / "data" / "public_logs" / "inferencex-2128-dsv4pro-fp8-h200-tp8"


@pytest.fixture(scope="module")
def v4() -> ModelProfile:
    model = load_model_profile(V4_PRO)
    assert model.family == "dsv4"
    return model


def _cfg(**kw: object) -> ServerConfig:
    return ServerConfig(model_path="x", tp_size=8, mem_fraction_static=0.9, **kw)  # type: ignore[arg-type]


def test_no_ratio_given_spans_the_builds_default_and_is_never_pruned(v4: ModelProfile) -> None:
    pred = predict(v4, "b300", _cfg(), version="0.5.23")
    assert pred.kv_tokens > 0 and pred.kv_range
    assert pred.kv_tokens_high == pred.kv_tokens  # 0.5.23's own rule at 0.1
    ratios = v4.kv_layout.compress_ratios  # type: ignore[union-attr]
    assert pred.kv_tokens_low is not None
    assert pred.kv_tokens_low / pred.kv_tokens == pytest.approx(dsv4_coef(ratios, 0.1) / dsv4_coef(ratios, 0.8),
                                                                rel=0.01)  # SGLang's generic 0.8
    # P and A measured, no launch of this build's pool yet: a verdict on the tokens is never a prune
    cal = Calibration(p_gib=pred.p_gib, a_gib=pred.a_gib, tp_size=8, mem_fraction_static=0.9, f_is_auto=False)
    need = pred.kv_tokens + 1
    calibrated = predict(v4, "b300", _cfg(), version="0.5.23", calibration=cal, min_tokens=need)
    assert calibrated.verdict == "too_few_tokens" and calibrated.uncertain and not calibrated.should_prune
    assert "0.1 for DeepSeek V4 only when it is not given" in " ".join(calibrated.notes)


def test_a_launch_of_the_build_pins_the_range(v4: ModelProfile) -> None:
    """The first launch's pool (its KV tokens at the same TP) replaces the rule: a build that ran at 0.8
    predicts its own pool from then on, and the range is gone."""
    nominal = predict(v4, "b300", _cfg(), version="0.5.23")
    observed = nominal.kv_tokens_low  # the build turned out to size the SWA pool at 0.8
    cal = Calibration(p_gib=nominal.p_gib, a_gib=nominal.a_gib, tp_size=8, mem_fraction_static=0.9,
                      f_is_auto=False, kv_tokens=observed, graph_gib=2.0, cuda_graph_max_bs=nominal.cuda_graph_max_bs)
    after = predict(v4, "b300", _cfg(), version="0.5.23", calibration=cal)
    assert not after.kv_range and after.kv_tokens_low == after.kv_tokens_high == after.kv_tokens
    assert after.kv_tokens == pytest.approx(observed, abs=256)  # one DeepSeek V4 page
    assert "learned from the calibration launch" in " ".join(after.notes)


def test_a_given_ratio_is_the_rule_and_rocm_leaves_the_low_end_unknown(v4: ModelProfile) -> None:
    """The issue's case: a ROCm build at --swa-full-tokens-ratio 0.8. The ratio given is read (it was ignored,
    sizing the pool at 0.1: 4 x too large), and on ROCm the layout is the platform's: low end unknown."""
    given = predict(v4, "b300", _cfg(extra_args=("--swa-full-tokens-ratio", "0.8")), version="0.5.23")
    default = predict(v4, "b300", _cfg(), version="0.5.23")
    assert given.cell_bytes == int(dsv4_coef(v4.kv_layout.compress_ratios, 0.8))  # type: ignore[union-attr]
    assert default.kv_tokens / given.kv_tokens > 3.5
    assert not given.kv_range  # CUDA, the ratio given: 0.5.23's rule as the code has it
    rocm = predict(v4, "mi355x", _cfg(extra_args=("--swa-full-tokens-ratio", "0.8")), version="0.5.23")
    assert rocm.kv_range and rocm.kv_tokens_low is None and rocm.kv_tokens_high == rocm.kv_tokens
    assert rocm.uncertain and not replace(rocm, verdict="too_few_tokens").should_prune


def test_request_cap_mode_leaves_the_top_unknown(v4: ModelProfile) -> None:
    pred = predict(v4, "b300", _cfg(max_running_requests=64), version="0.5.23")
    assert pred.kv_tokens_high is None and pred.kv_tokens_low is not None
    assert "request cap" in " ".join(pred.kv_range)


def test_other_families_carry_no_range() -> None:
    qwen = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 36, "intermediate_size": 12288,
            "vocab_size": 151936}
    from autotune.sglang.models import profile_from_config

    pred = predict(profile_from_config(qwen), "h100", ServerConfig(model_path="x", mem_fraction_static=0.9),
                   version="0.5.23")
    assert not pred.kv_range and pred.kv_tokens_low == pred.kv_tokens_high == pred.kv_tokens


def test_plan_shows_the_range_and_the_design_counts_its_low_end(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from autotune.cli import main
    from autotune.study.initial_design import _tokens

    model_dir = tmp_path / "v4"
    model_dir.mkdir()
    (model_dir / "config.json").write_text((V4_PRO / "config.json").read_text())
    study = {"name": "v4", "server": {"backend": "sim", "sglang_version": "0.5.23", "model_path": str(model_dir),
                                      "tp_size": 8},
             "hardware": {"gpu": "b300", "num_gpus": 8},
             "search_space": {"mem_fraction_static": {"low": 0.85, "high": 0.9, "step": 0.05}}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    assert main(["plan", str(path), "--set", "mem_fraction_static=0.9"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "mem_fraction_static=0.9" in line)
    assert ".." in row.split("|")[0]  # "1,704,704 (419,... ..1,704,704)": the range beside the tokens
    assert main(["plan", str(path), "--json", "--set", "mem_fraction_static=0.9"]) == 0
    doc = json.loads(capsys.readouterr().out)["candidates"][0]
    assert doc["kv_tokens_low"] < doc["kv_tokens"] == doc["kv_tokens_high"] and doc["uncertain"]
    assert _tokens(doc) == doc["server_kv_tokens"] * doc["kv_tokens_low"] // doc["kv_tokens"]
