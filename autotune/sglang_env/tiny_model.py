"""Tiny models for real SGLang on CPU, written locally (no hub): a config and a word-level tokenizer.

Served with ``--load-format dummy`` SGLang draws random weights from the config
alone, so a model directory is three small JSON files:

- ``config.json``: a small Llama or Qwen3 (the architectures SGLang serves on
  CPU with the torch-native attention backend), bf16;
- ``tokenizer.json``: a ``tokenizers`` WordLevel model with a whitespace
  pre-tokenizer and a post-processor that puts ``<s>`` in front of every input
  (a model whose prompts could be empty crashed 0.5.23's ``/health`` probe;
  a byte-level BPE decoded random ids into broken characters);
- ``tokenizer_config.json``: bos/eos/unk/pad and a chat template, so
  ``/v1/chat/completions`` works.

The vocabulary: 4 special tokens, the chat template's words, and made-up
lower-case words up to ``vocab_size``. Every id below ``vocab_size`` decodes
to a word, so random-weight output is readable and its token count is exact.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError

SPECIALS = ("<unk>", "<s>", "</s>", "<pad>")
_TEMPLATE_WORDS = ("system", "user", "assistant", ":")
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }} : {{ message['content'] }} "
    "{% endfor %}{% if add_generation_prompt %}assistant :{% endif %}"
)
_ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z"]
_VOWELS = ["a", "e", "i", "o", "u"]


@dataclass(frozen=True)
class TinyArch:
    architecture: str
    model_type: str
    extra: tuple[tuple[str, Any], ...] = ()


ARCHS: dict[str, TinyArch] = {
    "llama": TinyArch("LlamaForCausalLM", "llama", (("rope_theta", 10000.0), ("rms_norm_eps", 1e-5))),
    "qwen3": TinyArch("Qwen3ForCausalLM", "qwen3", (("rope_theta", 1000000.0), ("rms_norm_eps", 1e-6),
                                                    ("sliding_window", None), ("use_sliding_window", False),
                                                    ("max_window_layers", 2))),
}


def vocabulary(vocab_size: int) -> list[str]:
    """``vocab_size`` distinct tokens: the specials, the chat template's words, then made-up words."""
    words = [*SPECIALS, *_TEMPLATE_WORDS]
    made = (o1 + v1 + o2 + v2 for o1 in _ONSETS for v1 in _VOWELS for o2 in _ONSETS for v2 in _VOWELS)
    for w in made:
        if len(words) >= vocab_size:
            break
        words.append(w)
    if len(words) < vocab_size:
        raise ConfigError(f"vocab_size: {vocab_size} is more than the {len(words)} words the tiny tokenizer has")
    return words


def tokenizer_json(words: list[str]) -> dict[str, Any]:
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(SPECIALS)]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
        },
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(words)}, "unk_token": "<unk>"},
    }


def write_tiny_model(path: str | Path, arch: str = "llama", *, vocab_size: int = 384, hidden_size: int = 128,
                     num_layers: int = 2, num_heads: int = 4, num_kv_heads: int = 2,
                     max_position_embeddings: int = 2048) -> Path:
    """Write ``config.json``, ``tokenizer.json`` and ``tokenizer_config.json`` into ``path``."""
    if arch not in ARCHS:
        raise ConfigError(f"--arch: {arch!r} is not one of {', '.join(ARCHS)}")
    if hidden_size % num_heads or num_heads % num_kv_heads:
        raise ConfigError(f"--hidden-size: {hidden_size} must split into {num_heads} heads "
                          f"in groups of {num_kv_heads} KV heads")
    a = ARCHS[arch]
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    words = vocabulary(vocab_size)
    config = {
        "architectures": [a.architecture],
        "model_type": a.model_type,
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": hidden_size * 3,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": hidden_size // num_heads,
        "max_position_embeddings": max_position_embeddings,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 3,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "attention_bias": False,
        **dict(a.extra),
    }
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
        "add_bos_token": True, "add_eos_token": False, "clean_up_tokenization_spaces": False,
        "model_max_length": max_position_embeddings,
        "chat_template": CHAT_TEMPLATE,
    }
    gen_config = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3}
    for name, data in (("config.json", config), ("tokenizer.json", tokenizer_json(words)),
                       ("tokenizer_config.json", tok_config), ("generation_config.json", gen_config)):
        (out / name).write_text(json.dumps(data, indent=1, sort_keys=name != "tokenizer.json") + "\n")
    return out
