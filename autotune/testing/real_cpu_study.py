"""A small study of real SGLang on CPU, for fault checks (tests and ``benchmarks/faults_real.py``).

From a checkout: the study template and the tiny models are the repository's ``studies/``.
"""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
TINY_LLAMA = REPO / "studies" / "models" / "tiny-llama-cpu"
TINY_QWEN3 = REPO / "studies" / "models" / "tiny-qwen3-cpu"


def small_study(root: Path, python: str, *, name: str, version: str = "0.5.23", stall_s: float = 20.0,
                executor: dict[str, object] | None = None, space: dict[str, object] | None = None,
                n_trials: int = 2) -> Path:
    """studies/real-cpu-tiny.yaml made small for fault checks: ``n_trials`` of 16 prompts of 32 + 64
    tokens at c=8, a ``stall_s`` between-tokens limit (a hung server fails its load point after it)."""
    data = yaml.safe_load((REPO / "studies" / "real-cpu-tiny.yaml").read_text())
    data.update(name=name, n_trials=n_trials, sampler={"kind": "grid", "seed": 0}, executor=executor or {"kind": "inline"},
                run_dir=str(root / "run"), storage=str(root / "study.db"))
    data["server"].update(sglang_version=version, python=python, model_path=str(TINY_LLAMA), startup_timeout_s=600)
    data["search_space"] = space or {"max_running_requests": {"choices": [4, 8]},
                                     "max_total_tokens": {"choices": [4096]}}
    data["workload"].update(input_len=32, output_len=64, num_prompts=16, concurrency=[8], warmup_requests=1,
                            flush_cache=False, timeouts={"first_token_s": 120, "between_tokens_s": stall_s})
    data["search"] = {"confirm_top": 0, "early_stopping": {"enabled": False}}
    path = root / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path
