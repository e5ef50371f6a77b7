"""Which SGLang family an architecture belongs to, and its KV layout read from config.json.

Architecture lists follow SGLang 0.5.23 ``srt/configs/model_config.py`` (MLA: 1366-1401, DSA:
191-212, DeepSeek V4: 395-400, hybrid SWA: 2651-2690) and ``srt/configs/hybrid_arch.py:145-155``
(Mamba / linear attention). An architecture in none of them is ``unknown``.
"""

from __future__ import annotations

from typing import Any

from autotune.sglang.models.dsv4 import default_compress_ratios
from autotune.sglang.models.layout import KvLayout, MambaState

__all__ = ["GQA_ARCHITECTURES", "MLA_ARCHITECTURES", "DSA_ARCHITECTURES", "DSV4_ARCHITECTURES",
           "SWA_ARCHITECTURES", "MAMBA_ARCHITECTURES", "family_of", "kv_layout", "layer_kinds"]

GQA_ARCHITECTURES = frozenset({
    "LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM", "Qwen2MoeForCausalLM",
    "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen2_5_VLForConditionalGeneration",
    "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration", "Glm4MoeForCausalLM",
    "Glm4ForCausalLM", "MiniMaxM2ForCausalLM", "Phi3ForCausalLM", "GraniteForCausalLM",
    # Gemma 2/3 and Mistral's sliding_window: every layer in one full pool (model_overrides/gemma2_gemma3.py:13-26)
    "Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration",
    "Mistral3ForConditionalGeneration",
})
MLA_ARCHITECTURES = frozenset({
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "KimiK25ForConditionalGeneration",
    "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "MistralLarge3ForCausalLM",
})
#: MLA architectures that are DSA when the config carries ``index_topk`` (MC:191-212).
DSA_ARCHITECTURES = frozenset({"DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM",
                               "Glm5NextForCausalLM", "MistralLarge3ForCausalLM"})
DSV4_ARCHITECTURES = frozenset({"DeepseekV4ForCausalLM"})
SWA_ARCHITECTURES = frozenset({"GptOssForCausalLM", "MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM"})
MAMBA_ARCHITECTURES = frozenset({"Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration",
                                 "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
                                 "NemotronHForCausalLM", "FalconH1ForCausalLM"})


def family_of(arch: str, cfg: dict[str, Any]) -> str | None:
    """The KV family of ``arch`` (None: unknown). ``cfg`` is the text config."""
    if arch in DSV4_ARCHITECTURES:
        return "dsv4"
    if arch in MAMBA_ARCHITECTURES:
        return "mamba"
    if arch in SWA_ARCHITECTURES:
        return "swa"
    inner = (cfg.get("architectures") or [""])[0] if isinstance(cfg.get("architectures"), list) else ""
    if arch in MLA_ARCHITECTURES or inner in MLA_ARCHITECTURES:
        dsa = (arch in DSA_ARCHITECTURES or inner in DSA_ARCHITECTURES) and cfg.get("index_topk") is not None
        return "dsa" if dsa else "mla"
    if arch in GQA_ARCHITECTURES or inner in GQA_ARCHITECTURES:
        return "mha"
    return None


def layer_kinds(family: str, cfg: dict[str, Any], num_layers: int) -> list[str]:
    """Per decoder layer: "attn" (attention + MLP), "linear" (linear attention / Mamba + MLP), "both"
    (Falcon-H1: attention and Mamba2 side by side), or for Nemotron-H's single-block layers "attn" /
    "linear" / "mlp" / "moe"."""
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        table = {"M": "linear", "*": "attn", "-": "mlp", "E": "moe"}
        return [table.get(c, "mlp") for c in pattern]
    types = cfg.get("layer_types")
    if family == "mamba" and "mamba_d_state" in cfg:  # Falcon-H1: attention and Mamba2 on every layer
        return ["both"] * num_layers                  # (srt/configs/falcon_h1.py:292-299)
    if family == "mamba":
        if isinstance(types, list) and len(types) == num_layers:
            return ["attn" if "full" in str(t) else "linear" for t in types]
        interval = int(cfg.get("full_attention_interval") or 4)
        return ["attn" if (i + 1) % interval == 0 else "linear" for i in range(num_layers)]
    return ["attn"] * num_layers


def _mamba_state(cfg: dict[str, Any], layers: int) -> MambaState:
    ssm_bytes = 2 if str(cfg.get("mamba_ssm_dtype") or "float32") in ("bfloat16", "float16") else 4
    if "linear_num_value_heads" in cfg:  # gated delta net (Qwen3-Next, Qwen3.5)
        vh, vd = int(cfg["linear_num_value_heads"]), int(cfg.get("linear_value_head_dim") or 128)
        return MambaState(layers, vh * vd, int(cfg.get("linear_num_key_heads") or 16),
                          int(cfg.get("linear_key_head_dim") or 128), vh, vd,
                          int(cfg.get("linear_conv_kernel_dim") or 4), 2, ssm_bytes)
    if "mamba_d_state" in cfg:  # Falcon-H1's keys (srt/configs/falcon_h1.py:211-222)
        inter = int(cfg.get("mamba_d_ssm") or int(cfg.get("mamba_expand") or 2) * int(cfg["hidden_size"]))
        heads = int(cfg.get("mamba_n_heads") or 128)
        hd = cfg.get("mamba_d_head")
        return MambaState(layers, inter, int(cfg.get("mamba_n_groups") or 1), int(cfg["mamba_d_state"]), heads,
                          int(hd) if isinstance(hd, int) else inter // heads, int(cfg.get("mamba_d_conv") or 4),
                          2, ssm_bytes)
    heads, hd = int(cfg.get("mamba_num_heads") or 128), int(cfg.get("mamba_head_dim") or 64)
    return MambaState(layers, heads * hd, int(cfg.get("n_groups") or cfg.get("mamba_n_groups") or 8),
                      int(cfg.get("ssm_state_size") or cfg.get("mamba_d_state") or 128), heads, hd,
                      int(cfg.get("conv_kernel") or cfg.get("mamba_d_conv") or 4), 2, ssm_bytes)


def dsa_layer_skips_topk(cfg: dict[str, Any], layer: int) -> bool:
    """A DSA layer that reuses the previous layer's top-k keeps no indexer cache (SGLang 0.5.23
    ``srt/configs/model_config.py:488-528``, counted by ``pool_configurator.py:560-635``)."""
    types = cfg.get("indexer_types")
    if isinstance(types, list):
        return layer < len(types) and types[layer] == "shared"
    cli = int(cfg.get("cli_factor") or 1)
    if cli > 1:
        return layer % cli != 0
    pattern = cfg.get("index_topk_pattern")
    if pattern is not None:
        return layer < len(pattern) and pattern[layer] == "S"
    freq = int(cfg.get("index_topk_freq") or 1)
    offset = cfg.get("index_skip_topk_offset")
    if offset is not None:
        return max(layer - int(offset) + 1, 0) % freq != 0
    return max(layer - 1, 0) % freq != 0


def kv_layout(family: str, cfg: dict[str, Any], num_layers: int) -> KvLayout:
    if family == "swa":
        types = cfg.get("layer_types") or []
        pattern = cfg.get("hybrid_layer_pattern")  # MiMo-V2: 1 = sliding window (model_config.py:2724-2729)
        if isinstance(pattern, list) and pattern:
            swa = sum(1 for t in pattern[:num_layers] if t == 1)
        else:
            swa = sum(1 for t in types if "sliding" in str(t)) if types else num_layers // 2
        heads = int(cfg.get("swa_num_key_value_heads") or 0)
        hd = int(cfg.get("swa_head_dim") or cfg.get("head_dim") or 0)
        return KvLayout("swa", num_layers - swa, swa, int(cfg.get("sliding_window") or 128), swa_kv_heads=heads,
                        swa_head_dim=hd, swa_v_head_dim=int(cfg.get("swa_v_head_dim") or hd))
    if family == "dsa":
        ihd = int(cfg.get("index_head_dim") or 128)
        topk_layers = sum(not dsa_layer_skips_topk(cfg, i) for i in range(num_layers))
        return KvLayout("dsa", num_layers, index_head_dim=ihd, index_layers=topk_layers)
    if family == "dsv4":
        ratios = cfg.get("compress_ratios")
        ratios_t = tuple(int(r) for r in ratios)[:num_layers] if isinstance(ratios, list) and ratios \
            else default_compress_ratios(num_layers)
        return KvLayout("dsv4", num_layers, sliding_window=int(cfg.get("sliding_window") or 128),
                        compress_ratios=ratios_t)
    if family == "mamba":
        kinds = layer_kinds(family, cfg, num_layers)
        linear = sum(1 for k in kinds if k in ("linear", "both"))
        return KvLayout("mamba", sum(1 for k in kinds if k in ("attn", "both")), mamba=_mamba_state(cfg, linear))
    return KvLayout(family, num_layers)
