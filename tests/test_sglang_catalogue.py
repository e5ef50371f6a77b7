"""GPU catalogue, version parsing, and model profiles of the shipped stand-ins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.sglang.hardware.gpus import GPUS, get_gpu
from autotune.sglang.models.profile import load_model_profile
from autotune.sglang.models.sizing import weight_bytes_per_gpu
from autotune.sglang.versions import parse_version

MODELS = Path(__file__).resolve().parent.parent / "studies" / "models"


@pytest.mark.parametrize(
    "name,mib",
    [("h100", 81559), ("h200", 143771), ("b200", 183359), ("rtx-pro-6000", 97887),
     ("a100-80", 81920), ("a100-40", 40960), ("l40s", 46068), ("rtx-4090", 24564)],
)
def test_gpu_memory_matches_nvidia_smi(name: str, mib: int) -> None:
    assert get_gpu(name).memory_mib == mib


def test_rtx_pro_6000_is_pcie_only_blackwell() -> None:
    g = get_gpu("RTX_PRO_6000")
    assert (g.sm, g.nvlink_gb_s, g.has_nvlink) == (120, 0.0, False)
    assert g.pcie_gb_s == pytest.approx(50.0)
    assert g.hbm_tb_s == pytest.approx(1.8)


def test_every_gpu_has_positive_figures() -> None:
    for g in GPUS.values():
        assert g.memory_mib > 20000 and (g.sm >= 80 or g.gfx.startswith("gfx9")) and g.hbm_tb_s > 0 and g.bf16_tflops > 0 and g.pcie_gb_s > 0


def test_unknown_gpu_lists_known_names() -> None:
    with pytest.raises(ConfigError, match=r"gpu: unknown GPU kind 'v100'.*h100.*rtx-pro-6000"):
        get_gpu("v100")


@pytest.mark.parametrize(
    "text,regime,dialect",
    [("0.5.3", "A", "classic"), ("0.5.9", "A", "classic"), ("0.5.13", "A", "classic"),
     ("0.5.14", "B", "classic"), ("0.5.19", "B", "classic"), ("0.5.23", "B", "modern"),
     ("v0.5.23", "B", "modern"), ("0.5.9.post1", "A", "classic"), ("0.6.0", "B", "modern")],
)
def test_version_regime_and_dialect(text: str, regime: str, dialect: str) -> None:
    v = parse_version(text)
    assert (v.regime, v.dialect) == (regime, dialect)


def test_versions_are_ordered_numerically_not_lexically() -> None:
    vs = [parse_version(s) for s in ["0.5.23", "0.5.9", "0.5.14", "0.5.10rc0", "0.5.10", "0.5.9.post1"]]
    assert [str(v) for v in sorted(vs)] == ["0.5.9", "0.5.9.post1", "0.5.10rc0", "0.5.10", "0.5.14", "0.5.23"]
    assert parse_version("0.5.9") == "0.5.9"
    assert parse_version("0.5.23").at_least("0.5.19")


@pytest.mark.parametrize("bad", ["", "latest", "0", "0.5.x", "five"])
def test_unparseable_version_is_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="sglang_version: cannot parse"):
        parse_version(bad)


def test_kimi_stand_in_is_mla_moe_int4_with_seed_size() -> None:
    p = load_model_profile(MODELS / "kimi-k2-class")
    assert p.architecture == "DeepseekV3ForCausalLM" and p.is_mla
    assert (p.num_layers, p.hidden_size, p.kv_lora_rank, p.qk_rope_head_dim) == (61, 7168, 512, 64)
    assert (p.num_experts, p.num_experts_per_tok, p.moe_intermediate_size) == (384, 8, 2048)
    assert (p.vocab_size, p.context_len) == (163840, 131072)
    assert p.quant_method == "compressed-tensors" and p.weight_bits == 4
    assert p.weight_bytes == 602554818888
    # the seed case's 72.04 GiB per GPU: 1/8 of the split weights + MLA's replicated a-projections and routers
    assert weight_bytes_per_gpu(p, 8) / 2**30 == pytest.approx(72.04, abs=1e-9)
    assert p.family == "mla" and p.confidence == "exact" and p.weight_source == "index"
    assert 0 < p.active_param_bytes < p.weight_bytes / 5
    assert p.has_mtp and not p.weight_bytes_estimated


def test_llama_and_qwen_are_gqa_dense() -> None:
    llama = load_model_profile(MODELS / "llama-3.1-70b-class")
    qwen = load_model_profile(MODELS / "qwen3-32b-class")
    assert (llama.num_layers, llama.num_attention_heads, llama.num_kv_heads, llama.head_dim) == (80, 64, 8, 128)
    assert (qwen.num_layers, qwen.hidden_size, qwen.num_kv_heads, qwen.head_dim) == (64, 5120, 8, 128)
    assert llama.weight_bytes == pytest.approx(141.1e9, rel=0.01)
    assert qwen.weight_bytes == pytest.approx(65.5e9, rel=0.01)
    assert not llama.is_mla and not llama.is_moe and llama.active_param_bytes == llama.weight_bytes


def test_eagle3_draft_has_one_layer() -> None:
    d = load_model_profile(MODELS / "kimi-k2-class-eagle3")
    assert d.architecture == "LlamaForCausalLMEagle3" and d.is_draft
    assert (d.num_layers, d.hidden_size) == (1, 7168)
    assert d.weight_bytes == pytest.approx(3e9, rel=0.1)


def test_stand_ins_hold_only_config_and_index() -> None:
    tiny = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"]
    for d in MODELS.iterdir():
        if d.is_dir():
            # The tiny models real SGLang serves on CPU (--load-format dummy) carry a tokenizer instead.
            want = tiny if d.name.endswith("-cpu") else ["config.json", "model.safetensors.index.json"]
            assert sorted(p.name for p in d.iterdir()) == want, d


def test_weight_size_estimated_without_index(tmp_path: Path) -> None:
    cfg = json.loads((MODELS / "llama-3.1-70b-class" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    p = load_model_profile(tmp_path)
    assert p.weight_bytes_estimated
    assert p.weight_bytes == pytest.approx(141.1e9, rel=0.05)


def test_deepseek_v3_mtp_layers_and_fp8_kv_flag(tmp_path: Path) -> None:
    cfg = json.loads((MODELS / "kimi-k2-class" / "config.json").read_text())
    cfg["num_nextn_predict_layers"] = 1
    cfg["quantization_config"] = {"quant_method": "fp8", "kv_cache_quant_algo": "FP8"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    p = load_model_profile(tmp_path)
    assert p.num_nextn_predict_layers == 1 and p.kv_cache_quant_fp8 and p.weight_bits == 8


def test_missing_directory_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match=f"model_path: {missing} is not a directory"):
        load_model_profile(missing)
    with pytest.raises(ConfigError, match=r"no config.json"):
        load_model_profile(tmp_path)


def test_bad_config_json_names_the_path(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=str(tmp_path)):
        load_model_profile(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(ConfigError, match="lacks 'num_hidden_layers'"):
        load_model_profile(tmp_path)
