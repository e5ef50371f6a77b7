"""Command line of ``python -m autotune.sim``: SGLang's flags of one version, plus ``--sim-*``.

SGLang's own flags come from :func:`autotune.sglang.flags.argv.build_parser` for the dialect
of ``--sim-sglang-version``, so a flag that version does not know is refused exactly as
its argparse refuses it (exit code 2, "unrecognized arguments" / "ambiguous option"):
a typo of one of its flags, or a flag of another release. A flag no release has and
no flag of this one is near is taken for a newer build's: accepted, with no modelled
effect (:mod:`autotune.sglang.flags.unknown`; ``Launch.newer_flags``).
The ``--sim-*`` flags describe the pretend machine; each has an ``AUTOTUNE_SIM_*``
environment variable as its default (``--sim-fault`` takes a comma-separated list there).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Any

from autotune.limits import MAX_SIM_FACTOR, MIN_TIME_SCALE
from autotune.sglang.flags.unknown import accept_newer_flags, newer_values
from autotune.sglang.hardware.gpus import GpuKind, get_gpu
from autotune.sglang.versions import SglangVersion, parse_version
from autotune.sim.faults import Faults, parse_faults
from autotune.sim.weight_load import PAGE_CACHE_MODES

DEFAULT_SIM_VERSION = "0.5.9"
ENV_PREFIX = "AUTOTUNE_SIM_"


@dataclass(frozen=True)
class SimOptions:
    """The pretend machine and the simulator's own behaviour."""

    version: SglangVersion
    gpu: GpuKind
    num_gpus: int
    interconnect: str  # "pcie" | "nvlink"
    time_scale: float
    seed: int
    faults: Faults = field(default_factory=Faults)
    #: The server's SGLANG_* / NCCL_* environment (knobs searched under search_space.env act through it).
    env: dict[str, str] = field(default_factory=dict)
    #: Whether the checkpoint is read cold (disk), warm (page cache), or auto (as this node last read it).
    page_cache: str = "auto"

    def to_dict(self) -> dict[str, Any]:
        return {"sglang_version": str(self.version), "gpu": self.gpu.name, "num_gpus": self.num_gpus,
                "interconnect": self.interconnect, "time_scale": self.time_scale, "seed": self.seed,
                "faults": self.faults.to_dict(), "env": dict(self.env), "page_cache": self.page_cache}


@dataclass(frozen=True)
class Launch:
    """The SGLang launch flags the simulator acts on (``None`` = SGLang picks its automatic value)."""

    model_path: str
    served_model_name: str
    host: str
    port: int
    tp_size: int
    dp_size: int  # plain DP replicas (1 under DP attention, which runs on the tp_size GPUs)
    pp_size: int
    mem_fraction_static: float | None
    cuda_graph_max_bs: int | None
    cuda_graph_bs: tuple[int, ...] | None
    disable_cuda_graph: bool
    disable_cuda_graph_padding: bool
    disable_custom_all_reduce: bool
    enable_torch_symm_mem: bool
    enable_symm_mem: bool
    flashinfer_allreduce_fusion: bool | None  # True = asked for, False = enforced off, None = auto
    speculative_algorithm: str | None
    speculative_draft_model_path: str | None
    speculative_num_steps: int | None
    speculative_eagle_topk: int | None
    speculative_num_draft_tokens: int | None
    chunked_prefill_size: int | None
    max_prefill_tokens: int
    max_running_requests: int | None
    max_total_tokens: int | None
    page_size: int
    kv_cache_dtype: str
    context_length: int | None
    skip_server_warmup: bool
    stream_interval: int
    raw: dict[str, Any]  # every parsed SGLang arg, for /server_info
    attn_dp_size: int = 1  # DP attention width (--attn-dp-size, or --enable-dp-attention --dp-size N before 0.5.22)
    prefill_graphs: bool | None = None  # asked on (0.5.9 --enable-piecewise-cuda-graph) / off; None = the release's default
    newer_flags: dict[str, Any] = field(default_factory=dict)  # flags of a newer build: accepted, no modelled effect


def _env(name: str, default: str | None) -> str | None:
    return os.environ.get(ENV_PREFIX + name, default)


def _sim_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("simulator (autotune.sim)")
    g.add_argument("--sim-sglang-version", default=_env("SGLANG_VERSION", DEFAULT_SIM_VERSION),
                   help="SGLang version whose flags, log wording and memory regime to imitate")
    g.add_argument("--sim-gpu", default=_env("GPU", "h100"), help="GPU kind from the catalogue")
    g.add_argument("--sim-num-gpus", type=int, default=int(_env("NUM_GPUS", "0") or 0),
                   help="GPUs on the pretend node (default: tp_size * dp_size)")
    g.add_argument("--sim-interconnect", choices=("pcie", "nvlink"), default=_env("INTERCONNECT", None),
                   help="GPU interconnect (default: nvlink if the GPU kind has it, else pcie)")
    g.add_argument("--sim-time-scale", type=float, default=float(_env("TIME_SCALE", "1") or 1),
                   help="modelled seconds per wall second")
    env_faults = _env("FAULT", "") or ""
    g.add_argument("--sim-fault", action="append", default=[f for f in env_faults.split(",") if f.strip()],
                   help="inject a fault (repeatable): crash_after:N, hang_startup, slow_tokens:F, "
                        "malformed_sse:N, health_fail_after:N, memory_imbalance")
    g.add_argument("--sim-seed", type=int, default=int(_env("SEED", "0") or 0), help="random seed of the engine")
    g.add_argument("--sim-page-cache", choices=PAGE_CACHE_MODES, default=_env("PAGE_CACHE", "auto"),
                   help="read the checkpoint cold (from disk), warm (from the page cache), or auto: cold the first "
                        "time this host loads it, warm after (autotune.sim.weight_load)")


def _version_of(argv: list[str]) -> SglangVersion:
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--sim-sglang-version", default=_env("SGLANG_VERSION", DEFAULT_SIM_VERSION))
    known, _ = pre.parse_known_args(argv)
    return parse_version(known.sim_sglang_version)


def build_sim_parser(version: SglangVersion) -> argparse.ArgumentParser:
    """SGLang's parser for ``version`` with the ``--sim-*`` flags added."""
    from autotune.sglang.flags.argv import build_parser

    parser = build_parser(version)
    parser.prog = "python -m autotune.sim"
    _sim_flags(parser)
    return parser


def _get(ns: argparse.Namespace, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(ns, name, None)
        if value is not None:
            return value
    return default


def _fusion(ns: argparse.Namespace) -> bool | None:
    if _get(ns, "enforce_disable_flashinfer_allreduce_fusion", default=False):
        return False
    if _get(ns, "enable_flashinfer_allreduce_fusion", default=False):
        return True
    backend = _get(ns, "flashinfer_allreduce_fusion_backend")
    return True if backend not in (None, "", "none") else None


def launch_from_namespace(ns: argparse.Namespace) -> Launch:
    """The :class:`Launch` knobs from SGLang's parsed args (either dialect)."""
    raw = {k: v for k, v in vars(ns).items() if not k.startswith(("sim_", "newer_flag:"))}
    bs_list = _get(ns, "cuda_graph_bs", "cuda_graph_bs_decode")
    disable_graph = bool(_get(ns, "disable_cuda_graph", "disable_decode_cuda_graph", default=False))
    if str(_get(ns, "cuda_graph_backend_decode", default="")).lower() == "disabled":
        disable_graph = True
    model_path = str(ns.model_path)
    chunk = _get(ns, "chunked_prefill_size")
    dp_size = int(_get(ns, "dp_size", default=1))
    attn_dp = int(_get(ns, "attn_dp_size", default=1) or 1)
    if _get(ns, "enable_dp_attention", default=False) and attn_dp == 1:
        attn_dp, dp_size = dp_size, 1
    prefill_graphs: bool | None = None
    if _get(ns, "enable_piecewise_cuda_graph", default=False):
        prefill_graphs = True
    if (_get(ns, "disable_piecewise_cuda_graph", default=False) or disable_graph
            or str(_get(ns, "cuda_graph_backend_prefill", default="")).lower() == "disabled"):
        prefill_graphs = False
    return Launch(
        model_path=model_path,
        served_model_name=str(_get(ns, "served_model_name", default=model_path)),
        host=str(_get(ns, "host", default="127.0.0.1")),
        port=int(_get(ns, "port", default=30000)),
        tp_size=int(_get(ns, "tp_size", default=1)),
        dp_size=dp_size,
        pp_size=int(_get(ns, "pp_size", default=1)),
        mem_fraction_static=_get(ns, "mem_fraction_static"),
        cuda_graph_max_bs=_get(ns, "cuda_graph_max_bs", "cuda_graph_max_bs_decode"),
        cuda_graph_bs=tuple(int(b) for b in bs_list) if bs_list else None,
        disable_cuda_graph=disable_graph,
        disable_cuda_graph_padding=bool(_get(ns, "disable_cuda_graph_padding", default=False)),
        disable_custom_all_reduce=bool(_get(ns, "disable_custom_all_reduce", default=False)),
        enable_torch_symm_mem=bool(_get(ns, "enable_torch_symm_mem", default=False)),
        enable_symm_mem=bool(_get(ns, "enable_symm_mem", default=False)),
        flashinfer_allreduce_fusion=_fusion(ns),
        speculative_algorithm=_get(ns, "speculative_algorithm"),
        speculative_draft_model_path=_get(ns, "speculative_draft_model_path", "speculative_draft_model"),
        speculative_num_steps=_get(ns, "speculative_num_steps"),
        speculative_eagle_topk=_get(ns, "speculative_eagle_topk"),
        speculative_num_draft_tokens=_get(ns, "speculative_num_draft_tokens"),
        chunked_prefill_size=None if chunk is None else int(chunk),
        max_prefill_tokens=int(_get(ns, "max_prefill_tokens", default=16384)),
        max_running_requests=_get(ns, "max_running_requests"),
        max_total_tokens=_get(ns, "max_total_tokens"),
        page_size=int(_get(ns, "page_size", default=1) or 1),
        kv_cache_dtype=str(_get(ns, "kv_cache_dtype", default="auto")),
        context_length=_get(ns, "context_length"),
        skip_server_warmup=bool(_get(ns, "skip_server_warmup", default=False)),
        stream_interval=int(_get(ns, "stream_interval", default=1) or 1),
        raw=raw,
        attn_dp_size=attn_dp,
        prefill_graphs=prefill_graphs,
        newer_flags=newer_values(ns),
    )


def parse_args(argv: list[str], env: dict[str, str] | None = None) -> tuple[Launch, SimOptions]:
    """Parse the command line; argparse exits 2 on a bad flag, ConfigError on a bad sim value.
    ``env``: the server's environment (default: this process's)."""
    version = _version_of(argv)
    parser = build_sim_parser(version)
    accept_newer_flags(parser, argv, version)
    ns = parser.parse_args(argv)
    launch = launch_from_namespace(ns)
    gpu = get_gpu(ns.sim_gpu)
    interconnect = ns.sim_interconnect or ("nvlink" if gpu.has_nvlink else "pcie")
    if interconnect == "nvlink" and not gpu.has_nvlink:
        from autotune.errors import ConfigError

        raise ConfigError(f"--sim-interconnect: nvlink, but GPU kind {gpu.name} has no NVLink")
    if not MIN_TIME_SCALE <= ns.sim_time_scale <= MAX_SIM_FACTOR:  # nan too
        from autotune.errors import ConfigError

        raise ConfigError(f"--sim-time-scale: must be from {MIN_TIME_SCALE:g} to {MAX_SIM_FACTOR:g}, "
                          f"got {ns.sim_time_scale}")
    sim = SimOptions(
        version=version,
        gpu=gpu,
        num_gpus=int(ns.sim_num_gpus or launch.tp_size * launch.dp_size * launch.pp_size),
        interconnect=interconnect,
        time_scale=float(ns.sim_time_scale),
        seed=int(ns.sim_seed),
        faults=parse_faults(ns.sim_fault),
        env={k: v for k, v in (os.environ if env is None else env).items() if k.startswith(("SGLANG_", "NCCL_"))},
        page_cache=str(ns.sim_page_cache),
    )
    return launch, sim
