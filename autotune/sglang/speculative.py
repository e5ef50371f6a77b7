"""Speculative-decoding settings checked up front, the way SGLang will check them (``server_args.py``).

A candidate that SGLang would reject at startup is refused here with a
:class:`ConfigError`; one that SGLang would silently adjust is adjusted here
too, and each adjustment is explained in a note, so the trial records what the
server really ran.
"""

from __future__ import annotations

from dataclasses import replace

from autotune.errors import ConfigError
from autotune.sglang._flag_table import SPEC_ALGORITHMS_CLASSIC, SPEC_ALGORITHMS_MODERN
from autotune.sglang.config import SpeculativeConfig
from autotune.sglang.defaults import auto_speculative_params
from autotune.sglang.models import MTP_ARCHITECTURES
from autotune.sglang.versions import SglangVersion, as_version

__all__ = ["validate_speculative", "tokens_per_request"]

_NGRAM_BFS_BREADTH = 10
_NGRAM_DRAFT_TOKENS = 12


def tokens_per_request(spec: SpeculativeConfig) -> int:
    """Tokens one decode step verifies per request (1 without speculation)."""
    if not spec.enabled:
        return 1
    return int(spec.num_draft_tokens or 1)


def validate_speculative(
    spec: SpeculativeConfig,
    architecture: str,
    version: str | SglangVersion,
    *,
    attention_backend: str | None = None,
    page_size: int | None = None,
    dp_attention: bool = False,
) -> tuple[SpeculativeConfig, list[str]]:
    """Resolve ``spec`` as SGLang would for a target of ``architecture``.

    Returns the resolved config (algorithm alias resolved, auto-chosen
    steps/topk/draft tokens filled in, topk 1 => draft tokens = steps + 1) and
    one note per adjustment. Raises :class:`ConfigError` for what SGLang refuses.
    """
    v = as_version(version)
    notes: list[str] = []
    if not spec.enabled:
        if any(x is not None for x in (spec.draft_model_path, spec.num_steps, spec.eagle_topk, spec.num_draft_tokens)):
            notes.append("speculative settings ignored: speculative.algorithm is unset")
        return SpeculativeConfig(), notes

    algo = str(spec.algorithm).upper()
    allowed = SPEC_ALGORITHMS_CLASSIC if v.dialect == "classic" else SPEC_ALGORITHMS_MODERN
    if algo not in allowed:
        raise ConfigError(
            f"speculative.algorithm: {spec.algorithm!r} is not supported by SGLang {v} (choices: {', '.join(allowed)})"
        )
    for field in ("num_steps", "eagle_topk", "num_draft_tokens"):
        value = getattr(spec, field)
        if value is not None and int(value) < 1:
            raise ConfigError(f"speculative.{field}: must be >= 1, got {value}")
    if algo == "NEXTN":
        algo = "EAGLE"
        notes.append("NEXTN is an alias of EAGLE: rendered as EAGLE semantics (MTP layers of the target)")
    draft = spec.draft_model_path
    builtin_mtp = architecture in MTP_ARCHITECTURES
    if algo == "NGRAM":
        if draft is not None:
            notes.append("NGRAM uses no draft model: speculative.draft_model_path dropped")
            draft = None
        if dp_attention:
            raise ConfigError("speculative.algorithm: NGRAM does not support DP attention (SGLang refuses it)")
        if attention_backend is not None and attention_backend != "flashinfer":
            raise ConfigError(
                f"attention_backend: NGRAM speculative decoding requires flashinfer, got {attention_backend!r}"
            )
        breadth = _NGRAM_BFS_BREADTH
        if spec.eagle_topk is not None and spec.eagle_topk != breadth:
            notes.append(f"NGRAM: topk is the BFS breadth ({breadth}), eagle_topk={spec.eagle_topk} ignored")
        ngram_tokens = spec.num_draft_tokens or _NGRAM_DRAFT_TOKENS
        ngram_steps = spec.num_steps or max(ngram_tokens // breadth, 1)
        if spec.num_draft_tokens is None or spec.num_steps is None:
            notes.append(f"NGRAM: auto-chosen num_steps={ngram_steps}, num_draft_tokens={ngram_tokens}")
        return SpeculativeConfig("NGRAM", None, ngram_steps, breadth, ngram_tokens), notes

    if algo == "STANDALONE" and dp_attention:
        raise ConfigError("speculative.algorithm: STANDALONE does not support DP attention (SGLang refuses it)")
    if builtin_mtp and algo == "EAGLE":
        if draft is not None:
            notes.append(f"{architecture} has built-in MTP: SGLang warns that the draft path is not required")
    elif draft is None:
        raise ConfigError(
            f"speculative.draft_model_path: required for {spec.algorithm} with target {architecture} (no built-in MTP)"
        )

    given_steps, topk, draft_tokens = spec.num_steps, spec.eagle_topk, spec.num_draft_tokens
    if given_steps is None:
        if topk is not None or draft_tokens is not None:
            raise ConfigError(
                "speculative.num_steps: unset while eagle_topk/num_draft_tokens are set; "
                "SGLang requires all three unset (auto-chosen) or num_steps given"
            )
        steps, topk, draft_tokens = auto_speculative_params(algo, architecture, version=v)
        notes.append(f"auto-chosen (num_steps, eagle_topk, num_draft_tokens) = ({steps}, {topk}, {draft_tokens}) for {architecture}")
    else:
        steps = given_steps
    if topk is None:
        topk = 1
        notes.append("speculative.eagle_topk unset: using 1")
    if topk == 1 and draft_tokens != steps + 1:
        if draft_tokens is not None:
            notes.append(
                f"speculative_num_draft_tokens adjusted {draft_tokens} -> {steps + 1} "
                "(speculative_num_steps + 1 when speculative_eagle_topk == 1)"
            )
        draft_tokens = steps + 1
    if draft_tokens is None:
        raise ConfigError(f"speculative.num_draft_tokens: required when eagle_topk={topk} > 1")
    if topk > 1:
        if attention_backend == "trtllm_mha":
            raise ConfigError("speculative.eagle_topk: trtllm_mha backend only supports topk = 1")
        if page_size is not None and page_size > 1:
            ok = ("flashinfer", "fa3") if v < as_version("0.5.23") else ("flashinfer", "fa3", "triton")
            if attention_backend not in ok:
                raise ConfigError(
                    f"speculative.eagle_topk: topk={topk} with page_size={page_size} needs attention_backend in {ok}"
                )
    resolved = replace(spec, algorithm=algo, draft_model_path=draft, num_steps=steps, eagle_topk=topk, num_draft_tokens=draft_tokens)
    return resolved, notes
