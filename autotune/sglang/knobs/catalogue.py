"""The knob catalogue: what autotune knows about each launch knob, as data.

One :class:`Knob` entry per knob. A study names a knob by its search-space
name: a typed knob of ``search_space`` (``mem_fraction_static``), a flag under
``search_space.flags`` (``--moe-runner-backend``), or an environment variable
under ``search_space.env`` (``SGLANG_ENABLE_PCIE_IPC_ALLREDUCE``). An entry
says how the knob is spelled (flag spellings, newest first: a release renders
the first its own flag table has; which releases have a flag is read from
``flags/release_tables/``, never repeated here), its value type, the releases and
hardware where it matters (:mod:`autotune.sglang.knobs.rules` holds the rules),
what it needs and excludes, and how the memory model and the simulator read it
(``memory`` / ``speed``; an empty ``memory`` means no memory effect).

Adding a knob is one entry here plus its effects (memory model, simulator).
A flag or variable with no entry is still searchable: the release's parser
validates it, it renders as written, and no memory or speed effect is assumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.sglang.flags.release_tables import known_versions, table_for
from autotune.sglang.versions import SglangVersion, as_version

__all__ = ["CATALOGUE", "Knob", "describe", "exists_in", "lookup", "releases", "spelling"]


@dataclass(frozen=True)
class Knob:
    """One knob autotune knows."""

    name: str  # the search-space name (a typed knob, a flag, or an env var)
    kind: str  # "typed" (a field of search_space), "flag" (search_space.flags), "env" (search_space.env)
    flags: tuple[str, ...] = ()  # flag spellings, newest first; the release renders the first its table has
    value: str = "str"  # bool | int | float | str
    values: tuple[Any, ...] | None = None  # env values / typical choices (a flag's choices come from its table)
    since: str | None = None  # env vars only: the first release that reads it (flags: from the tables)
    field: str | None = None  # the ServerConfig field it sets, when the config models it
    needs: str = ""
    excludes: str = ""
    memory: str = ""  # how the memory model reads it ("" = no memory effect)
    speed: str = ""  # how the simulator models it, with its source
    hardware: str = ""  # where it matters (the rule is in knobs.rules)

    @property
    def reads_memory(self) -> bool:
        return bool(self.memory)


def _k(name: str, kind: str, **kw: Any) -> Knob:
    return Knob(name=name, kind=kind, **kw)


_HYBRID = "hybrid Mamba / linear-attention models only (Qwen3-Next, Qwen3.5, Nemotron-H, Falcon-H1)"
_IPC_SRC = "SGLang 0.5.23 pcie_ipc_ar.py docstring (8 x SM120, TP 8: TPOT 21.14 -> 13.62 ms)"

CATALOGUE: dict[str, Knob] = {k.name: k for k in (
    # ---- typed knobs of search_space ------------------------------------------------------
    _k("mem_fraction_static", "typed", flags=("--mem-fraction-static",), value="float", field="mem_fraction_static",
       memory="rest = A - P x (1 - f): the KV pool", speed="through the KV pool (running batch, retractions)"),
    _k("cuda_graph_max_bs", "typed", flags=("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"), value="int",
       field="cuda_graph_max_bs", memory="graph memory and SGLang's automatic f reserve (max_bs x 2 MB)",
       speed="graph replay up to max_bs, eager above; PCIe graph penalty (sim/perf/comm.py, calibrated on the seed's +9 %)"),
    _k("custom_allreduce", "typed", flags=("--disable-custom-all-reduce",), value="bool", field="custom_allreduce",
       hardware="NVLink / xGMI, or PCIe at TP 2 (ROCm: 16 MiB buffer, quick allreduce opt-in)",
       memory="IPC buffers (comm_buffers_gib)",
       speed="one-shot/two-shot IPC allreduce <= 8 MiB where SGLang keeps it active"),
    _k("flashinfer_allreduce_fusion", "typed",
       flags=("--flashinfer-allreduce-fusion-backend", "--enable-flashinfer-allreduce-fusion"), value="bool",
       field="flashinfer_allreduce_fusion", hardware="SM90 / SM100 only (never ROCm), not under DP attention",
       speed="fused allreduce+RMSNorm <= 2048 tokens (sim/perf/comm.py)"),
    _k("enable_torch_symm_mem", "typed", flags=("--enable-torch-symm-mem",), value="bool",
       field="enable_torch_symm_mem", hardware="NVLink multicast", memory="symmetric-memory buffers",
       speed="symmetric-memory allreduce on NVLink"),
    _k("speculative", "typed", flags=("--speculative-algorithm",), value="str", values=("EAGLE", "EAGLE3", "NEXTN"),
       field="speculative", needs="a draft model (EAGLE/EAGLE3) or the model's own MTP layers (NEXTN)",
       excludes="--enable-mixed-chunk (SGLang turns it off)",
       memory="draft weights, draft KV folded into the cell (0.5.14+), auto f reserve",
       speed="acceptance per depth (EAGLE 0.60, EAGLE3 0.75, MTP 0.78 [typical published]) vs verify cost"),
    _k("chunked_prefill_size", "typed", flags=("--chunked-prefill-size",), value="int", field="chunked_prefill_size",
       memory="activation reserve of the automatic f (chunk x 1.5 MB)", speed="prefill chunk per step"),
    _k("max_running_requests", "typed", flags=("--max-running-requests",), value="int",
       field="max_running_requests", memory="caps the graph max bs (0.5.22+); hybrid (Mamba / linear-attention) "
       "models: the state pool's slots with the radix cache off, and the draft's intermediate states "
       "(models/mamba.py)", speed="caps the running batch"),
    _k("kv_cache_dtype", "typed", flags=("--kv-cache-dtype",), value="str", field="kv_cache_dtype",
       memory="cell size (fp8 1 byte; e4m3fnuz on MI300X/MI325X, 1 byte too)", speed="KV bytes read per decode step"),
    _k("attention_backend", "typed", flags=("--attention-backend",), value="str", field="attention_backend",
       hardware="CUDA: flashinfer / fa3 / triton / ...; ROCm: aiter (f x 0.85 above an 8192 context) / triton",
       speed="SM120 default: triton for MLA, flashinfer for MHA; other back-ends scale attention time "
             "(ATTENTION_BACKEND_SPEED, modelled; on Hopper against FA3, fitted: ATTENTION_BACKEND_SPEED_SM90)"),
    # ---- flags searched by name (search_space.flags) ---------------------------------------
    _k("--attn-dp-size", "flag", flags=("--attn-dp-size", "--enable-dp-attention"), value="int", field="attn_dp_size",
       needs="a divisor of tp_size; a model SGLang supports DP attention for (DeepSeek/Qwen MoE class)",
       excludes="plain --dp-size replicas in the same server; FlashInfer allreduce fusion",
       memory="KV pool per attention-DP rank (server capacity x dp for MLA); the attn-TP-sharded attention "
              "projections (MLA: and the absorbed kv_b copies) and the embedding whole per attention-TP group "
              "(dp_attention.py); SGLang's auto f reserve +max_bs x dp x 3 MiB (x1.5 above 300)",
       speed="attention over B/dp requests per rank, the attention allreduce replaced by one gather per layer"),
    _k("--ep-size", "flag", flags=("--ep-size", "--expert-parallel-size"), value="int", field="ep_size",
       needs="an MoE model; ep_size divides tp_size", speed="expert GEMMs whole on ep ranks: an all-to-all per MoE "
       "layer instead of the MoE allreduce (modelled)"),
    _k("--moe-a2a-backend", "flag", flags=("--moe-a2a-backend",), value="str", values=("none", "deepep"),
       needs="an MoE model; deepep/mooncake need NVLink or RDMA", hardware="deepep: NVLink/RDMA nodes",
       memory="deepep: +2 GiB reserve of the automatic f (0.5.23 memory_hook)",
       speed="deepep sets ep_size = tp_size (SGLang _handle_a2a_moe)"),
    _k("--moe-runner-backend", "flag", flags=("--moe-runner-backend",), value="str",
       values=("auto", "triton", "flashinfer_cutlass"), needs="an MoE model",
       speed="expert GEMM efficiency per back-end on SM120 (MOE_RUNNER_SPEED, modelled; DeepGEMM crashed on SM120, "
             "issue #18870; 0.5.23 forces flashinfer_cutlass on SM120 for some models, overrides.py:1516)"),
    _k("--fp8-gemm-backend", "flag", flags=("--fp8-gemm-backend",), value="str", values=("auto", "triton", "cutlass"),
       needs="an FP8 checkpoint", speed="dense FP8 GEMM efficiency (FP8_GEMM_SPEED, modelled)"),
    _k("--enable-torch-compile", "flag", flags=("--enable-torch-compile",), value="bool",
       memory="not modelled (compiled graphs share the CUDA-graph pool)",
       speed="decode at batch <= --torch-compile-max-bs runs TORCH_COMPILE_SPEEDUP faster (modelled)"),
    _k("--torch-compile-max-bs", "flag", flags=("--torch-compile-max-bs",), value="int", values=(32,),
       needs="--enable-torch-compile", speed="the batch limit of the torch.compile speed-up"),
    _k("--disable-overlap-schedule", "flag", flags=("--disable-overlap-schedule",), value="bool",
       speed="the CPU scheduling of each step is no longer hidden (OVERLAP_HIDDEN_S, modelled)"),
    _k("--num-continuous-decode-steps", "flag", flags=("--num-continuous-decode-steps",), value="int", values=(1,),
       speed="scheduler overhead paid once per N decode steps; new requests wait up to N steps"),
    _k("--schedule-conservativeness", "flag", flags=("--schedule-conservativeness",), value="float", values=(1.0,),
       speed="admission reserves new-token room x conservativeness (lower admits more, retracts more)"),
    _k("--enable-mixed-chunk", "flag", flags=("--enable-mixed-chunk",), value="bool",
       excludes="speculative decoding (SGLang turns it off)", speed="decode continues during prefill chunks"),
    _k("--disable-radix-cache", "flag", flags=("--disable-radix-cache",), value="bool",
       memory="hybrid (Mamba / linear-attention) models: with --max-running-requests set, the state pool gets "
              "max(1, that / attention-DP) slots instead of the memory ratio's share of the KV budget, and a running "
              "request holds 1 state slot instead of 3-5 (models/mamba.py; 0.5.23 kv_cache_configurator.py:3324-3347)",
       speed="no prefix reuse: every prompt prefilled whole (the simulator's radix cache off)"),
    _k("--max-mamba-cache-size", "flag", flags=("--max-mamba-cache-size",), value="int", hardware=_HYBRID,
       memory="hybrid models: the state pool's slots (/ attention-DP ranks); the rest of the budget to the KV pool; "
              "running requests capped at slots / 3-5 (0.5.23 kv_cache_configurator.py:3303-3322, 3119-3172)"),
    _k("--mamba-full-memory-ratio", "flag", flags=("--mamba-full-memory-ratio",), value="float", values=(0.9,),
       hardware=_HYBRID, memory="hybrid models: the state pool takes r / (1 + r) of the KV budget (default 0.9) "
       "when neither --max-mamba-cache-size nor the radix-off rule sizes it (kv_cache_configurator.py:3348-3389)"),
    _k("--mamba-ssm-dtype", "flag", flags=("--mamba-ssm-dtype",), value="str", values=("float32", "bfloat16"),
       hardware=_HYBRID, memory="hybrid models: SSM state bytes per element (float32 4, bfloat16 2): the state "
       "per request (srt/configs/mamba_utils.py:116-126)"),
    _k("--schedule-policy", "flag", flags=("--schedule-policy",), value="str", values=("fcfs", "lpm"),
       speed="queue order (lpm: longest prefix first; needs the radix cache)"),
    # ---- environment variables (search_space.env) -------------------------------------------
    _k("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "env", value="bool", values=("0", "1"), since="0.5.23",
       hardware="PCIe-only nodes, TP 2/4/8, bf16", memory="decode-sized IPC workspace (max_bs x hidden x 2 B, "
       "well under 0.1 GiB: not modelled)",
       speed=f"FlashInfer PCIe-IPC allreduce for decode-sized messages: 5.3 / 15.3 / 34.6 us at 12 / 96 / 384 KiB "
             f"({_IPC_SRC})"),
    _k("NCCL_ALGO", "env", value="str", values=("Ring", "Tree"),
       speed="Tree: lower latency, less bandwidth per allreduce (NCCL_TREE_*, modelled); RTX PRO 6000 deployments "
             "force Tree (oracle-quickstart/oci-hpc-oke PR #284)"),
    _k("NCCL_P2P_LEVEL", "env", value="str", values=("LOC", "PIX", "PXB", "PHB", "SYS"),
       speed="LOC/PIX: P2P off across the bridge, staged through host memory (NCCL_NO_P2P_*, modelled)"),
    _k("NCCL_P2P_DISABLE", "env", value="bool", values=("0", "1"),
       speed="1: NCCL stages through host memory (NCCL_NO_P2P_*, modelled); a 2 x RTX PRO 6000 hang needed it "
             "(local-inference-lab/rtx6kpro issue #15)"),
)}

_BY_FLAG: dict[str, Knob] = {f: k for k in CATALOGUE.values() for f in k.flags if k.kind == "flag"}


def lookup(name: str) -> Knob | None:
    """The entry for a search-space name or a flag spelling, or None (unknown to autotune)."""
    return CATALOGUE.get(name) or _BY_FLAG.get(name)


def spelling(knob_or_flag: Knob | str, version: str | SglangVersion) -> str | None:
    """The flag spelling ``version`` accepts (None: the release has none of them)."""
    names = knob_or_flag.flags if isinstance(knob_or_flag, Knob) else (knob_or_flag,)
    table = table_for(version)
    return next((n for n in names if table.has(n)), None)


def exists_in(knob: Knob, version: str | SglangVersion) -> bool:
    """Whether ``version`` has the knob at all (some spelling of it, or reads the variable)."""
    if knob.kind == "env":
        return knob.since is None or not as_version(version) < as_version(knob.since)
    if knob.name == "--attn-dp-size":  # spelled --enable-dp-attention --dp-size before 0.5.22
        return True
    return not knob.flags or spelling(knob, version) is not None


def releases(knob: Knob) -> tuple[str, ...]:
    """The releases (with a flag table) that have the knob."""
    return tuple(v for v in known_versions() if exists_in(knob, v))


def describe(name: str) -> dict[str, Any]:
    """A plain-data view of an entry (``plan --json``, docs)."""
    k = lookup(name)
    if k is None:
        return {"name": name, "known": False, "memory": "", "note": "unknown to autotune: no memory effect assumed"}
    rel = releases(k)
    return {"name": k.name, "known": True, "kind": k.kind, "flags": list(k.flags), "value": k.value,
            "releases": f"{rel[0]}..{rel[-1]}" if rel else "none", "hardware": k.hardware, "needs": k.needs,
            "excludes": k.excludes, "memory": k.memory, "speed": k.speed}
