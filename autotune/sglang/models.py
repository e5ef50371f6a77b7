"""Model profiles read from a Hugging Face model directory.

Only ``config.json`` (and, when present, ``model.safetensors.index.json`` for the
exact weight size) is read, so config-only stand-in directories such as
``studies/models/kimi-k2-class`` work without any weights on disk.

Handled families: Llama / Mistral / Qwen (MHA and GQA), DeepSeek-V2/V3 and
Kimi-K2 (MLA latent KV, MoE, MTP layers, compressed-tensors int4), and EAGLE /
EAGLE3 draft heads (``LlamaForCausalLMEagle3``: one decoder layer).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError

__all__ = ["ModelProfile", "load_model_profile", "profile_from_config"]

log = logging.getLogger(__name__)

_DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}

#: Architectures whose checkpoints carry MLA attention (latent KV, replicated per TP rank).
MLA_ARCHITECTURES = frozenset(
    {
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "KimiK25ForConditionalGeneration",
        "Glm4MoeLiteForCausalLM",
        "GlmMoeDsaForCausalLM",
    }
)

#: Architectures with built-in MTP (the NEXTN draft is the target checkpoint itself).
MTP_ARCHITECTURES = frozenset(
    {
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "Glm4MoeForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "GlmMoeDsaForCausalLM",
        "BailingMoeForCausalLM",
        "BailingMoeV2ForCausalLM",
        "MistralLarge3ForCausalLM",
        "PixtralForConditionalGeneration",
    }
)


#: Plain MHA/GQA architectures whose KV cell and weights the generic rule derives.
GQA_ARCHITECTURES = frozenset(
    {
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "MixtralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen2MoeForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
    }
)


def _unknown_reason(arch: str, is_draft: bool, is_mla: bool) -> str:
    """Why the profiles cannot derive this architecture's memory ("" when they can)."""
    if is_draft or is_mla or arch in GQA_ARCHITECTURES:
        return ""
    return f"architecture {arch} is not one the memory model knows"


@dataclass(frozen=True)
class ModelProfile:
    """What the memory model and the simulator need to know about one checkpoint.

    Sizes are per model (not per GPU). ``head_dim`` / ``v_head_dim`` describe the
    KV cache of MHA/GQA models; for MLA models ``kv_lora_rank`` and
    ``qk_rope_head_dim`` do. ``active_param_bytes`` is the weight bytes touched
    per decoded token (all of them for dense models, shared + routed-active
    experts for MoE), which drives the simulator's decode speed.
    """

    path: str
    architecture: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    is_mla: bool
    kv_lora_rank: int
    qk_rope_head_dim: int
    vocab_size: int
    context_len: int
    dtype_bytes: int
    weight_bytes: int
    num_experts: int
    num_experts_per_tok: int
    intermediate_size: int
    moe_intermediate_size: int
    num_nextn_predict_layers: int
    active_param_bytes: int
    model_type: str = ""
    quant_method: str | None = None
    weight_bits: int | None = None  # 4 for int4 compressed-tensors, None = dtype_bytes * 8
    kv_cache_quant_fp8: bool = False  # the checkpoint declares an FP8 KV cache
    is_draft: bool = False  # an EAGLE/EAGLE3 draft head
    weight_bytes_estimated: bool = False  # True when no index.json gave the exact size
    tie_word_embeddings: bool = False
    q_lora_rank: int = 0  # MLA: the query's low-rank projection (0 = a full query projection)
    #: How far the memory model can be trusted for this checkpoint: "exact" (sizes read from the files on
    #: disk), "derived" (computed from config.json by the family's rule) or "unknown" (an architecture or
    #: quantization the profiles cannot derive: sized as plain GQA only as a placeholder; a study never
    #: condemns a candidate on it before a launch of this model has calibrated the formula).
    confidence: str = "derived"
    unknown_reason: str = ""  # why the profile is "unknown" (empty otherwise)

    @property
    def is_unknown(self) -> bool:
        return self.confidence == "unknown"

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def weight_gib(self) -> float:
        return self.weight_bytes / 2**30

    @property
    def has_mtp(self) -> bool:
        """True when the checkpoint can serve as its own NEXTN/MTP draft."""
        return self.num_nextn_predict_layers > 0 or self.architecture in MTP_ARCHITECTURES

    @property
    def name(self) -> str:
        return Path(self.path).name


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"model_path: {path.parent}: no {what} found") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"model_path: {path}: cannot read {what}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"model_path: {path}: {what} is not a JSON object")
    return data


def _int(cfg: dict[str, Any], key: str, default: int | None = None, *, where: str = "") -> int:
    value = cfg.get(key, default)
    if value is None:
        raise ConfigError(f"model_path: {where}: config.json lacks {key!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"model_path: {where}: config.json {key}={value!r} is not an integer") from None


def _quant_info(cfg: dict[str, Any]) -> tuple[str | None, int | None, bool]:
    """(quant_method, weight bits of quantized layers, kv_cache fp8?) from quantization_config."""
    q = cfg.get("quantization_config") or cfg.get("compression_config")
    if not isinstance(q, dict):
        return None, None, False
    method = q.get("quant_method") or q.get("format")
    bits: int | None = None
    kv_fp8 = str(q.get("kv_cache_quant_algo", "")).upper().startswith("FP8") or bool(q.get("kv_cache_scheme"))
    groups = q.get("config_groups")
    if isinstance(groups, dict):
        for group in groups.values():
            weights = (group or {}).get("weights") or {}
            if "num_bits" in weights:
                bits = int(weights["num_bits"])
                break
    elif "bits" in q:
        bits = int(q["bits"])
    elif str(method).lower() in ("fp8", "fbgemm_fp8", "modelopt"):
        bits = 8
    return (str(method) if method else None), bits, kv_fp8


def _param_counts(cfg: dict[str, Any], arch_layers: int, is_mla: bool, where: str) -> tuple[float, float, float]:
    """Rough (dense-part params, all-expert params, active-expert params) from the config."""
    h = _int(cfg, "hidden_size", where=where)
    vocab = _int(cfg, "vocab_size", 32000, where=where)
    heads = _int(cfg, "num_attention_heads", where=where)
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or h // heads)
    inter = int(cfg.get("intermediate_size") or 4 * h)
    if is_mla:
        q_lora = int(cfg.get("q_lora_rank") or 0)
        nope = int(cfg.get("qk_nope_head_dim") or 128)
        rope = int(cfg.get("qk_rope_head_dim") or 64)
        kv_lora = int(cfg.get("kv_lora_rank") or 512)
        v_dim = int(cfg.get("v_head_dim") or 128)
        q_part = (h * q_lora + q_lora * heads * (nope + rope)) if q_lora else h * heads * (nope + rope)
        attn = q_part + h * (kv_lora + rope) + kv_lora * heads * (nope + v_dim) + heads * v_dim * h
    else:
        attn = h * heads * head_dim + 2 * h * kv_heads * head_dim + heads * head_dim * h
    n_experts = int(cfg.get("n_routed_experts") or cfg.get("num_experts") or cfg.get("num_local_experts") or 0)
    dense_mlp = 3 * h * inter
    embed = vocab * h * (1 if cfg.get("tie_word_embeddings") else 2)
    if n_experts:
        moe_inter = int(cfg.get("moe_intermediate_size") or inter)
        per_tok = int(cfg.get("num_experts_per_tok") or 1)
        shared = int(cfg.get("n_shared_experts") or 0)
        first_dense = int(cfg.get("first_k_dense_replace") or 0)
        moe_layers = max(arch_layers - first_dense, 0)
        dense = embed + arch_layers * attn + first_dense * dense_mlp + moe_layers * (shared * 3 * h * moe_inter + h * n_experts)
        experts = moe_layers * n_experts * 3 * h * moe_inter
        active = moe_layers * per_tok * 3 * h * moe_inter
        return float(dense), float(experts), float(active)
    return float(embed + arch_layers * (attn + dense_mlp)), 0.0, 0.0


def profile_from_config(cfg: dict[str, Any], *, path: str = "<config>", total_size: int | None = None) -> ModelProfile:
    """Build a :class:`ModelProfile` from a parsed ``config.json`` (and an optional exact size)."""
    where = path
    cfg = dict(cfg)
    text_cfg = cfg.get("text_config")
    if isinstance(text_cfg, dict) and "hidden_size" not in cfg:
        cfg = {**text_cfg, "architectures": cfg.get("architectures"), "quantization_config": cfg.get("quantization_config")}
    archs = cfg.get("architectures") or []
    if not isinstance(archs, list) or not archs:
        raise ConfigError(f"model_path: {where}: config.json lacks 'architectures'")
    arch = str(archs[0])
    model_type = str(cfg.get("model_type", ""))
    is_draft = "Eagle" in arch or model_type.lower().startswith("eagle")
    num_layers = _int(cfg, "num_hidden_layers", 1 if is_draft else None, where=where)
    if "Eagle3" in arch or "EAGLE3" in arch.upper():
        num_layers = 1  # an EAGLE3 head has exactly one decoder layer whatever the config says
    hidden = _int(cfg, "hidden_size", where=where)
    heads = _int(cfg, "num_attention_heads", where=where)
    if hidden <= 0 or heads <= 0 or num_layers <= 0:
        raise ConfigError(f"model_path: {where}: non-positive hidden_size/num_attention_heads/num_hidden_layers")
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    is_mla = arch in MLA_ARCHITECTURES or ("kv_lora_rank" in cfg and cfg.get("kv_lora_rank") is not None)
    kv_lora = int(cfg.get("kv_lora_rank") or 0) if is_mla else 0
    rope = int(cfg.get("qk_rope_head_dim") or 0) if is_mla else 0
    v_head_dim = int(cfg.get("v_head_dim") or head_dim)
    if is_mla:
        head_dim = int(cfg.get("qk_nope_head_dim") or 128) + rope
    dtype_name = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").replace("torch.", "")
    dtype_bytes = _DTYPE_BYTES.get(dtype_name, 2)
    quant_method, bits, kv_fp8 = _quant_info(cfg)
    n_experts = int(cfg.get("n_routed_experts") or cfg.get("num_experts") or cfg.get("num_local_experts") or 0)
    context = int(cfg.get("max_position_embeddings") or cfg.get("max_sequence_length") or 4096)

    unknown = _unknown_reason(arch, is_draft, arch in MLA_ARCHITECTURES)
    dense_p, expert_p, active_expert_p = _param_counts(cfg, num_layers, is_mla, where)
    # Quantized checkpoints: the quantized linears (experts in practice) use bits/8 bytes
    # plus a small scale overhead; attention/embeddings usually stay in the model dtype.
    expert_bytes_per_param = (bits / 8.0) * 1.03 if bits else float(dtype_bytes)
    estimate = dense_p * dtype_bytes + expert_p * expert_bytes_per_param
    active_estimate = dense_p * dtype_bytes + active_expert_p * expert_bytes_per_param
    if total_size is not None and total_size > 0:
        weight_bytes = int(total_size)
        scale = weight_bytes / estimate if estimate > 0 else 1.0
        active = int(active_estimate * scale)
        estimated = False
    else:
        weight_bytes = int(estimate)
        active = int(active_estimate)
        estimated = True
    return ModelProfile(
        path=path,
        architecture=arch,
        num_layers=num_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        is_mla=is_mla,
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=rope,
        vocab_size=int(cfg.get("vocab_size") or 32000),
        context_len=context,
        dtype_bytes=dtype_bytes,
        weight_bytes=weight_bytes,
        num_experts=n_experts,
        num_experts_per_tok=int(cfg.get("num_experts_per_tok") or 0) if n_experts else 0,
        intermediate_size=int(cfg.get("intermediate_size") or 0),
        moe_intermediate_size=int(cfg.get("moe_intermediate_size") or 0) if n_experts else 0,
        num_nextn_predict_layers=int(cfg.get("num_nextn_predict_layers") or 0),
        active_param_bytes=min(active, weight_bytes),
        model_type=model_type,
        quant_method=quant_method,
        weight_bits=bits,
        kv_cache_quant_fp8=kv_fp8,
        is_draft=is_draft,
        weight_bytes_estimated=estimated,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        q_lora_rank=int(cfg.get("q_lora_rank") or 0) if is_mla else 0,
        confidence="unknown" if unknown else ("derived" if estimated else "exact"),
        unknown_reason=unknown,
    )


def _index_total_size(directory: Path) -> int | None:
    index = directory / "model.safetensors.index.json"
    if not index.is_file():
        return None
    data = _read_json(index, "model.safetensors.index.json")
    size = (data.get("metadata") or {}).get("total_size")
    try:
        return int(size) if size is not None else None
    except (TypeError, ValueError):
        raise ConfigError(f"model_path: {index}: metadata.total_size={size!r} is not an integer") from None


def load_model_profile(path: str | Path) -> ModelProfile:
    """Read ``<path>/config.json`` (+ ``model.safetensors.index.json``) into a profile.

    Raises :class:`ConfigError` naming the path when the directory or its
    config is missing or unusable.
    """
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise ConfigError(f"model_path: {path} is not a directory")
    cfg = _read_json(directory / "config.json", "config.json")
    total = _index_total_size(directory)
    profile = profile_from_config(cfg, path=str(directory), total_size=total)
    if profile.weight_bytes_estimated:
        log.info("%s: no safetensors index; weight size estimated from config as %.2f GiB", directory, profile.weight_gib)
    return profile
