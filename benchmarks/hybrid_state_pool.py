"""The hybrid models' state pool: KV tokens as autotune predicts them, as SGLang's rule gives them, and as
the simulated server allocates them, across ``--max-running-requests`` and the radix cache (issue 36).

Two classes at SGLang 0.5.23 on one H100 (f 0.9, no calibration): a Nemotron-H-8B-class model (24 Mamba2
layers, 4 attention layers) and a Qwen3-Next-80B-A3B-class one at TP 4 (36 gated-delta-net layers, 12
attention layers). For each launch:

* ``rule``: SGLang's sizing written out here from its code, not from autotune's (0.5.23
  ``python/sglang/srt/mem_cache/kv_cache_configurator.py``: slots ``N // dp`` (:3303-3322), radix off with
  ``--max-running-requests M`` ``max(1, M // dp)`` (:3323-3347), else ``int((rest x 0.9/1.9 - s) // s)``
  (:3348-3389); the KV pool gets ``rest - (slots + 1) x s`` (:3405-3409)), applied to the predictor's own
  ``rest`` so only the pool is compared [source];
* ``predicted``: ``autotune.sglang.memory.predict`` (what ``autotune plan`` shows) [modelled];
* ``simulated``: the simulated server's memory truth (``autotune.sim.hardware.plan_memory``) [modelled].

The column ``before`` is what the predictor gave before issue 36 (the ratio split whatever the flags):
``rule`` with the ratio branch. Nothing here is timed.

Usage::

    python benchmarks/hybrid_state_pool.py
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

from autotune.sglang.config import ServerConfig
from autotune.sglang.memory import predict
from autotune.sglang.models import ModelProfile, load_model_profile
from autotune.sglang.profiles.mamba import state_bytes_per_request
from autotune.sim.args import parse_args
from autotune.sim.hardware import plan_memory

GIB = 2**30
#: Nemotron-H-8B's layout (nvidia/Nemotron-H-8B-Base-8K config.json): 52 single-block layers, 24 Mamba2.
NEMOTRON_H = {"architectures": ["NemotronHForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
              "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 52,
              "hybrid_override_pattern": "M-M-M-M*-" * 4 + "M-M-M-M-", "mamba_num_heads": 128,
              "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
              "intermediate_size": 21504, "vocab_size": 131072, "max_position_embeddings": 8192}
#: Qwen3-Next-80B-A3B's layout (Qwen/Qwen3-Next-80B-A3B-Instruct config.json): 12 attention, 36 gated-delta-net.
QWEN3_NEXT = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
              "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "num_hidden_layers": 48,
              "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
              "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_value_head_dim": 128,
              "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
              "shared_expert_intermediate_size": 512, "intermediate_size": 5120, "vocab_size": 151936,
              "num_nextn_predict_layers": 1, "max_position_embeddings": 262144}
CASES = (("nemotron-h-8b-class", NEMOTRON_H, 1), ("qwen3-next-80b-class", QWEN3_NEXT, 4))
LAUNCHES: tuple[tuple[bool, int | None], ...] = ((True, None), (True, 8), (True, 256), (False, 8), (False, 32),
                                                 (False, 256))
F = 0.9


def rule_slots(rest_bytes: float, s: float, radix: bool, mrr: int | None) -> int:
    """SGLang 0.5.23's slot count (module docstring), one attention-DP rank."""
    if not radix and mrr is not None:
        return max(1, mrr)
    return int((rest_bytes * 0.9 / 1.9 - s) // s)


def row(model: ModelProfile, path: Path, tp: int, radix: bool, mrr: int | None) -> dict[str, Any]:
    extra = () if radix else ("--disable-radix-cache",)
    cfg = ServerConfig(model_path=str(path), tp_size=tp, mem_fraction_static=F, max_running_requests=mrr,
                       extra_args=extra)
    pred = predict(model, "h100", cfg, version="0.5.23", interconnect="nvlink")
    s = state_bytes_per_request(model.kv_layout.mamba, tp)  # type: ignore[union-attr]
    rest = pred.kv_gib * GIB
    slots = rule_slots(rest, s, radix, mrr)
    rule = math.floor((rest - (slots + 1) * s) / pred.cell_bytes)
    before = math.floor((rest - (rule_slots(rest, s, True, None) + 1) * s) / pred.cell_bytes)
    argv = (f"--model-path {path} --tp-size {tp} --mem-fraction-static {F} --sim-gpu h100 --sim-interconnect nvlink "
            f"--sim-sglang-version 0.5.23" + (f" --max-running-requests {mrr}" if mrr else "")
            + ("" if radix else " --disable-radix-cache")).split()
    launch, sim = parse_args(argv)
    plan = plan_memory(launch, model, None, sim.gpu, version=sim.version, interconnect=sim.interconnect)
    return {"radix": radix, "mrr": mrr, "slots": slots, "state_gib": (slots + 1) * s / GIB, "before": before,
            "rule": rule, "predicted": pred.kv_tokens, "simulated": plan.kv_tokens,
            "err_pct": 100.0 * (pred.kv_tokens - rule) / rule, "running": pred.max_running_requests}


def main(argv: list[str] | None = None) -> int:
    as_json = "--json" in (argv if argv is not None else sys.argv[1:])
    out: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfg, tp in CASES:
            path = Path(tmp) / name
            path.mkdir()
            (path / "config.json").write_text(json.dumps(cfg))
            model = load_model_profile(path)
            out[name] = [row(model, path, tp, radix, mrr) for radix, mrr in LAUNCHES]
    if as_json:
        print(json.dumps(out, indent=1))
        return 0
    worst = 0.0
    for name, rows in out.items():
        print(f"{name} on H100 (TP {dict((n, t) for n, _, t in CASES)[name]}), SGLang 0.5.23, f {F}, cold")
        print(f"  {'radix':>5} {'--max-running':>13} {'slots':>6} {'state GiB':>9} {'before #36':>11} {'rule':>10} "
              f"{'predicted':>10} {'err%':>6} {'simulated':>10} {'running':>8}")
        for r in rows:
            worst = max(worst, abs(r["err_pct"]))
            print(f"  {'on' if r['radix'] else 'off':>5} {str(r['mrr'] or '-'):>13} {r['slots']:>6} "
                  f"{r['state_gib']:>9.2f} {r['before']:>11,} {r['rule']:>10,} {r['predicted']:>10,} "
                  f"{r['err_pct']:>+6.2f} {r['simulated']:>10,} {r['running']:>8}")
    print(f"worst |predicted - rule| / rule: {worst:.2f} % (goal: within 5 %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
