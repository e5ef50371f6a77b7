"""Real-SGLang environments without launching anything: install plans, the CPU launch, tiny models, prompt ids.

The venv itself and the engine are exercised by tests/test_real_sglang_*.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autotune.cli import main
from autotune.errors import ConfigError
from autotune.load.prompts import synthetic_prompts, token_id_range
from autotune.load.spec import LoadSpec
from autotune.sglang.flags.argv import render_argv
from autotune.sglang.hardware.cpu import CPU_ENV, on_cpu
from autotune.sglang.knobs.config import ServerConfig
from autotune.sglang_env import install
from autotune.sglang_env.packages import install_steps
from autotune.sglang_env.resolve import launch_env, launch_python
from autotune.sglang_env.tiny_model import SPECIALS, vocabulary, write_tiny_model
from autotune.space import to_config
from autotune.spec import load_study_spec, parse_study

REPO = Path(__file__).resolve().parents[1]
STUDY = REPO / "studies" / "real-cpu-tiny.yaml"


def test_cpu_install_is_sglang_without_deps_then_the_proven_list() -> None:
    steps = install_steps("0.5.23", "cpu")
    assert steps[0] == ["--no-deps", "sglang==0.5.23"]
    assert "torch==2.14.1" in steps[1] and "transformers==5.19.0" in steps[1] and "datasets" in steps[1]
    assert "transformers==4.57.1" in install_steps("0.5.9", "cpu")[1]
    assert install_steps("0.5.23", "cuda") == [["sglang==0.5.23", "datasets"]]
    with pytest.raises(ConfigError, match=r"--version: '0.4.0' has no proven CPU package set"):
        install_steps("0.4.0", "cpu")
    with pytest.raises(ConfigError, match=r"--device: 'tpu'"):
        install_steps("0.5.23", "tpu")


def test_a_good_marker_is_reused_and_a_refused_prefix_is_not_touched(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = tmp_path / "v"
    env = install.SglangEnv(prefix, "0.5.23", "cpu")
    (prefix / "lib").mkdir(parents=True)
    (prefix / install.MARKER).write_text(json.dumps(install._marker(env)))
    (prefix / "lib" / install.MARKER).write_text(json.dumps({"stand_in": install.stand_in_digest()}))
    monkeypatch.setattr(install, "check", lambda e, **_: None)
    monkeypatch.setattr(install, "_run", lambda *a, **k: pytest.fail("a good venv must not be rebuilt"))
    got, built = install.ensure("0.5.23", "cpu", prefix)
    assert built is False and got.prefix == prefix and got.env == CPU_ENV

    other = tmp_path / "not-a-venv"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(install.EnvBuildError, match="exists and is not a venv"):
        install.ensure("0.5.23", "cpu", other)
    assert (other / "keep.txt").read_text() == "mine"


def test_default_prefix_is_a_cache_outside_the_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    assert install.default_prefix("0.5.9", "cpu") == tmp_path / "sglang" / "0.5.9-cpu"


def test_cpu_launch_renders_the_cpu_flags_and_keeps_the_studys_own() -> None:
    cfg = on_cpu(ServerConfig(model_path="/m", max_running_requests=8, extra_args=("--sleep-on-idle", "--x", "1")),
                 "0.5.23")
    assert cfg.attention_backend == "torch_native" and cfg.max_total_tokens == 8192
    assert cfg.extra_args == ("--device", "cpu", "--disable-overlap-schedule", "--sleep-on-idle", "--x", "1")
    searched = on_cpu(ServerConfig(model_path="/m", max_total_tokens=2048), "0.5.9")
    assert searched.max_total_tokens == 2048
    # autotune's own flag table accepts the CPU launch in both dialects (it refused --sleep-on-idle).
    for version in ("0.5.9", "0.5.23"):
        argv = render_argv(on_cpu(ServerConfig(model_path="/m", load_format="dummy"), version), version)
        assert argv.count("--sleep-on-idle") == 1 and "--max-total-tokens" in argv


def test_study_device_cpu_launches_the_cached_venv_with_the_env(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    spec = load_study_spec(STUDY)
    assert launch_python(spec) == str(tmp_path / "sglang" / "0.5.23-cpu" / "bin" / "python")
    assert launch_env(spec) == CPU_ENV
    base = to_config(spec, {}, baseline=True)  # even SGLang's defaults need the CPU flags
    assert "--device" in base.extra_args and base.max_total_tokens == 8192
    tuned = to_config(spec, {"max_total_tokens": 4096, "max_running_requests": 4})
    assert tuned.max_total_tokens == 4096 and tuned.max_running_requests == 4
    own = spec.model_copy(update={"server": spec.server.model_copy(update={"python": "/opt/py", "env": {"A": "1"}})})
    assert launch_python(own) == "/opt/py" and launch_env(own) == {**CPU_ENV, "A": "1"}


def test_device_cpu_needs_the_sglang_backend() -> None:
    with pytest.raises(ConfigError, match=r"server: device 'cpu' runs real SGLang on CPU: set backend: sglang"):
        parse_study({"name": "x", "server": {"backend": "sim", "device": "cpu", "model_path": "m"},
                     "hardware": {"gpu": "cpu"}})


def test_tiny_model_files_and_vocabulary(tmp_path: Path) -> None:
    out = write_tiny_model(tmp_path / "m", "qwen3", vocab_size=300, num_layers=3)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3ForCausalLM"] and cfg["vocab_size"] == 300
    assert cfg["num_hidden_layers"] == 3 and cfg["head_dim"] * cfg["num_attention_heads"] == cfg["hidden_size"]
    tok = json.loads((out / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    assert len(vocab) == 300 and len(set(vocab.values())) == 300 and max(vocab.values()) == 299
    assert [t["content"] for t in tok["added_tokens"]] == list(SPECIALS)
    assert tok["post_processor"]["single"][0] == {"SpecialToken": {"id": "<s>", "type_id": 0}}
    tc = json.loads((out / "tokenizer_config.json").read_text())
    assert tc["bos_token"] == "<s>" and "add_generation_prompt" in tc["chat_template"]
    assert len(set(vocabulary(2000))) == 2000
    with pytest.raises(ConfigError, match="--arch"):
        write_tiny_model(tmp_path / "x", "gpt2")


def test_cli_writes_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sglang-env", "model", str(tmp_path / "m"), "--vocab-size", "256"]) == 0
    assert json.loads((tmp_path / "m" / "config.json").read_text())["vocab_size"] == 256
    assert "tiny llama" in capsys.readouterr().out


def test_prompt_ids_stay_inside_the_models_vocabulary_clear_of_specials(tmp_path: Path) -> None:
    assert token_id_range(REPO / "studies" / "models" / "tiny-llama-cpu") == (4, 384)
    assert token_id_range(REPO / "studies" / "models" / "kimi-k2-class") == (1000, 30000)  # unchanged for big ones
    assert token_id_range(tmp_path) is None  # no config: the default range
    # Specials at the top (Qwen style): the run below them.
    m = tmp_path / "q"
    m.mkdir()
    (m / "config.json").write_text(json.dumps({"vocab_size": 600, "eos_token_id": [598, 599]}))
    (m / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {f"w{i}": i for i in range(590)}},
                                                   "added_tokens": [{"id": i, "special": True}
                                                                    for i in range(590, 600)]}))
    assert token_id_range(m) == (0, 590)
    spec = LoadSpec(backend="sglang", num_prompts=50, input_len=64, token_id_range=(4, 384))
    ids = np.concatenate([p.input_ids for p in synthetic_prompts(spec, 50)])
    assert ids.min() >= 4 and ids.max() < 384
    with pytest.raises(ValueError):
        LoadSpec(backend="sglang", num_prompts=1, token_id_range=(10, 10))
