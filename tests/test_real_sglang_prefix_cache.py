"""Against REAL SGLang on CPU: a shared-prefix workload gets ``cached_tokens > 0`` from the
server, and autotune's hit rate equals the server's own count (its ``Prefill batch.`` log
lines: ``#cached-token`` over ``#cached-token + #new-token``) within 1 %.

Runs on the suite's shared real server (tests/real_sglang.py ``real_server``: SGLang 0.5.23 on
CPU, the tiny Llama, ``--enable-cache-report``); without the venv it is skipped, except under
``CI=true`` where it fails. ``write_tiny_llama`` writes such a model (dummy weights, WordLevel
tokenizer; docs/gpu-nodes.md) for tests that need one on disk.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from real_sglang import TINY_LLAMA

from autotune.launch import ServerProcess
from autotune.load import LoadSpec, run_load
from autotune.load.workloads import validate_workload

pytestmark = pytest.mark.real_sglang

_PREFILL = re.compile(r"Prefill batch.*?#new-token: (\d+), #cached-token: (\d+)")


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


def test_real_sglang_reports_cached_tokens_and_autotunes_hit_rate_is_the_servers(real_server: ServerProcess) -> None:
    log_path = Path(real_server.log_path)
    gsp = {"kind": "generated-shared-prefix", "num_groups": 2, "prompts_per_group": 8, "system_prompt_len": 128,
           "question_len": 16, "output_len": 4}
    results = {}
    for backend in ("sglang", "openai"):
        before = len(log_path.read_text(errors="replace").splitlines())
        spec = LoadSpec(backend=backend, concurrency=4, warmup_requests=0, flush_cache=True,
                        dataset=validate_workload(gsp), tokenizer=TINY_LLAMA)
        m = run_load(real_server.url, spec).metrics
        lines = log_path.read_text(errors="replace").splitlines()[before:]
        new = cached = 0
        for line in lines:
            if (hit := _PREFILL.search(line)) is not None:
                new += int(hit.group(1))
                cached += int(hit.group(2))
        results[backend] = (m, cached, new)
    for backend, (m, cached, new) in results.items():
        assert m["completed"] == 16 and m["failed"] == 0, backend
        assert m["total_cached_tokens"] > 0 and cached > 0, backend
        assert m["cache_hit_rate"] == pytest.approx(cached / (cached + new), abs=0.01), (backend, m, cached, new)
