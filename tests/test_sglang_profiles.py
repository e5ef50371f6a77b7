"""Per-family memory profiles against SGLang 0.5.23's arithmetic (each rule's SGLang file and lines are
cited in autotune/sglang/models/)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ConfigError
from autotune.sglang.memory.predictor import cell_size_bytes
from autotune.sglang.models.dsv4 import dsv4_coef, dsv4_fixed_bytes
from autotune.sglang.models.mamba import MambaKnobs, mamba_pool, state_bytes_per_request
from autotune.sglang.models.profile import load_model_profile, profile_from_config
from autotune.sglang.models.quant import MXFP4, NVFP4, detect_quant
from autotune.sglang.models.safetensors import read_header
from autotune.sglang.models.sizing import kv_reserved_bytes, weight_bytes_per_gpu

DATA = Path(__file__).resolve().parent / "data" / "models"
GIB = 2**30


def _cell(cfg: dict[str, Any], tp: int = 1, kv: str = "auto", sm: int = 90) -> int:
    return cell_size_bytes(profile_from_config(cfg), tp_size=tp, kv_cache_dtype=kv, version="0.5.23", gpu_sm=sm)


QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 36, "intermediate_size": 12288,
            "vocab_size": 151936, "torch_dtype": "bfloat16"}


def test_gqa_cell_and_kv_heads_replicated_past_tp() -> None:
    assert _cell(QWEN3_8B) == 147456  # 8 x 256 x 36 x 2: the reference's B200 log check
    assert _cell(QWEN3_8B, tp=8) == 147456 // 8
    assert _cell(QWEN3_8B, tp=16) == 147456 // 8  # one head per rank, replicated
    assert _cell(QWEN3_8B, kv="fp8_e4m3") == 147456 // 2


def test_gemma3_is_full_attention_on_every_layer() -> None:
    cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "vision_config": {"hidden_size": 1152, "num_hidden_layers": 27, "intermediate_size": 4304},
           "text_config": {"hidden_size": 5376, "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
                           "num_hidden_layers": 62, "sliding_window": 1024, "vocab_size": 262208, "intermediate_size": 21504}}
    p = profile_from_config(cfg)
    assert p.family == "mha" and p.confidence == "derived" and p.vision_weight_bytes > 0
    assert _cell(cfg, tp=2) == 8 * 256 * 62 * 2


def test_mla_kimi_k25_through_text_config_not_divided_by_tp() -> None:
    p = load_model_profile(DATA / "kimi-k2.5")
    assert p.architecture == "KimiK25ForConditionalGeneration" and p.family == "mla" and not p.is_unknown
    for tp in (1, 8):
        assert cell_size_bytes(p, tp_size=tp, version="0.5.23") == (512 + 64) * 61 * 2 == 70272
    assert cell_size_bytes(p, tp_size=8, kv_cache_dtype="fp8_e4m3", version="0.5.23") == 35136


def test_kimi_k25_nested_quantization_config_is_read() -> None:
    p = load_model_profile(DATA / "kimi-k2.5")
    assert p.quant_method == "compressed-tensors" and p.weight_bits == 4
    # routed experts int4 g32 (0.5625 B a weight), the rest bf16: about the 595 GB checkpoint (554 GiB)
    assert p.weight_bytes / GIB == pytest.approx(554, rel=0.02)
    # real 8 x H200 servers log about 74 GiB per GPU ("Load weight end ... mem usage")
    assert weight_bytes_per_gpu(p, 8) / GIB == pytest.approx(74, rel=0.10)
    top_level = json.loads((DATA / "kimi-k2.5" / "config.json").read_text())
    dropped = dict(top_level, text_config={k: v for k, v in top_level["text_config"].items()
                                           if k != "quantization_config"})
    assert profile_from_config(dropped).weight_bytes > 3 * p.weight_bytes  # what main predicted (239 GiB/GPU)


def _v32(**extra: Any) -> dict[str, Any]:
    return {"architectures": ["DeepseekV32ForCausalLM"], "hidden_size": 7168, "num_attention_heads": 128,
            "num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
            "v_head_dim": 128, "q_lora_rank": 1536, "n_routed_experts": 256, "num_experts_per_tok": 8,
            "moe_intermediate_size": 2048, "intermediate_size": 18432, "first_k_dense_replace": 3,
            "n_shared_experts": 1, "vocab_size": 129280, "index_topk": 2048, "index_head_dim": 128,
            "index_n_heads": 64, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
            **extra}


def test_dsa_cell_with_indexer_fp8_from_blackwell_bf16_on_hopper() -> None:
    assert profile_from_config(_v32()).family == "dsa"
    assert _cell(_v32(), tp=8, sm=100) == (656 + 132) * 61 == 48068
    assert _cell(_v32(), tp=8, sm=90) == (1152 + 132) * 61 == 78324
    assert _cell(_v32(), tp=8, sm=90, kv="fp8_e4m3") == 48068
    no_index = {k: v for k, v in _v32().items() if k != "index_topk"}
    assert profile_from_config(no_index).family == "mla"  # an MLA arch is DSA only with index_topk


def test_deepseek_fp8_weights_per_gpu_follow_the_source() -> None:
    cfg = _v32(architectures=["DeepseekV3ForCausalLM"])
    cfg.pop("index_topk")
    p = profile_from_config(cfg)
    h, q_lora, heads = 7168, 1536, 128
    fp8 = 1 + 4 / 16384
    # ReplicatedLinear fused_qkv_a_proj_with_mqa on every rank, in FP8, and the router (bf16) on MoE layers
    whole = 61 * (h * q_lora + h * (512 + 64)) * fp8 + 58 * h * 256 * 2
    assert p.replicated_weight_bytes == pytest.approx(whole, rel=1e-6)
    assert p.post_load_weight_bytes == 61 * 512 * heads * 256 * 2  # bf16 w_kc / w_vc
    per8 = weight_bytes_per_gpu(p, 8)
    assert per8 == pytest.approx((p.weight_bytes - whole) / 8 + whole + p.post_load_weight_bytes / 8, rel=1e-9)
    assert per8 / GIB == pytest.approx(671e9 / 8 / GIB, rel=0.06)  # the 671B FP8 checkpoint's order


GPT_OSS_120B = {"architectures": ["GptOssForCausalLM"], "hidden_size": 2880, "num_attention_heads": 64,
                "num_key_value_heads": 8, "head_dim": 64, "num_hidden_layers": 36, "sliding_window": 128,
                "layer_types": ["sliding_attention", "full_attention"] * 18, "num_local_experts": 128,
                "num_experts_per_tok": 4, "intermediate_size": 2880, "vocab_size": 201088,
                "quantization_config": {"quant_method": "mxfp4",
                                        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                                   "model.embed_tokens", "lm_head"]}}


def test_hybrid_swa_cell_with_ratio_and_mxfp4_experts() -> None:
    p = profile_from_config(GPT_OSS_120B)
    assert p.family == "swa" and p.kv_layout is not None and (p.kv_layout.full_layers, p.kv_layout.swa_layers) == (18, 18)
    assert _cell(GPT_OSS_120B) == int(36864 + 0.8 * 36864) == 66355
    q = detect_quant(GPT_OSS_120B)
    assert q.component_bytes("experts", 2) == MXFP4 == 0.53125 and q.component_bytes("attention", 2) == 2
    assert p.weight_bytes / GIB == pytest.approx(60.8, rel=0.05)  # the 120B MXFP4 checkpoint (~65 GB)


QWEN3_NEXT = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
              "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "num_hidden_layers": 48,
              "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
              "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_value_head_dim": 128,
              "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
              "shared_expert_intermediate_size": 512, "intermediate_size": 5120, "vocab_size": 151936}


def test_mamba_state_comes_out_of_the_budget_before_the_pool() -> None:
    p = profile_from_config(QWEN3_NEXT)
    lay = p.kv_layout
    assert p.family == "mamba" and lay is not None and lay.mamba is not None
    assert (lay.full_layers, lay.mamba.layers) == (12, 36)
    assert state_bytes_per_request(lay.mamba, 1) == 77266944  # SGLang 0.5.23 srt/configs/mamba_utils.py's state shapes, TP 1
    assert state_bytes_per_request(lay.mamba, 4) == 77266944 // 4
    assert _cell(QWEN3_NEXT) == 2 * 512 * 12 * 2  # attention layers only
    rest = 40 * GIB
    reserved = kv_reserved_bytes(p, rest, tp=1)
    s = 77266944
    assert reserved == ((rest * 0.9 / 1.9 - s) // s + 1) * s == mamba_pool(lay.mamba, 1, rest, MambaKnobs()).reserved_bytes
    assert (rest - reserved) / rest == pytest.approx(1 / 1.9, abs=0.01)  # KV gets about rest / 1.9


def test_qwen35_multimodal_mamba_state_and_nemotron_h_pattern() -> None:
    text = {k: v for k, v in QWEN3_NEXT.items() if k != "architectures"}
    text.update(hidden_size=4096, num_hidden_layers=60, linear_num_value_heads=64, num_attention_heads=32)
    cfg = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "text_config": text,
           "vision_config": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "out_hidden_size": 4096}}
    p = profile_from_config(cfg)
    assert p.family == "mamba" and p.kv_layout is not None and p.kv_layout.mamba is not None
    assert state_bytes_per_request(p.kv_layout.mamba, 1) == 192061440
    pattern = "M-M-M-M*-" * 4 + "M-M-M-M-"
    nem = {"architectures": ["NemotronHForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 52, "hybrid_override_pattern": pattern,
           "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
           "intermediate_size": 21504, "vocab_size": 131072}
    n = profile_from_config(nem)
    assert n.num_layers == len(pattern) and n.kv_layout is not None and n.kv_layout.mamba is not None
    assert (n.kv_layout.full_layers, n.kv_layout.mamba.layers) == (4, pattern.count("M"))
    per_layer = (128 * 64 + 2 * 8 * 128) * 3 * 2 + 128 * 64 * 128 * 4
    assert state_bytes_per_request(n.kv_layout.mamba, 1) == per_layer * pattern.count("M")
    assert _cell(nem) == 8 * 256 * 4 * 2


def test_deepseek_v4_compressed_pools_fp4_experts_and_page() -> None:
    ratios = [0, 0] + [4, 128] * 20 + [4]
    cfg = {"architectures": ["DeepseekV4ForCausalLM"], "hidden_size": 4096, "num_attention_heads": 64,
           "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64, "num_hidden_layers": 43,
           "q_lora_rank": 1024, "o_lora_rank": 1024, "compress_ratios": ratios, "n_routed_experts": 256,
           "num_experts_per_tok": 6, "moe_intermediate_size": 2048, "n_shared_experts": 1, "vocab_size": 129280,
           "index_topk": 512, "expert_dtype": "fp4"}
    p = profile_from_config(cfg)
    assert p.family == "dsv4" and not p.is_unknown
    c4, c128 = 21, 20
    coef = 0.1 * (585 * 43 + 8 / 256 * (4 * 512 * 4 + 4 * 128 * 4) * c4) + c4 * (585 + 132) / 4 + c128 * 864 / 128
    assert dsv4_coef(tuple(ratios)) == pytest.approx(coef)
    assert _cell(cfg, tp=8) == int(coef)
    assert kv_reserved_bytes(p, 10 * GIB, tp=8) == dsv4_fixed_bytes(tuple(ratios)) == 33152 * 4096 * c128
    assert detect_quant(cfg).component_bytes("experts", 2) == MXFP4


def test_unknown_architecture_and_quantization_say_so() -> None:
    p = profile_from_config({"architectures": ["MadeUpForCausalLM"], "hidden_size": 1024, "num_attention_heads": 8,
                             "num_hidden_layers": 4})
    assert p.is_unknown and "MadeUpForCausalLM" in p.unknown_reason and p.family == "unknown"
    kimi_linear = profile_from_config({"architectures": ["KimiLinearForCausalLM"], "hidden_size": 2304,
                                       "num_attention_heads": 32, "num_hidden_layers": 27, "kv_lora_rank": 512,
                                       "qk_rope_head_dim": 64})
    assert kimi_linear.is_unknown and kimi_linear.is_mla  # an MLA latent alone does not make KDA layers known
    q = profile_from_config(dict(QWEN3_8B, quantization_config={"quant_method": "bitnet"}))
    assert q.is_unknown and "bitnet" in q.unknown_reason


def test_modelopt_nvfp4_from_hf_quant_config(tmp_path: Path) -> None:
    cfg = dict(QWEN3_8B, architectures=["Qwen3MoeForCausalLM"], num_experts=128, num_experts_per_tok=8,
               moe_intermediate_size=768, num_hidden_layers=48)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    hf = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8",
                                                             "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]}}
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(hf))
    p = load_model_profile(tmp_path)
    q = detect_quant(cfg, None, hf)
    assert p.quant_method == "modelopt_fp4" and p.kv_cache_quant_fp8
    assert q.component_bytes("experts", 2) == NVFP4 and q.component_bytes("attention", 2) == 2
    assert q.component_bytes("lm_head", 2) == 2
    plain = profile_from_config(cfg)
    assert p.weight_bytes < 0.4 * plain.weight_bytes


def test_nested_int4_ignore_patterns() -> None:
    text = json.loads((DATA / "kimi-k2.5" / "config.json").read_text())["text_config"]
    q = detect_quant({"architectures": ["KimiK25ForConditionalGeneration"]}, text, num_layers=61)
    assert q.method == "compressed-tensors" and q.bits == 4
    assert {k for k in q.ignored if ":" not in k} == {"attention", "shared_experts", "dense_mlp", "lm_head"}
    assert all(all(flags) for flags in q.ignored.values())
    assert q.component_bytes("experts", 2) == 0.5 + 2 / 32


def _write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> int:
    sizes = {"BF16": 2, "F8_E4M3": 1, "F32": 4, "I32": 4}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)
    return offset


def test_safetensors_headers_give_exact_sizes_without_reading_tensors(tmp_path: Path) -> None:
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64, "num_attention_heads": 2,
           "num_hidden_layers": 1, "kv_lora_rank": 32, "qk_rope_head_dim": 16, "qk_nope_head_dim": 16,
           "v_head_dim": 16, "q_lora_rank": 24, "vocab_size": 100, "intermediate_size": 128,
           "num_nextn_predict_layers": 1}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    total = _write_safetensors(tmp_path / "model-00001-of-00001.safetensors", {
        "model.embed_tokens.weight": ("BF16", [100, 64]),
        "model.layers.0.self_attn.q_a_proj.weight": ("F8_E4M3", [24, 64]),
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight": ("F8_E4M3", [48, 64]),
        "model.layers.0.self_attn.o_proj.weight": ("F8_E4M3", [64, 32]),
        "model.layers.0.self_attn.o_proj.weight_scale_inv": ("F32", [1, 1]),
        "model.layers.0.mlp.down_proj.weight": ("BF16", [64, 128]),
        "model.layers.1.mlp.down_proj.weight": ("BF16", [64, 128]),  # the MTP layer: not loaded
        "lm_head.weight": ("BF16", [100, 64]),
    })
    infos = {t.name: t for t in read_header(tmp_path / "model-00001-of-00001.safetensors")}
    assert infos["model.layers.0.self_attn.q_a_proj.weight"].dtype == "F8_E4M3"
    assert infos["model.layers.0.self_attn.q_a_proj.weight"].shape == (24, 64)
    assert infos["lm_head.weight"].nbytes == 100 * 64 * 2
    p = load_model_profile(tmp_path)
    assert p.weight_source == "headers" and p.confidence == "exact"
    assert p.weight_bytes == total - 64 * 128 * 2
    assert p.replicated_weight_bytes == (24 + 48) * 64


def test_per_layer_exclusions_count_only_their_layers() -> None:
    excluded = ["lm_head", "model.layers.0*", "model.layers.1.*"] + [f"model.layers.{i}.self_attn*" for i in range(2, 10)]
    q = detect_quant({}, None, {"quantization": {"quant_algo": "NVFP4", "exclude_modules": excluded}}, num_layers=10)
    assert q.component_bytes("experts", 2, layer=0) == 2 and q.component_bytes("experts", 2, layer=5) == NVFP4
    assert q.component_bytes("attention", 2, layer=7) == 2
    assert q.component_bytes("experts", 2) == pytest.approx(0.2 * 2 + 0.8 * NVFP4)


def test_partial_download_falls_back_to_the_index(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_8B))
    _write_safetensors(tmp_path / "model-00001-of-00002.safetensors", {"lm_head.weight": ("BF16", [100, 64])})
    index = {"metadata": {"total_size": 16_000_000_000},
             "weight_map": {"lm_head.weight": "model-00001-of-00002.safetensors",
                            "model.norm.weight": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    p = load_model_profile(tmp_path)
    assert p.weight_source == "index" and p.weight_bytes == 16_000_000_000


def test_bad_safetensors_header_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.safetensors"
    bad.write_bytes(struct.pack("<Q", 10) + b"not json!!")
    with pytest.raises(ConfigError, match="safetensors header is not JSON"):
        read_header(bad)


def test_plan_kimi_k25_published_config_fits_8xh200_at_088(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from autotune.cli import main

    study = {"name": "k25", "server": {"backend": "sim", "sglang_version": "0.5.23",
                                       "model_path": str(DATA / "kimi-k2.5"), "tp_size": 8},
             "hardware": {"gpu": "h200", "num_gpus": 8, "interconnect": "nvlink"},
             "search_space": {"mem_fraction_static": {"low": 0.88, "high": 0.88, "step": 0.01}}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    assert main(["plan", "--json", str(path)]) == 0
    (row,) = json.loads(capsys.readouterr().out)["candidates"]
    assert row["verdict"] == "fits" and row["kv_tokens"] > 100_000
    w = row["p_gib"] - row["a_gib"]  # weights + loader residue per GPU
    assert w == pytest.approx(74, rel=0.10)  # what real 8 x H200 servers log (main predicted 239)


def test_exclusions_name_single_attention_projections() -> None:
    hf = {"quantization": {"quant_algo": "NVFP4", "exclude_modules": ["model.layers.0.self_attn.q_b_proj"]}}
    q = detect_quant({}, None, hf, num_layers=1)
    assert q.component_bytes("attention", 2, 0, "q_b_proj") == 2  # excluded: bf16
    assert q.component_bytes("attention", 2, 0, "o_proj") == NVFP4  # quantized (DeepSeek-R1-NVFP4's o_proj)


def test_mxfp4_experts_padded_to_128_per_rank() -> None:
    p = profile_from_config(GPT_OSS_120B)
    base = (p.weight_bytes - p.replicated_weight_bytes) / 1 + p.replicated_weight_bytes
    pad = (2944 / 2880) ** 2 - 1  # hidden and intermediate 2880 -> 2944
    assert weight_bytes_per_gpu(p, 1) == pytest.approx(base + p.expert_weight_bytes * pad, rel=1e-9)
    pad8 = (2944 / 2880) * (384 / 360) - 1  # each rank's 360 intermediate rows -> 384
    assert weight_bytes_per_gpu(p, 8) - (p.weight_bytes - p.replicated_weight_bytes) / 8 - p.replicated_weight_bytes \
        == pytest.approx(p.expert_weight_bytes / 8 * pad8, rel=1e-9)


def test_mxfp4_padding_by_release_and_gpu() -> None:
    """0.5.9 mxfp4.py:324-355 pads to 256 on SM100's FlashInfer path (GPT-OSS's default on Blackwell) and
    on aiter, each rank's intermediate to 32 only on triton_kernels; 0.5.23 pads to 128 (aiter 256)."""
    from autotune.sglang.hardware.gpus import get_gpu
    from autotune.sglang.knobs.config import ServerConfig
    from autotune.sglang.memory.predictor import predict
    from autotune.sglang.releases import mxfp4_pad_align

    assert mxfp4_pad_align("0.5.9", sm_family=100) == (256, 256)
    assert mxfp4_pad_align("0.5.9", sm_family=90) == (32, 1)
    assert mxfp4_pad_align("0.5.9", rocm=True) == mxfp4_pad_align("0.5.23", rocm=True) == (256, 256)
    assert mxfp4_pad_align("0.5.23", sm_family=100) == mxfp4_pad_align("0.5.23", sm_family=90) == (128, 128)
    p = profile_from_config(GPT_OSS_120B)
    base = p.weight_bytes
    assert weight_bytes_per_gpu(p, 1, mxfp4_align=(256, 256)) == pytest.approx(
        base + p.expert_weight_bytes * ((3072 / 2880) ** 2 - 1), rel=1e-9)  # 2880 -> 3072 both ways
    assert weight_bytes_per_gpu(p, 1, mxfp4_align=(32, 1)) == pytest.approx(base, rel=1e-9)  # 2880 = 90 x 32
    at8 = (weight_bytes_per_gpu(p, 8, mxfp4_align=(32, 1)) - weight_bytes_per_gpu(p, 8, mxfp4_align=(1, 1)))
    assert at8 == pytest.approx(p.expert_weight_bytes / 8 * (384 / 360 - 1), rel=1e-9)  # 360 rows per rank -> 384
    cfg = ServerConfig(model_path="x", mem_fraction_static=0.85)
    old, new = (predict(p, get_gpu("b200"), cfg, version=v) for v in ("0.5.9", "0.5.23"))
    assert old.w_gib - new.w_gib == pytest.approx(
        p.expert_weight_bytes * ((3072 / 2880) ** 2 - (2944 / 2880) ** 2) / GIB, abs=1e-3)  # w_gib: 4 decimals


@pytest.mark.parametrize("name,flags", [("qwen3-next", ""), ("gpt-oss", ""), ("dsv32", ""), ("kimi-k2.5", ""),
                                        ("qwen3-next", "--mamba-full-memory-ratio 0.5"),
                                        ("qwen3-next", "--max-mamba-cache-size 32"),
                                        ("qwen3-next", "--disable-radix-cache --max-running-requests 8"),
                                        ("qwen3-next", "--mamba-ssm-dtype bfloat16 --max-running-requests 512"),
                                        ("gpt-oss", "--swa-full-tokens-ratio 0.3")])
def test_simulator_and_predictor_size_the_pool_alike(tmp_path: Path, name: str, flags: str) -> None:
    """The simulated server (autotune.sim.hardware) sizes every family's pool as the predictor does, so a
    simulated launch calibrates the predictor to its own figures (Mamba state and indexer included)."""
    from autotune.sglang.hardware.gpus import get_gpu
    from autotune.sglang.knobs.config import ServerConfig
    from autotune.sglang.memory.predictor import Calibration, predict
    from autotune.sim.args import parse_args
    from autotune.sim.hardware import plan_memory

    cfgs = {"qwen3-next": QWEN3_NEXT, "gpt-oss": GPT_OSS_120B, "dsv32": _v32(),
            "kimi-k2.5": json.loads((DATA / "kimi-k2.5" / "config.json").read_text())}
    (tmp_path / "config.json").write_text(json.dumps(cfgs[name]))
    model = load_model_profile(tmp_path)
    launch, sim = parse_args(f"--model-path {tmp_path} --tp-size 8 --mem-fraction-static 0.85 --sim-gpu b200 "
                             f"--sim-interconnect nvlink --sim-sglang-version 0.5.23 {flags}".split())
    plan = plan_memory(launch, model, None, sim.gpu, version=sim.version, interconnect=sim.interconnect)
    cal = Calibration(p_gib=plan.p_gib, a_gib=plan.a_gib, tp_size=8, mem_fraction_static=0.85, f_is_auto=False)
    server = ServerConfig(model_path=str(tmp_path), tp_size=8, mem_fraction_static=0.85, extra_args=tuple(flags.split()))
    pred = predict(model, get_gpu("b200"), server, version="0.5.23", calibration=cal)
    assert plan.kv_tokens > 0 and pred.kv_tokens == plan.kv_tokens
    assert pred.cell_bytes == plan.cell_bytes
    assert pred.max_running_requests == plan.max_running_requests  # a state pool caps both alike
    cold = predict(model, get_gpu("b200"), ServerConfig(model_path=str(tmp_path), tp_size=8, mem_fraction_static=0.85),
                   version="0.5.23")
    assert cold.w_gib == pytest.approx(plan.w_gib, abs=0.3)  # the same weights per GPU (P differs by comm buffers)


def test_gpt_oss_on_trtllm_mha_has_no_hybrid_swa_pool_before_0_5_23(tmp_path: Path) -> None:
    """0.5.9 server_args.py:1354-1362: GPT-OSS on trtllm_mha (SM100's default) disables hybrid SWA memory, so
    all 36 layers sit in the full pool (2 x 36,864 B at TP 1); on H200 (fa3) the SWA pool stays at 0.8. The
    simulator sizes the pool alike."""
    from autotune.sglang.hardware.gpus import get_gpu
    from autotune.sglang.knobs.config import ServerConfig
    from autotune.sglang.memory.predictor import Calibration, predict
    from autotune.sglang.releases import gpt_oss_disables_hybrid_swa
    from autotune.sim.args import parse_args
    from autotune.sim.hardware import plan_memory

    arch = "GptOssForCausalLM"
    assert gpt_oss_disables_hybrid_swa("0.5.9", arch, sm_family=100)
    assert gpt_oss_disables_hybrid_swa("0.5.9", arch, sm_family=90, attention_backend="trtllm_mha")
    assert not gpt_oss_disables_hybrid_swa("0.5.9", arch, sm_family=100, attention_backend="triton")
    assert not gpt_oss_disables_hybrid_swa("0.5.9", arch, sm_family=90)
    assert not gpt_oss_disables_hybrid_swa("0.5.23", arch, sm_family=100)
    assert not gpt_oss_disables_hybrid_swa("0.5.9", "Qwen3ForCausalLM", sm_family=100)
    gpt = profile_from_config(GPT_OSS_120B)
    cfg = ServerConfig(model_path="x", mem_fraction_static=0.85)
    assert predict(gpt, "b200", cfg, version="0.5.9").cell_bytes == 2 * 36864
    assert predict(gpt, "h200", cfg, version="0.5.9").cell_bytes == int(36864 + 0.8 * 36864)
    assert predict(gpt, "b200", cfg, version="0.5.23").cell_bytes == int(36864 + 0.8 * 36864)
    (tmp_path / "config.json").write_text(json.dumps(GPT_OSS_120B))
    model = load_model_profile(tmp_path)
    launch, sim = parse_args(f"--model-path {tmp_path} --mem-fraction-static 0.85 --sim-gpu b200 "
                             "--sim-sglang-version 0.5.9".split())
    plan = plan_memory(launch, model, None, sim.gpu, version=sim.version, interconnect=sim.interconnect)
    cal = Calibration(p_gib=plan.p_gib, a_gib=plan.a_gib, tp_size=1, mem_fraction_static=0.85, f_is_auto=False)
    pred = predict(model, get_gpu("b200"), ServerConfig(model_path=str(tmp_path), mem_fraction_static=0.85),
                   version="0.5.9", calibration=cal)
    assert plan.cell_bytes == pred.cell_bytes == 2 * 36864 and plan.kv_tokens == pred.kv_tokens > 0


def test_dsa_fp8_budget_divides_by_576_byte_rows_before_0_5_17() -> None:
    """Up to 0.5.16 SGLang divided a DSA model's KV budget by (kv_lora_rank + rope) x 1 B + the indexer
    (0.5.3.post1 model_runner.py:1277-1293, SGLang PR #11309; 0.5.9 model_runner_kv_cache_mixin.py:47-80;
    0.5.16 pool_configurator.py:187-216) while its fp8 pool stores 656 B rows (0.5.9 memory_pool.py:1407-1418);
    0.5.17 divides by the stored row (pool_configurator.py:199-212, kv_cache_configurator.py:1985-2036).
    In bf16 the two are the same row."""
    from autotune.sglang.releases import dsa_budgets_stored_fp8_row

    p = profile_from_config(_v32())
    stored, old_budget = (656 + 132) * 61, (576 + 132) * 61
    for v, budget in (("0.5.9", old_budget), ("0.5.16", old_budget), ("0.5.17", stored), ("0.5.23", stored)):
        assert dsa_budgets_stored_fp8_row(v) is (budget == stored)
        assert cell_size_bytes(p, tp_size=1, version=v, gpu_sm=100, budget=True) == budget
        assert cell_size_bytes(p, tp_size=1, version=v, gpu_sm=100) == stored == 48068  # what the pool holds
    assert cell_size_bytes(p, tp_size=1, version="0.5.9", gpu_sm=90, budget=True) == (1152 + 132) * 61  # bf16
    mla = profile_from_config({k: v for k, v in _v32().items() if k != "index_topk"})
    assert cell_size_bytes(mla, tp_size=8, kv_cache_dtype="fp8_e4m3", version="0.5.9", budget=True) == 576 * 61


def test_dsa_pool_past_its_budget_comes_out_of_the_slack_in_predictor_and_simulator(tmp_path: Path) -> None:
    """SGLang PR #11309's B200 launch (TP 8, DP attention 8, fp8 KV): tokens are counted at 43,188 B before
    0.5.17, and the pool then takes 48,068 B each, 4,880 B a token more than the budget, out of the slack.
    The simulated server sizes and allocates the pool alike."""
    from autotune.sglang.hardware.gpus import get_gpu
    from autotune.sglang.knobs.config import ServerConfig
    from autotune.sglang.memory.predictor import Calibration, predict
    from autotune.sim.args import parse_args
    from autotune.sim.hardware import plan_memory

    (tmp_path / "config.json").write_text(json.dumps(_v32()))
    model = load_model_profile(tmp_path)
    server = ServerConfig(model_path=str(tmp_path), tp_size=8, attn_dp_size=8, mem_fraction_static=0.8)
    old, new = (predict(model, get_gpu("b200"), server, version=v) for v in ("0.5.9", "0.5.23"))
    assert old.cell_bytes == new.cell_bytes == 48068 and old.kv_gib == pytest.approx(new.kv_gib, abs=1e-3)
    assert old.kv_tokens == int(old.kv_gib * GIB / 43188) // 64 * 64
    assert new.kv_tokens == int(new.kv_gib * GIB / 48068) // 64 * 64
    assert old.slack_parts["kv_past_budget"] == pytest.approx(old.kv_tokens * 4880 / GIB, abs=1e-4)
    assert "kv_past_budget" not in new.slack_parts
    launch, sim = parse_args(f"--model-path {tmp_path} --tp-size 8 --dp-size 8 --enable-dp-attention "
                             "--mem-fraction-static 0.8 --sim-gpu b200 --sim-interconnect nvlink "
                             "--sim-sglang-version 0.5.9".split())
    plan = plan_memory(launch, model, None, sim.gpu, version=sim.version, interconnect=sim.interconnect)
    assert plan.profiled_tokens == int(plan.rest_gib * GIB // 43188) and plan.cell_bytes == 48068
    assert plan.kv_gib == pytest.approx((plan.kv_tokens + 64) * 48068 / GIB) and plan.kv_gib > plan.rest_gib
    cal = Calibration(p_gib=plan.p_gib, a_gib=plan.a_gib, tp_size=8, attn_dp_size=8, mem_fraction_static=0.8,
                      f_is_auto=False)
    assert predict(model, get_gpu("b200"), server, version="0.5.9", calibration=cal).kv_tokens == plan.kv_tokens


def test_vlm_auto_fraction_factor_and_cache_reserve() -> None:
    from autotune.sglang.models.profile import vlm_mem_fraction_factor
    from autotune.sglang.models.sizing import VLM_CACHE_BYTES

    assert vlm_mem_fraction_factor(None) == 1.0
    assert vlm_mem_fraction_factor({"vt_hidden_size": 1152}) == pytest.approx(0.95)  # Kimi K2.5: vt_* keys unread
    assert vlm_mem_fraction_factor({"depth": 27, "hidden_size": 1152}) == pytest.approx(0.925, abs=5e-4)  # Qwen3.5
    k25 = load_model_profile(DATA / "kimi-k2.5")
    assert kv_reserved_bytes(k25, 10 * GIB, tp=8) == VLM_CACHE_BYTES
    assert kv_reserved_bytes(profile_from_config(QWEN3_8B), 10 * GIB, tp=1) == 0


def test_swa_and_mamba_ratio_flags_and_family_page_sizes() -> None:
    from autotune.sglang.knobs.config import ServerConfig
    from autotune.sglang.memory.predictor import predict

    gpt = profile_from_config(GPT_OSS_120B)
    half = predict(gpt, "h200", ServerConfig(model_path="x", mem_fraction_static=0.9,
                                              extra_args=("--swa-full-tokens-ratio", "0.5")), version="0.5.23")
    assert half.cell_bytes == int(36864 + 0.5 * 36864)
    whole = predict(gpt, "h200", ServerConfig(model_path="x", mem_fraction_static=0.9,
                                               extra_args=("--disable-hybrid-swa-memory",)), version="0.5.23")
    assert whole.cell_bytes == 2 * 36864
    nxt = profile_from_config(QWEN3_NEXT)
    base = predict(nxt, "h200", ServerConfig(model_path="x", tp_size=4, mem_fraction_static=0.9), version="0.5.23")
    more_kv = predict(nxt, "h200", ServerConfig(model_path="x", tp_size=4, mem_fraction_static=0.9,
                                                extra_args=("--mamba-full-memory-ratio", "0.2")), version="0.5.23")
    assert more_kv.kv_tokens > 1.5 * base.kv_tokens  # less memory for Mamba state, more for the KV pool
    capped = predict(nxt, "h200", ServerConfig(model_path="x", tp_size=4, mem_fraction_static=0.9,
                                               extra_args=("--max-mamba-cache-size", "64")), version="0.5.23")
    s = 77266944 // 4
    # 64 slots + the padding one (kv_gib is rounded to 4 decimals: a few tokens of slack)
    assert capped.kv_tokens == pytest.approx((capped.kv_gib * GIB - 65 * s) / capped.cell_bytes, abs=20)
    dsa = predict(profile_from_config(_v32()), "b200", ServerConfig(model_path="x", tp_size=8, mem_fraction_static=0.85),
                  version="0.5.23")
    assert dsa.kv_tokens % 64 == 0 and dsa.kv_tokens > 0


def test_mimo_v2_swa_layers_with_their_own_heads() -> None:
    pattern = ([0] + [1] * 4) * 9 + [0, 1, 1]
    cfg = {"architectures": ["MiMoV2FlashForCausalLM"], "hidden_size": 4096, "num_attention_heads": 64,
           "num_key_value_heads": 4, "head_dim": 192, "v_head_dim": 128, "num_hidden_layers": 48,
           "swa_num_key_value_heads": 8, "swa_head_dim": 192, "swa_v_head_dim": 128, "sliding_window": 128,
           "hybrid_layer_pattern": pattern, "vocab_size": 152576, "intermediate_size": 16384}
    p = profile_from_config(cfg)
    assert p.family == "swa" and p.kv_layout is not None
    assert (p.kv_layout.full_layers, p.kv_layout.swa_layers) == (10, 38)
    # TP 4: one full KV head and two SWA heads per rank, (192 + 128) x 2 B each
    assert _cell(cfg, tp=4) == int(10 * 640 + 0.8 * 38 * 2 * 640)


def test_kv_projections_whole_per_rank_past_the_kv_heads() -> None:
    p = profile_from_config(QWEN3_8B)
    kv_proj = 36 * 2 * 4096 * 8 * 128 * 2  # k_proj + v_proj, bf16
    assert p.kv_proj_weight_bytes == kv_proj
    assert weight_bytes_per_gpu(p, 8) == pytest.approx(p.weight_bytes / 8)  # 8 heads over 8 ranks: no copy
    assert weight_bytes_per_gpu(p, 16) == pytest.approx(p.weight_bytes / 16 + kv_proj * (1 / 8 - 1 / 16))


def test_unknown_architecture_is_never_condemned_cold_and_learns_its_cell_from_a_launch() -> None:
    from autotune.sglang.knobs.config import ServerConfig
    from autotune.sglang.memory.predictor import Calibration, predict

    made_up = profile_from_config({"architectures": ["MadeUpForCausalLM"], "hidden_size": 8192, "num_attention_heads": 64,
                                   "num_hidden_layers": 200, "vocab_size": 32000, "intermediate_size": 28672})
    cfg = ServerConfig(model_path="x", tp_size=2, mem_fraction_static=0.9)
    cold = predict(made_up, "h100", cfg, version="0.5.23")
    assert cold.verdict == "kv_oom" and not cold.should_prune  # far too big as GQA, yet unknown: launch it
    assert any(n.startswith("unknown: calibrated from the first launch") for n in cold.notes)
    # the first launch logged P 78.0, A 40.0 and 100,000 tokens at f 0.9: rest 32.2 GiB -> 345,744 B a token
    cal = Calibration(p_gib=78.0, a_gib=40.0, kv_tokens=100_000, tp_size=2, mem_fraction_static=0.9, f_is_auto=False)
    again = predict(made_up, "h100", cfg, version="0.5.23", calibration=cal)
    assert again.cell_bytes == int((40.0 - 78.0 * 0.1) * GIB / 100_000) and again.kv_tokens == pytest.approx(100_000, abs=2)
    tighter = predict(made_up, "h100", ServerConfig(model_path="x", tp_size=2, mem_fraction_static=0.45), version="0.5.23",
                      calibration=cal)
    assert tighter.verdict == "kv_oom" and tighter.should_prune  # calibrated: now it prunes


def test_falcon_h1_has_attention_and_mamba_on_every_layer() -> None:
    cfg = {"architectures": ["FalconH1ForCausalLM"], "hidden_size": 2048, "num_attention_heads": 8,
           "num_key_value_heads": 2, "head_dim": 128, "num_hidden_layers": 24, "mamba_d_ssm": 3072,
           "mamba_n_heads": 24, "mamba_d_head": 128, "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4,
           "intermediate_size": 8192, "vocab_size": 65536}
    p = profile_from_config(cfg)
    lay = p.kv_layout
    assert p.family == "mamba" and lay is not None and lay.mamba is not None
    assert (lay.full_layers, lay.mamba.layers) == (24, 24)
    per_layer = (3072 + 2 * 1 * 256) * 3 * 2 + 24 * 128 * 256 * 4
    assert state_bytes_per_request(lay.mamba, 1) == per_layer * 24
    assert _cell(cfg) == 2 * 256 * 24 * 2


def test_ignore_patterns_matched_together_match_as_each_alone() -> None:
    """Globs and regexes share one compiled alternation (one C call per module name, not one Python call per
    pattern); those that cannot share one (a back-reference, a named group, an inline flag) stay alone. The
    flags per component and layer are the ones each pattern gives on its own."""
    from autotune.sglang.models.quant import COMPONENT_NAMES, _ignored, _one_regex

    patterns = ["lm_head", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:model\\.layers\\.(\\d)\\.self_attn\\.\\1?q",
                "re:(?i)MODEL\\.LAYERS\\.7\\.", "re:(?P<x>model)\\.layers\\.9\\.mlp", "model.layers.1?.self_attn*",
                "model.layers.*.linear_attn", "model.layers.3.mlp.shared_experts"]
    got = _ignored(patterns, 24)
    alone = [_ignored([p], 24) for p in patterns]  # each pattern's own flags, computed once (not per layer)
    for comp, names in COMPONENT_NAMES.items():
        layers = range(24) if "{i}" in names[0] else range(1)
        want = tuple(any(a.get(comp, (False,) * len(layers))[i] for a in alone) for i in layers)
        assert got.get(comp, (False,) * len(layers)) == want, comp
    assert len(_one_regex(["a", "b(c)", "(?i)x", "(y)\\1"])) == 3  # a|b(c) shared, the other two alone
    with pytest.raises(ValueError, match="ignore pattern"):
        _one_regex(["(("])
    with pytest.raises(ValueError, match="65 ignore patterns with back-references"):
        _one_regex([f"(a{i})\\1" for i in range(65)])


def test_a_malformed_ignore_regex_is_one_line_naming_the_file(tmp_path: Path) -> None:
    cfg = {**QWEN3_8B, "quantization_config": {"quant_method": "fp8", "ignored_layers": ["re:(("]}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=r"config\.json: .*ignore pattern '\(\(': missing \)"):
        load_model_profile(tmp_path)
