"""The study of issue 35: ``studies/demo.yaml`` moved to a dense Qwen3-32B-class model at TP 2 on 8 GPUs,
where the node removes ``--attn-dp-size 8`` from the space (used by the inline and the Ray tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DP8 = "--attn-dp-size"
#: Why the value cannot run at TP 2 (autotune.sglang.knobs.rules), as ``autotune plan`` says it.
REASON = "8 divides no TP size of the space (2): SGLang asserts tp_size % dp_size == 0 under DP attention"
#: The start of the line that drops it.
GONE = f"--attn-dp-size=8 left the space before the study started: {REASON}"


def issue_study(tmp_path: Path, name: str = "qwen32-tp2", **over: Any) -> Path:
    """The issue's study: ``studies/demo.yaml`` moved to a dense Qwen3-32B-class model at TP 2 on 8
    GPUs, speculative and ``search`` sections removed, ``n_trials: 12`` (a smaller workload: the
    offline evaluator's time goes with the requests)."""
    data = yaml.safe_load((ROOT / "studies" / "demo.yaml").read_text())
    data.update(name=name, n_trials=12, storage=str(tmp_path / f"{name}.db"), run_dir=str(tmp_path / "runs" / name))
    data["server"].update(model_path=str(ROOT / "studies" / "models" / "qwen3-32b-class"), tp_size=2)
    del data["search_space"]["speculative"], data["search"]
    assert data["search_space"]["flags"][DP8] == {"choices": [1, 8]}
    data["workload"].update(num_prompts=64, output_len=32)
    for key, value in over.items():
        data[key] = value
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path
