"""``write_tiny_llama``: a tiny Llama on disk (dummy weights, WordLevel tokenizer; docs/gpu-nodes.md),
such as the suite's shared real server serves, for tests that need one on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def write_tiny_llama(path: Path) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    path.mkdir(parents=True, exist_ok=True)
    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    words = [a + b + c + d for a in "bcdf" for b in "aeiou" for c in "bcdfg" for d in "aeiou"][: 384 - len(specials)]
    vocab = {w: i for i, w in enumerate(specials + words)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.add_special_tokens(specials)
    tok.post_processor = tokenizers.processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(str(path / "tokenizer.json"))
    (path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "bos_token_id": 1, "eos_token_id": 2,
        "pad_token_id": 3, "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "hidden_act": "silu",
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "attention_bias": False,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 384}))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "pad_token": "<pad>", "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 2048,
        "clean_up_tokenization_spaces": False,
        "chat_template": "{% for message in messages %}{{ message['role'] }} : {{ message['content'] }} {% endfor %}"
                         "{% if add_generation_prompt %}assistant :{% endif %}"}))
    (path / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3}))
    return path
