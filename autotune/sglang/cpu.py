"""What real SGLang needs to run on CPU (``server.device: cpu``), per version.

Measured on a 2-core x86 machine without AMX (``docs/gpu-nodes.md``, real SGLang without a GPU):

- the env var ``SGLANG_USE_CPU_ENGINE=1`` (without it the model build dies at RoPE
  init importing vllm) and ``--device cpu``;
- ``--attention-backend torch_native`` (the CPU default ``intel_amx`` needs the
  real CPU kernels, which the registries do not carry);
- ``--max-total-tokens`` always: on CPU "avail mem" is the whole machine's
  available RAM, and ``--mem-fraction-static`` alone sized a 21.7M-token pool
  (20 s of allocation, ~10 GB committed);
- ``--sleep-on-idle``: without it the idle scheduler busy-polls a core, which on
  2 cores starves the load generator;
- ``--disable-overlap-schedule``, as in every successful CPU run.

0.5.23 turns CUDA graphs off by itself with torch_native; both 0.5.9 and 0.5.23
take the same flags here.
"""

from __future__ import annotations

from dataclasses import replace

from autotune.sglang.config import ServerConfig

CPU_ENV: dict[str, str] = {"SGLANG_USE_CPU_ENGINE": "1"}
CPU_ATTENTION_BACKEND = "torch_native"
CPU_DEFAULT_MAX_TOTAL_TOKENS = 8192
_CPU_FLAGS = ("--device", "cpu", "--disable-overlap-schedule", "--sleep-on-idle")


def cpu_flags(version: str) -> list[str]:
    """Flags every CPU launch carries (beyond the knobs ``ServerConfig`` renders)."""
    del version  # the same in 0.5.9 and 0.5.23; the place to branch when a release differs
    return list(_CPU_FLAGS)


def on_cpu(cfg: ServerConfig, version: str) -> ServerConfig:
    """``cfg`` made to run on CPU: torch-native attention and a KV cap unless the study set them,
    and the CPU flags in front of the study's own ``extra_args`` (not repeated)."""
    extra = list(cfg.extra_args)
    flags: list[str] = []
    pending = cpu_flags(version)
    i = 0
    while i < len(pending):
        name = pending[i]
        takes_value = i + 1 < len(pending) and not pending[i + 1].startswith("--")
        if name not in extra:
            flags += pending[i:i + 2] if takes_value else [name]
        i += 2 if takes_value else 1
    return replace(
        cfg,
        attention_backend=cfg.attention_backend or CPU_ATTENTION_BACKEND,
        max_total_tokens=cfg.max_total_tokens or CPU_DEFAULT_MAX_TOTAL_TOKENS,
        extra_args=(*flags, *extra),
    )
