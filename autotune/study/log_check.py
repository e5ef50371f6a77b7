"""Does a server log belong to this study? (``autotune calibrate --from-log``, before anything is stored.)

Three things a startup log says about itself, each held against the study:

- the architecture SGLang instantiated ("Load weight end. ... type=Qwen2ForCausalLM") vs the study
  model's ``architectures[0]``;
- the ``tp_size`` / ``dp_size`` of the logged server arguments (``server_args=ServerArgs(tp_size=4, ...)``
  up to 0.5.22, ``server_args={'tp_size': 4, ...}`` from 0.5.23: ``entrypoints/engine.py:311``) vs the
  sizes the study can launch (its server, layouts and DP-attention choices); rank tags above the
  study's largest TP size say the same without the arguments;
- P, the free memory before the weights ("Load weight begin ... avail mem"), vs the study GPU's
  capacity: P cannot exceed it, and sits within a few GiB under it (CUDA context, NCCL, custom
  allreduce); below 80 % of it the log comes from a smaller GPU (a 24 GiB L4's ~21 GiB for a 140 GiB
  H200 study) or from one other processes held;
- the weights one rank loaded ("Load weight end ... mem usage") vs the study model's own size at the
  log's TP: under half of it is a smaller model of the same architecture (Qwen3-8B's 15 GiB for a
  Qwen3-32B study, whose KV pool the calibration would then overstate 24-fold), unless the study's
  launch quantizes the checkpoint itself (``--quantization``); more than the whole model on one GPU is
  a larger one. Between the two: DP attention keeps attention weights whole per rank (2.1 x on
  DeepSeek R1 at DP 8), an FP8 launch of a BF16 checkpoint halves them (0.58 x on Qwen3-8B), both
  public logs of ``tests/data/public_logs``.

What the log does not show is not held against it.
"""

from __future__ import annotations

import re
from typing import Any

from autotune.errors import ConfigError
from autotune.limits import MAX_COUNT, clip, shown
from autotune.spec import StudySpec, parse_layout

__all__ = ["LOGGED_AS", "P_FLOOR_SHARE", "contradictions", "logged_sizes", "same_architecture"]

#: Classes a release instantiates for a checkpoint whose ``architectures[0]`` names another: DeepSeek
#: V3.2's checkpoints were served by the V3 class before ``DeepseekV32ForCausalLM`` existed (public
#: log: ktransformers #1751 logs ``type=DeepseekV3ForCausalLM`` for a ``DeepseekV32ForCausalLM``
#: config); 0.5.23 has its own class (``srt/models/deepseek_v2.py:3522``).
LOGGED_AS = {"deepseekv32forcausallm": frozenset({"deepseekv3forcausallm", "deepseekv2forcausallm"})}

#: P below this share of the GPU's capacity is another GPU's (or a crowded one's).
P_FLOOR_SHARE = 0.80
#: Logged weights per GPU under this share of the model's own (at the log's TP) are another model's.
WEIGHT_FLOOR_SHARE = 0.5
_SIZE_RE = {k: re.compile(rf"""['"]?\b{k}['"]?\s*[:=]\s*(\d+)""") for k in ("tp_size", "dp_size")}


def logged_sizes(text: str, where: str = "log") -> dict[str, int]:
    """``tp_size`` / ``dp_size`` from the first server-arguments line of ``text`` (empty when none).

    A size past 2^40 (``MAX_COUNT``, as config.json's counts) is no size: ConfigError naming ``where``,
    the key and the value, clipped (5,000 digits were a ValueError traceback, 4,000 an OverflowError
    in the weights arithmetic).
    """
    for line in text.splitlines():
        if "server_args=" in line:
            out = {}
            for key, rx in _SIZE_RE.items():
                m = rx.search(line)
                if m:
                    digits = m.group(1)
                    if len(digits) > len(str(MAX_COUNT)) or int(digits) > MAX_COUNT:
                        raise ConfigError(f"{where}: server_args {key}={clip(digits, 60)} is not a size "
                                          "(a number from 0 to 2^40)")
                    out[key] = int(digits)
            return out
    return {}


def _study_sizes(spec: StudySpec) -> tuple[set[int], set[int]]:
    """Every TP size and every DP size (plain replicas or attention DP) a trial of the study can have."""
    tps, dps = {spec.server.tp_size}, {spec.server.dp_size, 1}
    space = spec.search_space
    if space.layout is not None:
        for choice in space.layout.choices:
            tp, dp, _ep = parse_layout(choice)
            tps.add(tp)
            dps.add(dp)
    attn = space.flags.get("--attn-dp-size")
    if attn is not None:
        dps.update(int(v) for v in attn.choices if isinstance(v, int))
    return tps, dps


def same_architecture(logged: str, study: str) -> bool:
    """Whether a log's ``type=`` class can have served the study model's ``architectures[0]``."""
    a, b = logged.lower(), study.lower()
    return a in b or b in a or a in LOGGED_AS.get(b, ())


def _sizes(xs: set[int]) -> str:
    return "/".join(map(str, sorted(xs)))


def contradictions(spec: StudySpec, text: str, summary: dict[str, Any], events: list[Any],
                   model: Any | None, gpu: Any | None, where: str = "log") -> list[str]:
    """One line per contradiction between the log and the study, each naming both sides (empty: none).

    Every value taken from the log is clipped (a ``type=`` of 2 MB was a 2 MB error line); ``where``
    names the log in the error a server-arguments size past 2^40 raises (:func:`logged_sizes`).
    """
    out: list[str] = []
    from autotune.sglang.logparse import is_target

    logged_arch = next((e.values.get("architecture") for e in events
                        if e.kind == "weights_loaded" and e.values.get("architecture") and is_target(e)), None)
    study_arch = getattr(model, "architecture", "") if model is not None else ""
    if logged_arch and study_arch:
        if not same_architecture(logged_arch, study_arch):
            out.append(f"architecture: the log loaded {clip(logged_arch, 60)}, "
                       f"the study's model is {clip(study_arch, 60)}")
    tps, dps = _study_sizes(spec)
    sizes = logged_sizes(text, where)
    if "tp_size" in sizes and sizes["tp_size"] not in tps:
        out.append(f"tp_size: the log's server ran tp_size={sizes['tp_size']}, the study launches TP {_sizes(tps)}")
    elif "tp_size" not in sizes and summary.get("ranks") and max(summary["ranks"]) + 1 > max(tps):
        out.append(f"tp_size: the log has rank TP{shown(max(summary['ranks']))}, "
                   f"the study launches TP {_sizes(tps)}")
    if "dp_size" in sizes and sizes["dp_size"] not in dps:
        out.append(f"dp_size: the log's server ran dp_size={sizes['dp_size']}, the study's DP sizes are {_sizes(dps)}")
    weights = _weights_contradiction(spec, summary.get("weights_gib"), model, sizes.get("tp_size") or max(tps))
    if weights:
        out.append(weights)
    p = summary.get("p_gib")
    if p is not None and gpu is not None and spec.server.device != "cpu":
        cap = float(gpu.memory_gib)
        if p > cap + 0.05 or p < P_FLOOR_SHARE * cap:
            where = "more than" if p > cap else f"under {P_FLOOR_SHARE:.0%} of"
            out.append(f"memory: the log's P is {p:.2f} GiB, {where} the study GPU's capacity "
                       f"({spec.hardware.gpu}: {cap:.2f} GiB)")
    return out


def _weights_contradiction(spec: StudySpec, logged: float | None, model: Any | None, tp: int) -> str | None:
    """The weights line when the log's weights per GPU cannot be the study model's (module docstring)."""
    if logged is None or model is None or model.is_unknown or not model.weight_bytes:
        return None
    from autotune.sglang.models.sizing import weight_bytes_per_gpu

    own = weight_bytes_per_gpu(model, tp) / 2**30
    whole = (model.weight_bytes + model.post_load_weight_bytes) / 2**30
    quantizes = any(a == "--quantization" or a.startswith("--quantization=") for a in spec.server.extra_args)
    if logged < WEIGHT_FLOOR_SHARE * own and not quantizes:
        return (f"weights: the log's server loaded {logged:.2f} GiB per GPU, under half of the study model's "
                f"{own:.2f} GiB at TP {tp} ({model.name}): a smaller model")
    if logged > 1.15 * whole + 1.0:
        return (f"weights: the log's server loaded {logged:.2f} GiB per GPU, more than the study model's "
                f"whole {whole:.2f} GiB ({model.name}): a larger model")
    return None
