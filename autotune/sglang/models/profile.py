"""Model profiles read from a Hugging Face model directory.

``config.json`` is read, then the most exact size the disk has: the shards' safetensors headers (dtypes
and shapes, never the tensors), else ``model.safetensors.index.json``'s total size, else an estimate
from the config; ModelOpt's ``hf_quant_config.json`` too. Config-only stand-in directories such as
``studies/models/kimi-k2-class`` work without any weights on disk.

The per-family rules (KV cell, the pools beside it, weights per GPU, quantization) live in
:mod:`autotune.sglang.models.profile`. Known: MHA/GQA (Llama, Mistral, Qwen, Gemma, GLM-4.x), hybrid
sliding-window (GPT-OSS, MiMo-V2), MLA (DeepSeek V2/V3/R1, Kimi K2/K2.5), DSA (DeepSeek V3.2, GLM-5),
DeepSeek V4, Mamba / linear-attention hybrids (Qwen3-Next, Qwen3.5, Nemotron-H, Falcon-H1), multimodal wrappers
(``text_config``) and EAGLE / EAGLE3 draft heads. Anything else is ``unknown``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.files import read_json
from autotune.limits import JSON_BYTES, MAX_LAYERS, MAX_QUANT_PATTERNS, clip, shown
from autotune.sglang.models import families, weights
from autotune.sglang.models.layout import KvLayout
from autotune.sglang.models.quant import FP8_BLOCK, MXFP4, QuantScheme, detect_quant
from autotune.sglang.models.safetensors import checkpoint_tensors, index_total_size

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
    #: The KV family (``mha``, ``swa``, ``mla``, ``dsa``, ``dsv4``, ``mamba``; ``unknown``) and its layout.
    family: str = "mha"
    kv_layout: KvLayout | None = None
    #: Bytes every rank holds whole at any TP (MLA's a-projections, the DSA indexer, routers, norms).
    replicated_weight_bytes: int = 0
    #: DSA's lightning indexer: its heads and the keys each query keeps (config ``index_n_heads``,
    #: ``index_topk``; 0 for every other family). The speed model's indexer term reads them.
    index_n_heads: int = 0
    index_topk: int = 0
    #: A MoE layer's shared experts (config ``n_shared_experts``; 1 where only ``shared_expert_intermediate_size``
    #: is given, as Qwen2-MoE and Qwen3-Next do; 0 for dense models and MoE without them). The speed model reads it.
    shared_experts: int = 0
    #: Bytes made after loading, split like attention (MLA's bf16 absorbed kv_b copies), all ranks together.
    post_load_weight_bytes: int = 0
    vision_weight_bytes: int = 0  # a multimodal wrapper's vision tower (inside weight_bytes)
    expert_weight_bytes: int = 0  # the routed experts (inside weight_bytes), all ranks together
    kv_proj_weight_bytes: int = 0  # GQA's k_proj + v_proj (inside weight_bytes): whole heads per rank past tp = kv
    #: SGLang's automatic mem_fraction_static x this for a model with a vision tower (1.0 otherwise)
    vlm_f_factor: float = 1.0
    weight_source: str = "config"  # "headers" (shard headers), "index" (total_size) or "config" (estimated)

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


#: Keys of a config.json (the model's, its text_config, vision_config, quantization_config) that
#: hold counts or sizes: text there (``"eight"``), a bool, NaN or a number past 2^40 is refused
#: with the key's name before any arithmetic is done with it.
_NUMERIC_KEYS = frozenset({
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "v_head_dim",
    "qk_nope_head_dim", "qk_rope_head_dim", "kv_lora_rank", "q_lora_rank", "vocab_size", "intermediate_size",
    "moe_intermediate_size", "max_position_embeddings", "max_sequence_length", "n_routed_experts", "num_experts",
    "num_local_experts", "num_experts_per_tok", "num_nextn_predict_layers", "sliding_window", "swa_head_dim",
    "swa_v_head_dim", "swa_num_key_value_heads", "full_attention_interval", "index_head_dim", "index_n_heads", "index_topk",
    "index_topk_freq", "linear_conv_kernel_dim", "linear_key_head_dim", "linear_num_key_heads",
    "linear_value_head_dim", "mamba_d_conv", "mamba_d_ssm", "mamba_d_state", "mamba_d_head", "mamba_expand",
    "mamba_head_dim", "mamba_n_groups", "mamba_n_heads", "mamba_num_heads", "n_groups", "ssm_state_size",
    "conv_kernel", "group_size", "num_bits", "bits", "w_bit", "q_group_size",
})
_MAX_CONFIG_INT = 2**40
#: Keys whose value counts layers, and keys that hold one entry per layer (a list, or a string of one
#: character a layer): the profile rules walk every layer, so each is bounded by MAX_LAYERS.
_LAYER_COUNT_KEYS = frozenset({"num_hidden_layers"})
_PER_LAYER_KEYS = frozenset({
    "layer_types", "hybrid_override_pattern", "hybrid_layer_pattern", "compress_ratios", "indexer_types",
    "index_topk_pattern", "mlp_only_layers", "mlp_layer_types",
})
#: A quantization config's ignore / exclude lists: every entry is tried on every layer's module names.
_PATTERN_LIST_KEYS = frozenset({"ignore", "exclude_modules", "modules_to_not_convert", "ignored_layers"})


def _read_json(path: Path, what: str) -> dict[str, Any]:
    if not path.exists() and not path.is_symlink():
        raise ConfigError(f"model_path: {path.parent}: no {what} found")
    data = read_json(path, f"model_path: {what}", JSON_BYTES)  # a regular file, bounded (not /dev/zero)
    if not isinstance(data, dict):
        raise ConfigError(f"model_path: {path}: {what} is not a JSON object")
    _check_numbers(data, path, what)
    return data


def _check_numbers(cfg: dict[str, Any], path: Path, what: str, depth: int = 0) -> None:
    """Each count or size of ``cfg`` (and of the configs nested in it) a number, finite, >= 0, < 2^40."""
    for key, value in cfg.items():
        if isinstance(value, dict) and depth < 3:
            _check_numbers(value, path, what, depth + 1)
        elif key in _NUMERIC_KEYS and value is not None:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) \
                and (isinstance(value, int) or math.isfinite(value)) and 0 <= value <= _MAX_CONFIG_INT
            if not ok:
                raise ConfigError(f"model_path: {path}: {key}={shown(value)} is not a size "
                                  f"(a number from 0 to 2^40)")
            if key in _LAYER_COUNT_KEYS and value > MAX_LAYERS:
                raise ConfigError(f"model_path: {path}: {key}={shown(value)} is more layers than autotune models "
                                  f"(at most {MAX_LAYERS:,}; the deepest served models have a few hundred)")
        elif key in _PER_LAYER_KEYS and isinstance(value, (list, str)) and len(value) > MAX_LAYERS:
            raise ConfigError(f"model_path: {path}: {key} holds {len(value):,} per-layer entries "
                              f"(got {shown(value)}), more than the {MAX_LAYERS:,} layers autotune models")
        elif key in _PATTERN_LIST_KEYS and isinstance(value, list) and len(value) > MAX_QUANT_PATTERNS:
            raise ConfigError(f"model_path: {path}: {key} lists {len(value):,} modules (got {shown(value)}), "
                              f"more than the {MAX_QUANT_PATTERNS:,} autotune matches against every layer")
        elif isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"model_path: {path}: {key}={value} is not a finite number")


def _int(cfg: dict[str, Any], key: str, default: int | None = None, *, where: str = "") -> int:
    value = cfg.get(key, default)
    if value is None:
        raise ConfigError(f"model_path: {where}: config.json lacks {key!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"model_path: {where}: config.json {key}={shown(value)} is not an integer") from None


def _text_config(cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The language model's config of a multimodal wrapper (``text_config`` / ``llm_config`` /
    ``language_config``, as SGLang's ``hf_transformers/common.py:547-600`` reads it) and its vision config."""
    for key in ("text_config", "llm_config", "language_config", "thinker_config"):
        inner = cfg.get(key)
        if isinstance(inner, dict) and "hidden_size" not in cfg:
            if key == "thinker_config" and isinstance(inner.get("text_config"), dict):
                inner = inner["text_config"]
            vision = cfg.get("vision_config") or cfg.get("vit_config")
            return inner, vision if isinstance(vision, dict) else None
    return cfg, None


def vlm_mem_fraction_factor(vision: Any) -> float:
    """SGLang's cut of an automatic mem_fraction_static for a ViT (0.5.23 ``srt/arg_groups/memory_hook.py:
    417-462``): ``0.95 x clamp(1 - 0.1 (c - 1), 0.8, 1.05)``, c = layers x hidden^2 against ViT-L/14's
    24 x 1024^2, read as ``num_hidden_layers`` / ``hidden_size`` (24 and 1024 when absent)."""
    if not isinstance(vision, dict):
        return 1.0
    c = int(vision.get("num_hidden_layers") or 24) * int(vision.get("hidden_size") or 1024) ** 2 / (24 * 1024**2)
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (c - 1.0)))


def profile_from_config(cfg: dict[str, Any], *, path: str = "<config>", total_size: int | None = None,
                        hf_quant: dict[str, Any] | None = None, tensors: list[Any] | None = None) -> ModelProfile:
    """Build a :class:`ModelProfile` from a parsed ``config.json``.

    ``total_size``: the safetensors index's exact size; ``tensors``: the shards' headers
    (:func:`autotune.sglang.models.safetensors.checkpoint_tensors`), exact per component;
    ``hf_quant``: ModelOpt's ``hf_quant_config.json``.
    """
    where = path
    top = dict(cfg)
    text, vision = _text_config(top)
    archs = top.get("architectures") or text.get("architectures") or []
    if not isinstance(archs, list) or not archs:
        raise ConfigError(f"model_path: {where}: config.json lacks 'architectures'")
    arch = str(archs[0])
    model_type = str(top.get("model_type", "") or text.get("model_type", ""))
    is_draft = "Eagle" in arch or model_type.lower().startswith("eagle")
    num_layers = _int(text, "num_hidden_layers", 1 if is_draft else None, where=where)
    if "Eagle3" in arch or "EAGLE3" in arch.upper():
        num_layers = 1  # an EAGLE3 head has exactly one decoder layer whatever the config says
    hidden = _int(text, "hidden_size", where=where)
    heads = _int(text, "num_attention_heads", where=where)
    if hidden <= 0 or heads <= 0 or num_layers <= 0:
        raise ConfigError(f"model_path: {where}: non-positive hidden_size/num_attention_heads/num_hidden_layers")
    family = "mha" if is_draft else families.family_of(arch, text)
    unknown = "" if family else f"architecture {arch} is not one the memory model knows"
    # an unknown architecture is sized as plain GQA (MLA when it has a latent), as a placeholder only
    fam = family or ("mla" if text.get("kv_lora_rank") is not None else "mha")
    is_mla = fam in ("mla", "dsa", "dsv4")
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or hidden // heads)
    kv_lora = int(text.get("kv_lora_rank") or 0) if is_mla else 0
    rope = int(text.get("qk_rope_head_dim") or 0) if is_mla else 0
    v_head_dim = int(text.get("v_head_dim") or head_dim)
    if fam in ("mla", "dsa"):
        head_dim = int(text.get("qk_nope_head_dim") or 128) + rope
    if fam == "dsv4":  # one latent KV head of head_dim (nope + rope), stored in the compressed pools
        rope = int(text.get("qk_rope_head_dim") or 64)
        kv_lora = int(text.get("head_dim") or 512) - rope
    dtype_name = str(text.get("torch_dtype") or text.get("dtype") or top.get("torch_dtype") or top.get("dtype")
                     or "bfloat16").replace("torch.", "")
    dtype_bytes = _DTYPE_BYTES.get(dtype_name, 2)
    quant = detect_quant(top, text if text is not top else None, hf_quant, num_layers)
    if fam == "dsv4" and not quant.expert_bytes_per_weight:  # routed experts MXFP4, the rest FP8 block (MC:744-760)
        quant = QuantScheme(quant.method or "fp8", 8, quant.bytes_per_weight or FP8_BLOCK, MXFP4,
                            quant.ignored, quant.kv_cache_fp8, quant.unknown_reason)
    if quant.unknown_reason and not unknown:
        unknown = quant.unknown_reason
    n_experts = int(text.get("n_routed_experts") or text.get("num_experts") or text.get("num_local_experts") or 0)
    context = int(text.get("max_position_embeddings") or text.get("max_sequence_length") or 4096)
    if isinstance(text.get("hybrid_override_pattern"), str):
        num_layers = len(text["hybrid_override_pattern"])
    kinds = families.layer_kinds(fam, text, num_layers)
    layout = families.kv_layout(fam, text, num_layers)

    est = weights.estimate_parts(text, family=fam, layer_kinds=kinds, quant=quant, dtype_bytes=dtype_bytes, vision=vision)
    absorbed = est.get("absorbed")
    experts = est.get("experts")
    per_tok = int(text.get("num_experts_per_tok") or 0)
    active_est = est.loaded - experts + (experts * per_tok / n_experts if n_experts else 0.0)
    if tensors:
        exact = weights.classify(tensors, num_layers)
        weight_bytes, replicated, source = int(exact.loaded), int(exact.get("replicated")), "headers"
    elif total_size is not None and total_size > 0:
        on_disk = est.loaded - absorbed + est.get("mtp")
        weight_bytes = int(total_size * (est.loaded - absorbed) / on_disk) if on_disk > 0 else int(total_size)
        replicated, source = int(est.get("replicated")), "index"
    else:
        weight_bytes, replicated, source = int(est.loaded - absorbed), int(est.get("replicated")), ""
    scale = weight_bytes / (est.loaded - absorbed) if est.loaded - absorbed > 0 else 1.0
    estimated = not source
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
        vocab_size=int(text.get("vocab_size") or 32000),
        context_len=context,
        dtype_bytes=dtype_bytes,
        weight_bytes=weight_bytes,
        num_experts=n_experts,
        num_experts_per_tok=per_tok if n_experts else 0,
        intermediate_size=int(text.get("intermediate_size") or 0),
        moe_intermediate_size=int(text.get("moe_intermediate_size") or text.get("intermediate_size") or 0) if n_experts else 0,
        num_nextn_predict_layers=int(text.get("num_nextn_predict_layers") or 0),
        active_param_bytes=min(int(active_est * scale), weight_bytes),
        model_type=model_type,
        quant_method=quant.method,
        weight_bits=quant.bits,
        kv_cache_quant_fp8=quant.kv_cache_fp8,
        is_draft=is_draft,
        weight_bytes_estimated=estimated,
        tie_word_embeddings=bool(text.get("tie_word_embeddings", top.get("tie_word_embeddings", False))),
        q_lora_rank=int(text.get("q_lora_rank") or 0) if is_mla else 0,
        confidence="unknown" if unknown else ("derived" if estimated else "exact"),
        unknown_reason=unknown,
        family=fam if not unknown else "unknown",
        kv_layout=layout,
        replicated_weight_bytes=min(replicated, weight_bytes),
        index_n_heads=int(text.get("index_n_heads") or 64) if fam == "dsa" and not unknown else 0,
        index_topk=int(text.get("index_topk") or 0) if fam == "dsa" and not unknown else 0,
        shared_experts=weights.shared_expert_count(text) if n_experts else 0,
        post_load_weight_bytes=int(absorbed),
        vision_weight_bytes=int(est.get("vision") * scale),
        expert_weight_bytes=int(experts * scale),
        kv_proj_weight_bytes=int(est.get("kv_proj") * scale),
        vlm_f_factor=vlm_mem_fraction_factor(top.get("vision_config")),
        weight_source=source or "config",
    )


def _optional_json(path: Path) -> dict[str, Any] | None:
    return _read_json(path, path.name) if path.is_file() else None


def load_model_profile(path: str | Path) -> ModelProfile:
    """Read ``<path>/config.json`` (+ the safetensors headers or index, + ``hf_quant_config.json``).

    Raises :class:`ConfigError` naming the path when the directory or its
    config is missing or unusable.
    """
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise ConfigError(f"model_path: {path} is not a directory")
    cfg = _read_json(directory / "config.json", "config.json")
    tensors = checkpoint_tensors(directory)
    total = index_total_size(directory) if tensors is None else None
    try:
        profile = profile_from_config(cfg, path=str(directory), total_size=total,
                                      hf_quant=_optional_json(directory / "hf_quant_config.json"), tensors=tensors)
    except (TypeError, ValueError, ArithmeticError, AttributeError, KeyError) as exc:
        # a value of another type than the format's where no key above names it (a list for a dict, ...)
        raise ConfigError(f"model_path: {directory / 'config.json'}: a value autotune cannot read as a model "
                          f"config ({type(exc).__name__}: {clip(str(exc), 160)})") from None
    if profile.weight_bytes_estimated:
        log.info("%s: no safetensors index; weight size estimated from config as %.2f GiB", directory, profile.weight_gib)
    if profile.is_unknown:
        log.info("%s: memory profile unknown (%s): calibrated from the first launch", directory, profile.unknown_reason)
    return profile
