"""Weight bytes per component, and what one GPU loads of them.

SGLang only measures the weights (``Load weight end ... mem usage``), so this module reproduces what
each rank holds (SGLang 0.5.23, ``srt/models/deepseek_v2.py`` and the layers it builds on):

* column/row-parallel linears (attention q/k/v/o, dense MLP, shared experts) and the routed experts
  (EP or TP: either way 1/tp of them per rank) are split over tp;
* the embedding and LM head are split by vocabulary (``layers/vocab_parallel_embedding.py``);
* MLA's ``fused_qkv_a_proj_with_mqa`` / ``kv_a_proj_with_mqa`` and the DSA indexer are
  ``ReplicatedLinear`` (whole on every rank), and so are routers and norms;
* MLA keeps absorbed bf16 copies of its ``kv_b_proj`` shard (``w_kc`` / ``w_vc``,
  ``deepseek_common/deepseek_weight_loader.py:703-708``), made after loading but inside the measure;
* MTP / NextN layers in the checkpoint are not loaded by the target model (only by a NEXTN draft);
* the vision tower of a multimodal wrapper is loaded (TP-split unless ``--mm-enable-dp-encoder``).

Component counts come from config.json; with the shards on disk, :func:`classify` sorts the headers'
tensors into the same components, exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from autotune.sglang.models.quant import QuantScheme
from autotune.sglang.models.safetensors import TensorInfo

__all__ = ["WeightParts", "estimate_parts", "classify"]

@dataclass(frozen=True)
class WeightParts:
    """Bytes of the loaded checkpoint per component (``mtp`` is on disk but not loaded)."""

    parts: dict[str, float]

    @property
    def loaded(self) -> float:
        return sum(v for k, v in self.parts.items() if k not in ("mtp", "kv_proj"))  # kv_proj: inside attention

    def get(self, key: str) -> float:
        return float(self.parts.get(key, 0.0))


def _g(cfg: dict[str, Any], *keys: str, default: int = 0) -> int:
    for k in keys:
        v = cfg.get(k)
        if v is not None:
            try:
                return int(v)
            except (TypeError, ValueError):
                continue
    return default


def vision_params(vision: dict[str, Any] | None) -> float:
    """A ViT's parameters: layers x (4 h^2 attention + 2 h x inter MLP) + the merger/projector."""
    if not isinstance(vision, dict):
        return 0.0
    layers = _g(vision, "depth", "num_hidden_layers", "vt_num_hidden_layers", "num_layers")
    h = _g(vision, "hidden_size", "vt_hidden_size", "embed_dim", "width")
    inter = _g(vision, "intermediate_size", "vt_intermediate_size", "mlp_dim", default=4 * h)
    out = _g(vision, "out_hidden_size", "text_hidden_size", "projection_dim", default=h)
    merge = 4  # 2x2 spatial merge before the projector
    return float(layers * (4 * h * h + 2 * h * inter) + h * merge * h * merge + h * merge * out)


def _attention(cfg: dict[str, Any], family: str, h: int) -> tuple[list[tuple[str, float, bool]], float]:
    """One attention layer's projections as (module name, parameters, replicated on every rank), and
    the MLA absorbed-copy parameters. Names are the checkpoint's, so ignore lists apply per projection."""
    heads = _g(cfg, "num_attention_heads")
    if family == "dsv4":  # deepseek_v4.py:1095-1162: wqkv_a replicated, wq_b / wo_a / wo_b split
        q_lora, hd = _g(cfg, "q_lora_rank", default=1024), _g(cfg, "head_dim", default=512)
        o_lora, groups = _g(cfg, "o_lora_rank", default=1024), _g(cfg, "o_groups", default=8)
        return [("wqkv_a", h * (q_lora + hd), True), ("wq_b", q_lora * heads * hd, False),
                ("wo_a", heads * hd // max(groups, 1) * groups * o_lora, False), ("wo_b", groups * o_lora * h, False),
                ("indexer", _indexer(cfg, h, q_lora), True)], 0.0
    if family in ("mla", "dsa"):
        q_lora = _g(cfg, "q_lora_rank")
        nope, rope = _g(cfg, "qk_nope_head_dim", default=128), _g(cfg, "qk_rope_head_dim", default=64)
        kv_lora, v = _g(cfg, "kv_lora_rank", default=512), _g(cfg, "v_head_dim", default=128)
        kv_b = kv_lora * heads * (nope + v)
        projs: list[tuple[str, float, bool]] = [
            ("kv_a_proj_with_mqa", h * (kv_lora + rope), True), ("kv_b_proj", kv_b, False),
            ("o_proj", heads * v * h, False)]
        if q_lora:
            projs += [("q_a_proj", h * q_lora, True), ("q_b_proj", q_lora * heads * (nope + rope), False)]
        else:
            projs.append(("q_proj", h * heads * (nope + rope), False))
        if family == "dsa":
            projs.append(("indexer", _indexer(cfg, h, q_lora), True))
        return projs, float(kv_b)
    kv = _g(cfg, "num_key_value_heads", default=heads)
    hd = _g(cfg, "head_dim", default=h // max(heads, 1))
    gate = 2 if cfg.get("attn_output_gate") or str(cfg.get("model_type", "")).startswith("qwen3_next") else 1
    return [("q_proj", gate * h * heads * hd, False), ("k_proj", h * kv * hd, False), ("v_proj", h * kv * hd, False),
            ("o_proj", heads * hd * h, False)], 0.0


def _indexer(cfg: dict[str, Any], h: int, q_lora: int) -> int:
    n, d = _g(cfg, "index_n_heads", default=64), _g(cfg, "index_head_dim", default=128)
    return (q_lora or h) * n * d + h * d + h * n


def linear_attn_params(cfg: dict[str, Any], h: int) -> float:
    """One linear-attention (GDN) or Mamba2 mixer layer's parameters."""
    if "linear_num_value_heads" in cfg:  # Qwen3-Next / Qwen3.5 gated delta net
        kh, kd = _g(cfg, "linear_num_key_heads"), _g(cfg, "linear_key_head_dim")
        vh, vd = _g(cfg, "linear_num_value_heads"), _g(cfg, "linear_value_head_dim")
        k = _g(cfg, "linear_conv_kernel_dim", default=4)
        return float(h * (2 * kh * kd + 2 * vh * vd) + h * 2 * vh + (2 * kh * kd + vh * vd) * k + vh * vd * h)
    heads = _g(cfg, "mamba_num_heads", "mamba_n_heads", default=128)
    inter = _g(cfg, "mamba_d_ssm", default=0) or (_g(cfg, "mamba_expand") * h if "mamba_d_state" in cfg else 0) \
        or heads * _g(cfg, "mamba_head_dim", default=64)
    ng, state = _g(cfg, "n_groups", "mamba_n_groups", default=8), _g(cfg, "ssm_state_size", "mamba_d_state", default=128)
    k = _g(cfg, "conv_kernel", "mamba_d_conv", default=4)
    return float(h * (2 * inter + 2 * ng * state + heads) + (inter + 2 * ng * state) * k + inter * h)


def shared_expert_count(cfg: dict[str, Any]) -> int:
    """A MoE layer's shared experts: ``n_shared_experts``, or one where only its size is given (Qwen2-MoE and
    Qwen3-Next's ``shared_expert_intermediate_size``); the same keys :func:`estimate_parts` sizes them from."""
    n = _g(cfg, "n_shared_experts")
    if n > 0:
        return n
    return 1 if _g(cfg, "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size") > 0 else 0


def estimate_parts(cfg: dict[str, Any], *, family: str, layer_kinds: list[str], quant: QuantScheme,
                   dtype_bytes: float, vision: dict[str, Any] | None = None) -> WeightParts:
    """Bytes per component of the loaded checkpoint, from config.json.

    ``layer_kinds``: per decoder layer, ``"attn"`` (attention + MLP), ``"linear"`` (a linear-attention /
    Mamba mixer + MLP), ``"both"`` (Falcon-H1), ``"mlp"`` / ``"moe"`` (Nemotron-H's MLP-only blocks).
    """
    h = _g(cfg, "hidden_size")
    vocab = _g(cfg, "vocab_size", default=32000)
    inter = _g(cfg, "intermediate_size", default=4 * h)
    n_exp = _g(cfg, "n_routed_experts", "num_experts", "num_local_experts")
    moe_inter = _g(cfg, "moe_intermediate_size", default=inter)
    shared_inter = _g(cfg, "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size", default=0) or \
        _g(cfg, "n_shared_experts") * moe_inter
    first_dense = _g(cfg, "first_k_dense_replace")
    mlp_only = set(cfg.get("mlp_only_layers") or [])
    step = _g(cfg, "decoder_sparse_step", "moe_layer_freq", default=1) or 1
    pattern_blocks = bool(cfg.get("hybrid_override_pattern"))
    projs, absorbed = _attention(cfg, family, h)
    parts = {k: 0.0 for k in ("attention", "replicated", "absorbed", "dense_mlp", "shared_experts", "experts",
                              "linear_attn", "kv_proj")}
    counts = {"absorbed": 0.0, "router": 0.0, "replicated": 0.0}

    def add(component: str, params: float, layer: int, key: str | None = None, proj: str | None = None) -> None:
        parts[key or component] += params * quant.component_bytes(component, dtype_bytes, layer, proj)

    for i, kind in enumerate(layer_kinds):
        if kind in ("attn", "both"):
            for proj, params, whole in projs:  # MLA's a-projections and the indexer whole on every rank
                add("attention", params, i, "replicated" if whole else "attention", proj)
                if proj in ("k_proj", "v_proj"):
                    add("attention", params, i, "kv_proj", proj)
            counts["absorbed"] += absorbed
        if kind in ("linear", "both"):
            add("linear_attn", linear_attn_params(cfg, h), i)
        if pattern_blocks:  # Nemotron-H: one block type per layer
            if kind == "mlp":
                add("dense_mlp", 2 * h * inter, i)  # relu^2 MLP: up + down
            elif kind == "moe":
                add("experts", n_exp * 2 * h * moe_inter, i)
                add("shared_experts", 2 * h * shared_inter, i)
                counts["router"] += h * n_exp
            continue
        is_moe = n_exp > 0 and i >= first_dense and i not in mlp_only and (i + 1) % step == 0
        if is_moe:
            add("experts", n_exp * 3 * h * moe_inter, i)
            add("shared_experts", 3 * h * shared_inter, i)
            counts["router"] += h * n_exp
        else:
            add("dense_mlp", 3 * h * inter, i)
    parts["replicated"] += counts["router"] * dtype_bytes  # routers stay in the model dtype (deepseek_v2.py:509-517)
    parts["absorbed"] = counts["absorbed"] * 2.0  # bf16 copies whatever kv_b_proj's dtype
    parts["embed"] = vocab * h * dtype_bytes
    parts["lm_head"] = 0.0 if cfg.get("tie_word_embeddings") else vocab * h * quant.component_bytes("lm_head", dtype_bytes)
    parts["vision"] = vision_params(vision) * dtype_bytes
    nextn = _g(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers")
    if nextn and layer_kinds:
        per_layer = sum(parts[k] for k in ("attention", "replicated", "dense_mlp", "shared_experts", "experts")) \
            / len(layer_kinds)
        parts["mtp"] = nextn * per_layer
    return WeightParts(parts)


_RE_REPLICATED = re.compile(r"(q_a_proj|kv_a_proj_with_mqa|q_a_layernorm|kv_a_layernorm|\.indexer\.|wqkv_a|\.wq_a\.|\.wkv\.|"
                            r"mlp\.gate\.|e_score_correction|router\.|norm\.weight$|norm\.bias$)")
_RE_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def classify(tensors: list[TensorInfo], num_layers: int, absorbed_hint: float = 0.0) -> WeightParts:
    """Exact bytes per component from the checkpoint's headers (see :func:`estimate_parts`)."""
    parts: dict[str, float] = {"split": 0.0, "replicated": 0.0, "vision": 0.0, "mtp": 0.0}
    for t in tensors:
        m = _RE_LAYER.search(t.name)
        if t.name.startswith(("mtp.", "model.mtp.")) or (
                m and int(m.group(1)) >= num_layers and "vision" not in t.name and "visual" not in t.name):
            parts["mtp"] += t.nbytes
        elif any(s in t.name for s in ("vision_tower", "visual.", "vision_model", "mm_projector", "multi_modal_projector")):
            parts["vision"] += t.nbytes
        elif _RE_REPLICATED.search(t.name):
            parts["replicated"] += t.nbytes
        else:
            parts["split"] += t.nbytes
    parts["absorbed"] = absorbed_hint
    return WeightParts(parts)
