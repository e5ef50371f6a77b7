"""Quantized checkpoints: which linears are quantized, and how many bytes a weight takes once loaded.

Read from SGLang 0.5.23's loaders (paths relative to ``sglang/srt/layers/quantization/``); every
figure is bytes per weight including the scales the loader keeps beside it:

* FP8 block 128x128 (``fp8.py:667-689``): 1 byte + one fp32 scale per 16,384 weights.
* compressed-tensors int4 ``pack-quantized`` (``compressed_tensors/compressed_tensors_wNa16_moe.py:79-216``):
  0.5 byte + a bf16 scale per group (0.5625 at group 32); asymmetric schemes add packed zero points.
* ModelOpt NVFP4 (``modelopt_quant.py:1827-1884``): 0.5 + one fp8 scale per 16 = 0.5625.
* MXFP4 (GPT-OSS, ``mxfp4.py:458-633``) and DeepSeek-V4's fp4 experts (``expert_dtype``): 0.5 + one
  e8m0 scale per 32 = 0.53125.
* AWQ / GPTQ int4: 0.5 + fp16 scale and packed zero per group.

The quantization config is looked for where checkpoints put it: ``quantization_config`` (top level, or
inside ``text_config`` for multimodal wrappers such as Kimi-K2.5), ``compression_config``, and
``hf_quant_config.json`` (ModelOpt). A method outside this list makes the profile ``unknown``.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Any

from autotune.limits import MAX_LAYERS, MAX_REGEX_WORK, clip
from autotune.sglang.models.regex_cost import backtracking_problem

__all__ = ["QuantScheme", "detect_quant", "COMPONENT_NAMES"]

#: Module names per weight component ({i}: a layer index), matched against ignore / exclude lists.
COMPONENT_NAMES = {
    "attention": ("model.layers.{i}.self_attn.q_proj", "model.layers.{i}.self_attn.o_proj"),
    "dense_mlp": ("model.layers.{i}.mlp.gate_proj", "model.layers.{i}.mlp.down_proj"),
    "shared_experts": ("model.layers.{i}.mlp.shared_experts.gate_proj", "model.layers.{i}.mlp.shared_experts.down_proj"),
    "experts": ("model.layers.{i}.mlp.experts.0.gate_proj", "model.layers.{i}.mlp.experts.0.down_proj"),
    "lm_head": ("lm_head",),
    "linear_attn": ("model.layers.{i}.linear_attn.in_proj_qkvz", "model.layers.{i}.mixer.in_proj"),
}
ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa",
                         "kv_b_proj", "wqkv_a", "wq_b", "wo_a", "wo_b", "indexer")
COMPONENT_NAMES.update({"attn:" + p: ("model.layers.{i}.self_attn." + p,) for p in ATTENTION_PROJECTIONS})
#: Layers an exclude list is tried on when the layer count is not given.
SAMPLE_LAYERS = 64

FP8_BLOCK = 1.0 + 4 / (128 * 128)
MXFP4 = 0.5 + 1 / 32
NVFP4 = 0.5 + 1 / 16


@dataclass(frozen=True)
class QuantScheme:
    """How a checkpoint's linears are stored once SGLang has loaded them."""

    method: str | None = None  # None: unquantized
    bits: int | None = None  # weight bits of the quantized linears
    bytes_per_weight: float = 0.0  # quantized linears, scales included (0 = the model dtype)
    expert_bytes_per_weight: float = 0.0  # routed experts when their dtype differs (expert_dtype, MXFP4 MoE)
    #: component -> per layer (one entry for lm_head), whether an ignore / exclude pattern leaves it unquantized
    ignored: dict[str, tuple[bool, ...]] = field(default_factory=dict)
    kv_cache_fp8: bool = False  # the checkpoint declares an FP8 KV cache (kv "auto" becomes fp8)
    unknown_reason: str = ""  # a method the profiles cannot size

    def component_bytes(self, component: str, dtype_bytes: float, layer: int | None = None,
                        proj: str | None = None) -> float:
        """Bytes per weight of one component (see :data:`COMPONENT_NAMES`) on ``layer`` (None: the
        average over the layers); ``proj`` names an attention projection (``q_b_proj``, ...) that an
        exclude list may name on its own."""
        if component in ("embed", "router", "norms", "vision", "lm_head"):
            return dtype_bytes  # the LM head is a VocabParallelEmbedding, never a quantized LinearBase (fp8.py:396)
        if component == "experts" and self.expert_bytes_per_weight:
            quantized = self.expert_bytes_per_weight
        else:
            quantized = self.bytes_per_weight or dtype_bytes
        flags = self.ignored.get(component, ())
        if proj is not None and component == "attention" and flags != (True,):
            flags = self.ignored.get("attn:" + proj, ())
        if not flags:
            share = 0.0
        elif layer is not None and len(flags) > 1:
            share = float(flags[min(layer, len(flags) - 1)])
        else:
            share = sum(flags) / len(flags)
        return share * dtype_bytes + (1.0 - share) * quantized


class _Patterns:
    """An ignore / exclude list: ``re:`` regexes (matched at the start, as compressed-tensors does), globs
    (ModelOpt's ``model.layers.1.*``) and plain module names (a name matches any dotted run of a module's name)."""

    def __init__(self, patterns: list[str], names: int = 1) -> None:
        self.plain = {p for p in patterns if not p.startswith("re:") and not any(c in p for c in "*?[")}
        regexes = [p[3:] for p in patterns if p.startswith("re:")]
        # each pattern's share of the work: its ways to backtrack, times the names it is tried on
        max_ways = max(1, MAX_REGEX_WORK // (max(1, names) * max(1, len(regexes))))
        for p in regexes:
            problem = backtracking_problem(p, _NAME_CHARS, max_ways)
            if problem:
                raise ValueError(f"ignore pattern {clip(p, 60)!r}: {problem}")
        globs = [fnmatch.translate(p) + "|" + fnmatch.translate(p + ".*")
                 for p in patterns if not p.startswith("re:") and any(c in p for c in "*?[")]
        self.regexes = _one_regex(regexes)
        self.globs = _one_regex(globs)

    def match(self, name: str) -> bool:
        if self.plain:
            parts = name.split(".")
            runs = {".".join(parts[i:j]) for i in range(len(parts)) for j in range(i + 1, len(parts) + 1)}
            if runs & self.plain:
                return True
        return any(r.match(name) for r in self.regexes) or any(g.match(name) for g in self.globs)


# A regex that cannot share an alternation: a back-reference or a conditional (group numbers shift), a
# named group (two alike clash) or an inline global flag (only allowed at the start).
_ALONE = re.compile(r"\\[1-9]|\(\?P[=<]|\(\?\(|\(\?[aiLmsux]+\)")


_MAX_ALONE = 64  # real lists hold none: each costs a Python call per layer and module name


def _one_regex(patterns: list[str]) -> list[re.Pattern[str]]:
    """The patterns as few compiled regexes as match alike: the ones that can share one alternation in it
    (each is tried in C, not by a Python call per pattern and module name), the others each on its own."""
    try:
        alone = [re.compile(p) for p in patterns if _ALONE.search(p)]
        shared = [p for p in patterns if not _ALONE.search(p)]
        for p in shared:
            re.compile(p)  # a bad pattern fails as itself
        if len(alone) > _MAX_ALONE:
            raise ValueError(f"{len(alone):,} ignore patterns with back-references, named groups or inline flags, "
                             f"more than the {_MAX_ALONE} autotune tries one by one on every layer")
        return [re.compile("|".join(f"(?:{p})" for p in shared)), *alone] if shared else alone
    except re.error as exc:  # the profile reports a ValueError as a value it cannot read, with the file
        raise ValueError(f"ignore pattern {clip(str(exc.pattern), 60)!r}: {exc.msg}") from None


#: The longest module name an ignore pattern is tried on (the last layer's shared expert's, 46 characters).
_NAME_CHARS = max(len(n.format(i=MAX_LAYERS - 1)) for names in COMPONENT_NAMES.values() for n in names)


def _ignored(patterns: list[str], num_layers: int = SAMPLE_LAYERS) -> dict[str, tuple[bool, ...]]:
    """Per component and layer, whether an ignore / exclude pattern names its module."""
    tried = sum(len(names) * (max(num_layers, 1) if "{i}" in names[0] else 1) for names in COMPONENT_NAMES.values())
    pats = _Patterns([str(p) for p in patterns if p], tried)
    out: dict[str, tuple[bool, ...]] = {}
    for comp, names in COMPONENT_NAMES.items():
        layers = range(max(num_layers, 1)) if "{i}" in names[0] else range(1)
        flags = tuple(any(pats.match(n.format(i=i)) for n in names) for i in layers)
        if any(flags):
            out[comp] = flags
    return out


def _kv_fp8(q: dict[str, Any]) -> bool:
    algo = str(q.get("kv_cache_quant_algo") or (q.get("quantization") or {}).get("kv_cache_quant_algo") or "")
    return algo.upper().startswith("FP8") or bool(q.get("kv_cache_scheme"))


def _compressed_tensors(q: dict[str, Any], layers: int) -> QuantScheme:
    groups = q.get("config_groups") or {}
    weights: dict[str, Any] = {}
    for group in groups.values() if isinstance(groups, dict) else []:
        weights = (group or {}).get("weights") or {}
        if weights:
            break
    bits = int(weights.get("num_bits") or 8)
    kind = str(weights.get("type") or "int")
    ignored = _ignored(list(q.get("ignore") or []), layers)
    if bits == 4 and kind == "int":  # wNa16 pack-quantized: bf16 scale per group (+ packed zero points)
        g = int(weights.get("group_size") or 128)
        per = 0.5 + 2 / g + (0.0 if weights.get("symmetric", True) else 0.5 / g)
        return QuantScheme("compressed-tensors", 4, per, 0.0, ignored, _kv_fp8(q))
    if bits == 4 and kind == "float":  # nvfp4-pack-quantized
        return QuantScheme("compressed-tensors", 4, NVFP4, 0.0, ignored, _kv_fp8(q))
    if bits == 8:
        return QuantScheme("compressed-tensors", 8, FP8_BLOCK, 0.0, ignored, _kv_fp8(q))
    return QuantScheme("compressed-tensors", bits, 0.0, 0.0, ignored, _kv_fp8(q),
                       f"compressed-tensors {bits}-bit {kind} weights are not a scheme the memory model sizes")


def _modelopt(q: dict[str, Any], layers: int) -> QuantScheme:
    nested = q.get("quantization")
    inner: dict[str, Any] = nested if isinstance(nested, dict) else q
    algo = str(inner.get("quant_algo") or q.get("quant_algo") or "").upper()
    excluded = list(inner.get("exclude_modules") or q.get("exclude_modules") or q.get("ignore") or [])
    ignored = _ignored(excluded, layers)
    kv = _kv_fp8(inner) or _kv_fp8(q)
    if "FP4" in algo:
        return QuantScheme("modelopt_fp4", 4, NVFP4, 0.0, ignored, kv)
    if "FP8" in algo:
        return QuantScheme("modelopt_fp8", 8, FP8_BLOCK, 0.0, ignored, kv)
    return QuantScheme("modelopt", None, 0.0, 0.0, ignored, kv, f"ModelOpt quant_algo {algo or '?'} is not sized")


def _scheme(q: dict[str, Any], layers: int) -> QuantScheme:
    method = str(q.get("quant_method") or q.get("format") or "").lower()
    if "quantization" in q and isinstance(q["quantization"], dict) and not method:  # hf_quant_config.json
        return _modelopt(q, layers)
    if method == "compressed-tensors" or "config_groups" in q:
        return _compressed_tensors(q, layers)
    if method in ("modelopt", "modelopt_fp4", "modelopt_fp8") or "quant_algo" in q:
        return _modelopt(q, layers)
    if method in ("fp8", "fbgemm_fp8", "w8a8_fp8", "ptpc_fp8"):
        ignored = _ignored(list(q.get("ignored_layers") or q.get("modules_to_not_convert") or []), layers)
        return QuantScheme("fp8", 8, FP8_BLOCK, 0.0, ignored, _kv_fp8(q))
    if method == "mxfp4":  # GPT-OSS: the MoE experts only (modules_to_not_convert covers the rest)
        ignored = {**_ignored(list(q.get("modules_to_not_convert") or []), layers), "attention": (True,),
                   "dense_mlp": (True,), "lm_head": (True,)}
        return QuantScheme("mxfp4", 4, MXFP4, MXFP4, ignored, _kv_fp8(q))
    if method in ("awq", "awq_marlin", "gptq", "gptq_marlin", "moe_wna16"):
        bits = int(q.get("bits") or q.get("w_bit") or 4)
        g = int(q.get("group_size") or q.get("q_group_size") or 128)
        g = g if g > 0 else 4096
        per = bits / 8 + 2 / g + bits / 8 / g
        ignored = _ignored(list(q.get("modules_to_not_convert") or []), layers)
        return QuantScheme(method, bits, per, 0.0, ignored, _kv_fp8(q))
    return QuantScheme(method or None, None, 0.0, 0.0, {}, _kv_fp8(q),
                       f"quantization method {method or '?'} is not one the memory model sizes")


def detect_quant(cfg: dict[str, Any], text_cfg: dict[str, Any] | None = None,
                 hf_quant: dict[str, Any] | None = None, num_layers: int = SAMPLE_LAYERS) -> QuantScheme:
    """The checkpoint's quantization, from wherever it declares it (None of them: unquantized).

    ``expert_dtype`` (DeepSeek-V4: ``"fp4"``) overrides the routed experts' storage whatever the method.
    """
    q: Any = None
    for source in (cfg, text_cfg or {}):
        q = source.get("quantization_config") or source.get("compression_config")
        if isinstance(q, dict):
            break
    if not isinstance(q, dict) and isinstance(hf_quant, dict):
        q = hf_quant
    scheme = _scheme(q, num_layers) if isinstance(q, dict) else QuantScheme()
    expert_dtype = str((text_cfg or {}).get("expert_dtype") or cfg.get("expert_dtype") or "").lower()
    if expert_dtype in ("fp4", "mxfp4", "float4", "fp4_e2m1"):
        scheme = QuantScheme(scheme.method or "fp8", scheme.bits or 8, scheme.bytes_per_weight or FP8_BLOCK, MXFP4,
                             scheme.ignored, scheme.kv_cache_fp8, scheme.unknown_reason)
    return scheme
