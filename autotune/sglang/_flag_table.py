"""The ``sglang.launch_server`` flags autotune knows, with the versions that have them.

One row per flag, as SGLang's argparse declares it (``server_args.py`` ``add_cli_args``
at each release; 0.5.23 splits it over ``arg_groups/``). ``since`` / ``until`` are inclusive
version bounds; ``None`` means "all versions we model". The table is complete
enough for SGLang users' common launches, not a copy of SGLang's 300+ flags.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

__all__ = ["Flag", "FLAGS", "human_readable_int"]


@dataclass(frozen=True)
class Flag:
    """One command-line flag. ``names[0]`` is its canonical spelling (its dest follows it)."""

    names: tuple[str, ...]
    kind: str = "value"  # "value" or "bool" (store_true)
    type: Callable[[str], Any] = str
    default: Any = None
    choices: tuple[str, ...] | None = None
    nargs: str | None = None
    since: str | None = None
    until: str | None = None
    required: bool = False
    help: str = ""

    @property
    def name(self) -> str:
        return self.names[0]

    @property
    def dest(self) -> str:
        return self.names[0].lstrip("-").replace("-", "_")


def _b(*names: str, since: str | None = None, until: str | None = None, help: str = "") -> Flag:
    return Flag(names=names, kind="bool", since=since, until=until, help=help)


def _v(*names: str, **kw: Any) -> Flag:
    return Flag(names=names, **kw)


KV_CACHE_DTYPES_CLASSIC = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1")
KV_CACHE_DTYPES_MODERN = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")
ATTENTION_BACKENDS_CLASSIC = (
    "triton", "torch_native", "flex_attention", "nsa", "cutlass_mla", "fa3", "fa4", "flashinfer",
    "flashmla", "trtllm_mla", "trtllm_mha", "dual_chunk_flash_attn", "aiter", "wave", "intel_amx",
    "ascend", "intel_xpu",
)
# 0.5.23's ATTENTION_BACKEND_CHOICES, read from its parser: cutlass_mla and dual_chunk_flash_attn are gone.
ATTENTION_BACKENDS_MODERN = (
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "fa3", "fa4",
    "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla",
    "trtllm_mha", "hpc_ops", "minicpm_flashattn", "minicpm_flashinfer", "aiter", "wave", "intel_amx",
    "ascend", "intel_xpu",
)
LOAD_FORMATS_CLASSIC = (
    "auto", "pt", "safetensors", "npcache", "dummy", "sharded_state", "gguf", "bitsandbytes", "layered",
    "flash_rl", "remote", "remote_instance", "fastsafetensors", "private",
)
LOAD_FORMATS_MODERN = LOAD_FORMATS_CLASSIC + ("instanttensor", "presharded", "expert_pack", "mistral", "runai_streamer")
SPEC_ALGORITHMS_CLASSIC = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
SPEC_ALGORITHMS_MODERN = SPEC_ALGORITHMS_CLASSIC + ("DFLASH", "DSPARK", "UNO")
_MODERN = "0.5.23"
_LAST_CLASSIC = "0.5.22"
_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def human_readable_int(value: str) -> int:
    """SGLang 0.5.23's int type for token counts: ``8192``, ``32k`` (SI, decimals allowed), ``32Ki`` (IEC).

    Same name and behaviour as ``sglang.srt.utils.common.human_readable_int``,
    so the modelled parser accepts and refuses what the real one does.
    """
    text = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", text)
    if match:
        number, suffix = match.groups()
        if suffix in _IEC:
            if "." in number:
                raise argparse.ArgumentTypeError(f"Decimals are not allowed with IEC suffixes like {suffix!r}")
            return int(number) * _IEC[suffix]
        return int(Decimal(number) * _SI[suffix])
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Invalid integer value: {value!r}") from None


FLAGS: tuple[Flag, ...] = (
    # model and tokenizer
    _v("--model-path", "--model", required=True, help="model directory or hub id"),
    _v("--tokenizer-path"),
    _v("--tokenizer-mode", default="auto", choices=("auto", "slow")),
    _b("--skip-tokenizer-init"),
    _v("--revision"),
    _v("--load-format", default="auto", choices=LOAD_FORMATS_CLASSIC, until=_LAST_CLASSIC),
    _v("--load-format", default="auto", choices=LOAD_FORMATS_MODERN, since=_MODERN),
    _b("--trust-remote-code"),
    _v("--context-length", type=int, until=_LAST_CLASSIC),
    _v("--context-length", type=human_readable_int, since=_MODERN),
    _v("--dtype", default="auto", choices=("auto", "half", "float16", "bfloat16", "float", "float32")),
    _v("--quantization"),
    _v("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES_CLASSIC, until=_LAST_CLASSIC),
    _v("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES_MODERN, since=_MODERN),
    _v("--served-model-name"),
    _v("--chat-template"),
    _v("--reasoning-parser"),
    _v("--tool-call-parser"),
    _b("--is-embedding"),
    _b("--language-only"),
    _v("--download-dir"),
    _v("--config", help="YAML file of server args"),
    # HTTP server
    _v("--host", default="127.0.0.1"),
    _v("--port", type=int, default=30000),
    _v("--api-key"),
    _b("--skip-server-warmup"),
    _v("--warmups"),
    _b("--enable-metrics"),
    _b("--enable-cache-report"),
    _v("--log-level", default="info"),
    _v("--log-level-http"),
    _b("--log-requests"),
    _v("--watchdog-timeout", type=float, default=300.0),
    _v("--dist-timeout", type=int),
    _v("--file-storage-path", default="sglang_storage"),
    # parallelism
    _v("--tp-size", "--tensor-parallel-size", type=int, default=1),
    _v("--dp-size", "--data-parallel-size", type=int, default=1),
    _v("--ep-size", "--expert-parallel-size", "--ep", type=int, default=1),
    _v("--pp-size", "--pipeline-parallel-size", type=int, default=1),
    _b("--enable-dp-attention", help="deprecated from 0.5.23: use --attn-dp-size"),
    _v("--attn-dp-size", "--attention-data-parallel-size", type=int, default=1, since=_MODERN),
    _v("--nnodes", type=int, default=1),
    _v("--node-rank", type=int, default=0),
    _v("--dist-init-addr", "--nccl-init-addr"),
    _v("--base-gpu-id", type=int, default=0),
    _v("--gpu-id-step", type=int, default=1),
    _v("--device"),
    _v("--random-seed", type=int),
    # memory and scheduling
    _v("--mem-fraction-static", type=float),
    _v("--max-running-requests", type=int),
    _v("--max-queued-requests", type=int),
    _v("--max-total-tokens", type=int, until=_LAST_CLASSIC),
    _v("--max-total-tokens", type=human_readable_int, since=_MODERN),
    _v("--chunked-prefill-size", type=int),
    _v("--max-prefill-tokens", type=int, default=16384, until=_LAST_CLASSIC),
    _v("--max-prefill-tokens", type=human_readable_int, default=16384, since=_MODERN),
    _v("--page-size", type=int),
    _v("--schedule-policy", default="fcfs"),
    _v("--schedule-conservativeness", type=float, default=1.0),
    _b("--disable-radix-cache"),
    _b("--disable-overlap-schedule"),
    _b("--sleep-on-idle", help="idle scheduler sleeps instead of busy-polling a core (0.5.9 and 0.5.23)"),
    _b("--enable-mixed-chunk"),
    _v("--stream-interval", type=int, default=1),
    _b("--stream-output", until=_LAST_CLASSIC),  # absent from 0.5.23
    _b("--allow-auto-truncate"),
    _v("--cpu-offload-gb", type=int, default=0),
    _b("--enable-hierarchical-cache", until=_LAST_CLASSIC),
    _b("--enable-hierarchical-cache", "--enable-hicache", since=_MODERN),
    _v("--hicache-ratio", type=float, default=2.0),
    _v("--mamba-full-memory-ratio", type=float, default=0.9),
    _v("--max-mamba-cache-size", type=int),
    _v("--swa-full-tokens-ratio", type=float, default=0.8),
    _b("--disable-hybrid-swa-memory"),
    _b("--enable-deterministic-inference"),
    # kernels and backends
    *(
        _v(name, choices=choices, since=since, until=until)
        for since, until, choices in ((None, _LAST_CLASSIC, ATTENTION_BACKENDS_CLASSIC),
                                      (_MODERN, None, ATTENTION_BACKENDS_MODERN))
        for name in ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend")
    ),
    _v("--sampling-backend"),
    _v("--mm-attention-backend"),
    _v("--moe-runner-backend", default="auto"),
    _v("--moe-a2a-backend", default="none"),
    _b("--enable-eplb"),
    _v("--ep-num-redundant-experts", type=int, default=0),
    _b("--disable-shared-experts-fusion"),
    _b("--enable-torch-compile"),
    _v("--torch-compile-max-bs", type=int, default=32),
    # CUDA graphs
    _v("--cuda-graph-max-bs", type=int, until=_LAST_CLASSIC),
    _v("--cuda-graph-bs", type=int, nargs="+", until=_LAST_CLASSIC),
    _v("--cuda-graph-max-bs-decode", type=int, since="0.5.19"),
    _v("--cuda-graph-max-bs-prefill", type=int, since="0.5.19"),
    _v("--cuda-graph-bs-decode", type=int, nargs="+", since="0.5.19"),
    _v("--cuda-graph-bs-prefill", type=int, nargs="+", since="0.5.19"),
    _b("--disable-cuda-graph", help="deprecated in 0.5.23: alias for both graph backends disabled"),
    _b("--disable-cuda-graph-padding"),
    _b("--disable-decode-cuda-graph", since=_MODERN),
    _b("--disable-prefill-cuda-graph", since=_MODERN),
    _v("--cuda-graph-backend-decode", choices=("full", "breakable", "disabled"), since=_MODERN),
    _v("--cuda-graph-backend-prefill", choices=("full", "breakable", "disabled"), since=_MODERN),
    _v("--cuda-graph-config", since=_MODERN),
    _b("--enable-piecewise-cuda-graph", until="0.5.11"),
    _b("--disable-piecewise-cuda-graph", since="0.5.12", until=_LAST_CLASSIC),
    _v("--piecewise-cuda-graph-max-tokens", type=int, until=_LAST_CLASSIC),
    # all-reduce
    _b("--disable-custom-all-reduce"),
    _b("--enable-mscclpp"),
    _b("--enable-torch-symm-mem"),
    _b("--enable-symm-mem"),
    _b("--enable-p2p-check"),
    _b("--enable-flashinfer-allreduce-fusion", help="deprecated in 0.5.23 (= backend auto)"),
    _v("--flashinfer-allreduce-fusion-backend", choices=("auto", "trtllm", "mnnvl", "cutedsl"), since=_MODERN),
    _b("--enforce-disable-flashinfer-allreduce-fusion", since=_MODERN),
    # speculative decoding
    _v("--speculative-algorithm", choices=SPEC_ALGORITHMS_CLASSIC, until=_LAST_CLASSIC),
    _v("--speculative-algorithm", since=_MODERN),
    _v("--speculative-draft-model-path", "--speculative-draft-model"),
    _v("--speculative-draft-model-revision"),
    _v("--speculative-draft-load-format"),
    _v("--speculative-num-steps", type=int),
    _v("--speculative-eagle-topk", type=int),
    _v("--speculative-num-draft-tokens", type=int),
    _v("--speculative-token-map"),
    _v("--speculative-attention-mode", choices=("prefill", "decode"), default="prefill"),
    _v("--speculative-accept-threshold-single", type=float, default=1.0),
    _v("--speculative-accept-threshold-acc", type=float, default=1.0),
    _v("--speculative-ngram-max-bfs-breadth", type=int, default=10),
    _v("--speculative-ngram-max-match-window-size", type=int, default=12, until=_LAST_CLASSIC),
    _v("--speculative-ngram-match-type", choices=("BFS", "PROB"), default="BFS"),
    _v("--speculative-draft-kv-cache-dtype", since=_MODERN),
    _v("--speculative-draft-attention-backend", since=_MODERN),
    _v("--speculative-moe-runner-backend", since=_MODERN),
    _b("--speculative-use-rejection-sampling", since=_MODERN),
    _b("--speculative-adaptive", since=_MODERN),
    # LoRA
    _b("--enable-lora"),
    _v("--lora-paths", nargs="*"),
    _v("--max-loras-per-batch", type=int, default=8),
)
