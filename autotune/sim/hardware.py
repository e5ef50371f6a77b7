"""The memory truth of the simulated server: what the GPUs would report at each step.

This is the *simulated reality* that the memory model (:mod:`autotune.sglang.memory.predictor`)
tries to predict; it uses SGLang's own formulas (imported from :mod:`autotune.sglang`)
and adds the physical quantities SGLang only measures. Every constant below says what
it stands for. All sizes are GiB (2^30 bytes) per GPU unless the name says otherwise.

Order of events (SGLang 0.5.9 ``model_executor/model_runner.py`` ``ModelRunner.__init__`` and
``model_runner_kv_cache_mixin.py`` ``profile_max_num_token``; 0.5.23
``mem_cache/kv_cache_configurator.py`` and ``distributed/bootstrap.py``)::

    capacity - CUDA context - NCCL - custom-allreduce IPC - torch-symm-mem   = P (baseline)
    P - target weights (- draft weights, regime B) - loader residue          = A
    rest = A - P (1 - f)  ->  N = floor(rest / cell)   (KV pool, <= 0 fails; the pool
    holds N x its own cell, above rest for DSA's fp8 rows before 0.5.17)
    slack P (1 - f) then pays: request table, attention workspace, CUDA graphs
    (decode, 0.5.23 prefill, draft), FlashInfer fusion workspace, --enable-symm-mem
    prealloc, regime-A draft weights and KV; what is left must hold one chunk's prefill
    activations, else the server starts and dies under load.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from autotune.sglang import defaults, releases
from autotune.sglang.hardware import rocm
from autotune.sglang.hardware.gpus import GpuKind
from autotune.sglang.knobs.config import SpeculativeConfig
from autotune.sglang.knobs.speculative import validate_speculative
from autotune.sglang.memory import slack
from autotune.sglang.memory.predictor import cell_size_bytes
from autotune.sglang.models.dp_attention import replicated_weight_gib
from autotune.sglang.models.dsv4 import DSV4_PAGE
from autotune.sglang.models.mamba import MambaKnobs, knobs_from_args
from autotune.sglang.models.mla import DSA_CUDA_PAGE
from autotune.sglang.models.profile import ModelProfile
from autotune.sglang.models.sizing import Reserve, kv_reserved, weight_bytes_per_gpu
from autotune.sglang.versions import SglangVersion, parse_version
from autotune.sim.args import Launch

GIB = float(2**30)
MIB = float(2**20)

#: The CUDA context and NCCL's communicator buffers before the weights load: the predictor's own figures
#: (:func:`autotune.sglang.memory.slack.base_overhead_gib`, by GPU, fabric and TP size, each read from a public
#: log), so the simulated node and the memory model agree where a calibration launch has not measured it.
#: The seed case (rtx-pro-6000, 97,887 MiB, TP 8, PCIe, custom allreduce auto-disabled) keeps P = 94.00 GiB.
#: Legacy custom allreduce per rank: 8 MiB meta + 8 MiB IPC buffer + 8 MiB rank data.
CUSTOM_AR_GIB = 24 * MIB / GIB
#: ROCm: the buffer is 16 MiB instead of 8 (autotune.sglang.hardware.rocm.CUSTOM_AR_MAX_MIB), so 16 + 16 + 8 MiB.
CUSTOM_AR_ROCM_GIB = (2 * rocm.CUSTOM_AR_MAX_MIB + 8) * MIB / GIB
#: Torch symmetric-memory all-reduce buffer: world size 2/4 -> 64 MiB, 6/8 -> 128 MiB.
TORCH_SYMM_MEM_MIB = {2: 64, 4: 64, 6: 128, 8: 128}
#: Loader residue still allocated after "Load weight end" (temporaries, caching allocator).
LOADER_RESIDUE_GIB = 0.25
#: FlashInfer attention workspace (SGLANG_FLASHINFER_WORKSPACE_SIZE default; Qwen 512 MiB).
ATTN_WORKSPACE_MIB = 384
ATTN_WORKSPACE_QWEN_MIB = 512
#: Decode CUDA graph memory: :func:`autotune.sglang.memory.slack.decode_graph_gib`, the one model the memory
#: predictor uses too (fitted to "DeepSeek uses 6GB" at bs 256, TP 8: SGLang PR #5893, issue #16143).
#: 0.5.23 prefill CUDA graphs (on by default): MLA models 1 GiB, others 6 MiB per size.
PREFILL_GRAPH_MLA_GIB = 1.0
PREFILL_GRAPH_PER_SIZE_MIB = 6.0
PREFILL_GRAPH_SIZES = 58
#: Prefill activations per token of a chunk: :func:`autotune.sglang.memory.slack.prefill_bytes_per_token`
#: (hidden x bf16 x 12 live tensors + the active MLP; 1.81 GiB for an 8192-token chunk of kimi-k2-class),
#: the predictor's own estimate. Refitted from 32 hidden-size tensors (3.5 GiB) when the decode graphs
#: grew to the published ~6 GB: with both, the seed's working baseline (f 0.88, bs 512) would not serve.
#: NCCL symmetric-memory prealloc of --enable-symm-mem (SGLANG_SYMM_MEM_PREALLOC_GB_SIZE).
SYMM_MEM_PREALLOC_GIB = 4.0
#: FlashInfer allreduce fusion: max tokens per fused batch, buffers (1 + 3 lamport).
FI_FUSION_MAX_TOKENS = 2048
FI_FUSION_AUTO_ARCHS = frozenset({"DeepseekV3ForCausalLM", "GptOssForCausalLM", "Glm4MoeForCausalLM",
                                  "Glm4MoeLiteForCausalLM", "Qwen3MoeForCausalLM",
                                  "KimiK25ForConditionalGeneration"})

CUSTOM_AR_PCIE_WARNING = ("Custom allreduce is disabled because it's not supported on more than two PCIe-only "
                          "GPUs. To silence this warning, specify disable_custom_all_reduce=True explicitly.")


@dataclass
class MemoryPlan:
    """Every number the startup sequence logs, and where (if anywhere) it fails."""

    version: SglangVersion
    capacity_gib: float
    dist_init_gib: float  # CUDA context + NCCL + custom AR + torch symm mem
    p_gib: float
    w_gib: float
    a_gib: float
    f: float
    f_is_auto: bool
    rest_gib: float
    cell_bytes: int
    kv_tokens: int
    profiled_tokens: int
    kv_gib: float
    context_len: int
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    graph_bs: list[int]
    max_running_requests: int
    req_pool_size: int
    req_table_gib: float
    attn_workspace_gib: float
    graph_gib: float
    prefill_graph_gib: float
    draft_graph_gib: float
    fi_fusion_gib: float
    symm_prealloc_gib: float
    draft_weights_gib: float  # regime A only (from slack)
    draft_kv_gib: float  # regime A only (from slack)
    prefill_bytes_per_token: int
    prefill_oom_tokens: int | None  # a chunk larger than this dies with "Prefill out of memory"
    custom_ar_active: bool
    torch_symm_active: bool
    fi_fusion_active: bool
    speculative: SpeculativeConfig
    draft: ModelProfile | None
    warnings: list[str] = field(default_factory=list)
    fails_at: str | None = None  # None | "kv_rest" | "kv_tokens" | "graph" | "draft" | "symm_mem"
    attn_dp_size: int = 1  # DP attention: kv_tokens and max_running_requests are per attention-DP rank
    prefill_graphs_on: bool = False  # captured (prefill_graph_gib is what they add: 0 when the shared pool holds them)

    @property
    def slack_gib(self) -> float:
        return self.p_gib * (1.0 - self.f)

    @property
    def after_pool_gib(self) -> float:
        """Free memory at "Memory pool end"."""
        return self.a_gib - self.kv_gib - self.req_table_gib

    @property
    def before_graph_gib(self) -> float:
        return self.after_pool_gib - self.attn_workspace_gib

    @property
    def after_graph_gib(self) -> float:
        return self.before_graph_gib - self.graph_gib - self.prefill_graph_gib - self.fi_fusion_gib

    @property
    def final_free_gib(self) -> float:
        """Free memory once everything static is allocated ("available_gpu_mem")."""
        return (self.after_graph_gib - self.symm_prealloc_gib - self.draft_weights_gib - self.draft_kv_gib
                - self.draft_graph_gib)

    @property
    def max_req_input_len(self) -> int:
        return min(self.context_len - 1, self.kv_tokens - 1) - 5


def resolve_speculative(launch: Launch, model: ModelProfile, version: SglangVersion) -> SpeculativeConfig:
    """SGLang's speculative argument handling (``server_args.py``'s speculative checks), via :mod:`autotune.sglang.knobs.speculative`.

    Raises ConfigError where SGLang refuses the combination.
    """
    if not launch.speculative_algorithm:
        return SpeculativeConfig()
    asked = SpeculativeConfig(launch.speculative_algorithm, launch.speculative_draft_model_path,
                              launch.speculative_num_steps, launch.speculative_eagle_topk,
                              launch.speculative_num_draft_tokens)
    resolved, _notes = validate_speculative(asked, model.architecture, version, page_size=launch.page_size)
    return resolved


def _mtp_layers(model: ModelProfile) -> ModelProfile:
    """The target's own next-token (MTP) layers as the draft whose graphs are captured."""
    return replace(model, num_layers=max(1, model.num_nextn_predict_layers))


def _draft_weight_bytes(model: ModelProfile, draft: ModelProfile) -> float:
    if draft.path == model.path:  # MTP: the draft is the checkpoint's own next-token layers
        return model.weight_bytes * max(1, model.num_nextn_predict_layers) / model.num_layers
    return float(draft.weight_bytes)


def _kv_dtype_bytes(kv_cache_dtype: str, model: ModelProfile) -> float:
    if kv_cache_dtype == "auto":
        return 1.0 if model.kv_cache_quant_fp8 else float(model.dtype_bytes)
    if kv_cache_dtype.startswith("fp8") or kv_cache_dtype == "mxfp8":
        return 1.0
    if "fp4" in kv_cache_dtype:
        return 0.5
    return 2.0


def plan_memory(launch: Launch, model: ModelProfile, draft: ModelProfile | None, gpu: GpuKind, *,
                version: SglangVersion | str, interconnect: str, imbalance: bool = False) -> MemoryPlan:
    """Compute what the GPUs would show at every startup step of ``launch``."""
    v = parse_version(version) if isinstance(version, str) else version
    tp, warnings = launch.tp_size, []
    spec = resolve_speculative(launch, model, v)
    capacity = gpu.memory_mib / 1024.0

    # -- distributed init: everything allocated before the baseline P is measured
    custom_ar = not launch.disable_custom_all_reduce and tp in (2, 4, 6, 8)
    if not launch.disable_custom_all_reduce and tp > 1:
        prefix = "CustomAllReduceV2" if v.dialect == "modern" else "Custom allreduce"
        if tp not in (2, 4, 6, 8):
            warnings.append(f"{prefix} is disabled due to an unsupported world size: {tp}. Supported world sizes: "
                            "[2, 4, 6, 8]. To silence this warning, specify disable_custom_all_reduce=True explicitly.")
        elif tp > 2 and interconnect != "nvlink":
            custom_ar = False
            warnings.append(CUSTOM_AR_PCIE_WARNING.replace("Custom allreduce", prefix, 1))
    torch_symm = False
    if launch.enable_torch_symm_mem and tp > 1 and not gpu.rocm:  # CUDA-only (torch_symm_mem.py:24-26)
        if gpu.sm_family not in (90, 100):  # SGLang sizes the buffer for SM90 and SM100 only
            warnings.append(f"TorchSymmMemCommunicator: Device capability {gpu.sm // 10}.{gpu.sm % 10} not supported, "
                            "communicator is not available.")
        elif interconnect != "nvlink" or tp not in TORCH_SYMM_MEM_MIB:
            warnings.append("TorchSymmMemCommunicator: torch symmetric memory multicast operations are not supported.")
        else:
            torch_symm = True
    ar_gib = CUSTOM_AR_ROCM_GIB if gpu.rocm else CUSTOM_AR_GIB
    dist = (slack.base_overhead_gib(gpu, tp, interconnect) + (ar_gib if custom_ar else 0.0)
            + (TORCH_SYMM_MEM_MIB.get(tp, 0) * MIB / GIB if torch_symm else 0.0))
    p = capacity - dist

    # -- weights (regime B loads the draft before A is measured)
    w = weight_bytes_per_gpu(model, tp, mxfp4_align=releases.mxfp4_pad_align(v, sm_family=gpu.sm_family,
                                                                            rocm=gpu.rocm)) / GIB + LOADER_RESIDUE_GIB
    w += replicated_weight_gib(model, tp, launch.attn_dp_size,  # DP attention: attention weights whole per rank
                               dp_lm_head=bool(launch.raw.get("enable_dp_lm_head")))
    draft_w = _draft_weight_bytes(model, draft) / tp / GIB if draft is not None else 0.0
    if v.regime == "B":
        w += draft_w
    a = p - w

    # -- automatic values and the KV pool
    chunk = launch.chunked_prefill_size or defaults.auto_chunked_prefill_size(gpu.memory_mib, v)
    max_bs = launch.cuda_graph_max_bs
    if max_bs is None:
        max_bs = max(launch.cuda_graph_bs) if launch.cuda_graph_bs else defaults.auto_cuda_graph_max_bs(gpu.memory_mib, tp, v)
        if (releases.max_bs_capped_by_max_running_requests(v) and launch.max_running_requests
                and launch.max_running_requests < max_bs):
            max_bs = launch.max_running_requests
    f = launch.mem_fraction_static
    f_is_auto = f is None
    if f is None:
        f = defaults.auto_mem_fraction_static(gpu.memory_mib, tp_size=tp, pp_size=launch.pp_size, version=v,
                                              chunked_prefill_size=chunk, cuda_graph_max_bs=max_bs,
                                              speculative_algorithm=spec.algorithm, is_mla=model.is_mla,
                                              dp_attention_size=launch.attn_dp_size,
                                              prefill_graph=False if gpu.rocm else None) * model.vlm_f_factor
    if gpu.rocm:  # aiter over an 8192+ context: f x 0.85, a given f too (autotune.sglang.hardware.rocm)
        f *= rocm.aiter_f_factor(launch.raw.get("attention_backend"), model, tp,
                                 int(launch.context_length or model.context_len))
    if launch.attn_dp_size > 1:
        chunk = max(chunk // launch.attn_dp_size, 1)  # _handle_data_parallelism
    rest = a - p * (1.0 - f)
    swa_ratio = 1.0 if launch.raw.get("disable_hybrid_swa_memory") or releases.gpt_oss_disables_hybrid_swa(
        v, model.architecture, sm_family=gpu.sm_family, attention_backend=launch.raw.get("attention_backend")) \
        else launch.raw.get("swa_full_tokens_ratio")

    def cell_bytes(budget: bool) -> int:  # what the pool holds a token / what the budget is divided by
        return cell_size_bytes(model, tp_size=tp // max(launch.attn_dp_size, 1), kv_cache_dtype=launch.kv_cache_dtype,
                               version=v, draft=draft if v.regime == "B" else None,
                               spec_algorithm=spec.algorithm if v.regime == "B" else None, gpu_sm=gpu.sm,
                               swa_ratio=swa_ratio, budget=budget)

    cell, budget_cell = cell_bytes(False), cell_bytes(True)  # they differ for DSA's fp8 rows before 0.5.17
    # Mamba state slots / DeepSeek V4's fixed compressed state come out of the budget before the pool
    page = launch.page_size
    if launch.raw.get("page_size") is None:  # SGLang's per-family default (DeepSeek V4 256, DSA on CUDA 64)
        page = DSV4_PAGE if model.family == "dsv4" else (DSA_CUDA_PAGE if model.family == "dsa" else page)
    res = kv_reserved(model, rest * GIB, tp=tp // max(launch.attn_dp_size, 1),
                      max_running_requests=launch.max_running_requests,
                      mamba=_mamba_knobs(launch, model, v, spec, page)) if rest > 0 else Reserve(0.0)
    reserved, pool = res.bytes, res.mamba
    profiled = int((rest * GIB - reserved) // budget_cell)
    if pool is not None and pool.max_running_cap <= 0:  # "Not enough GPU memory for hybrid ... state cache"
        profiled = 0
    n = profiled
    if launch.max_total_tokens:
        if launch.max_total_tokens > profiled:
            warnings.append(f"max_total_tokens={launch.max_total_tokens} is larger than the profiled value "
                            f"{profiled}. Use the profiled value instead.")
        n = min(n, launch.max_total_tokens)
    n = n // page * page
    context_len = int(launch.context_length or model.context_len)
    fails_at = "kv_rest" if (rest <= 0 and v.at_least("0.5.14")) else ("kv_tokens" if n <= 0 else None)
    n_pos = max(n, 0)
    kv_gib = ((n_pos + page) * cell + reserved) / GIB if n_pos else 0.0

    # -- request table, running requests, graphs
    dp_div = launch.attn_dp_size  # a user --max-running-requests is split over attention-DP ranks (0.5.9 model_runner.py:310)
    mrr = defaults.default_max_running_requests(n_pos, context_len, v, spec.enabled,
                                                user=launch.max_running_requests, dp_size=dp_div)
    pool_rows = defaults.req_to_token_pool_size(n_pos, context_len, v, spec.enabled, user=launch.max_running_requests)
    if pool is not None:  # the state pool caps the running requests and the request table (slots // ratio)
        mrr, pool_rows = min(mrr, pool.max_running_cap), min(pool_rows, max(pool.max_running_cap, 1))
    table = pool_rows * (context_len + 4 + (spec.num_draft_tokens or 0)) * 4 / GIB
    attn_ws = (ATTN_WORKSPACE_QWEN_MIB if model.architecture.startswith("Qwen") else ATTN_WORKSPACE_MIB) * MIB / GIB
    if launch.disable_cuda_graph:
        graph_bs: list[int] = []
    elif launch.cuda_graph_bs:
        graph_bs = sorted(b for b in launch.cuda_graph_bs if b <= max_bs)
    else:
        graph_bs = list(defaults.decode_graph_batch_sizes(max_bs, speculative=spec.enabled, version=v,
                                                          disable_padding=launch.disable_cuda_graph_padding))
    if graph_bs and max(graph_bs) > pool_rows:
        graph_bs = sorted({b for b in graph_bs if b <= pool_rows} | {pool_rows})
    tpr = spec.num_draft_tokens if spec.enabled else 1
    graph = slack.decode_graph_gib(model, graph_bs, tpr or 1, launch.attn_dp_size)
    prefill_graph = 0.0
    prefill_on = launch.prefill_graphs
    if prefill_on is None:
        prefill_on = not gpu.rocm and releases.prefill_graphs_default_on(v) and releases.prefill_graphs_off_reason(
            v, speculative=spec.enabled, dp_attention=launch.attn_dp_size > 1) is None
    if prefill_on and not launch.disable_cuda_graph:
        prefill_graph = PREFILL_GRAPH_MLA_GIB if model.is_mla else PREFILL_GRAPH_SIZES * PREFILL_GRAPH_PER_SIZE_MIB * MIB / GIB
        prefill_graph = slack.prefill_graph_extra_gib(prefill_graph, graph, v)
    draft_graph = 0.0
    if draft is not None and graph_bs:
        draft_model = _mtp_layers(model) if draft.path == model.path else draft
        draft_graph = (slack.decode_graph_gib(draft_model, graph_bs, spec.eagle_topk or 1)
                       + slack.decode_graph_gib(draft_model, graph_bs, tpr or 1))

    fi_auto = (model.architecture in FI_FUSION_AUTO_ARCHS and gpu.sm_family in (90, 100) and gpu.name != "h20")
    fi_active = tp > 1 and (launch.flashinfer_allreduce_fusion is True
                            or (launch.flashinfer_allreduce_fusion is None and fi_auto))
    fi_gib = 0.0
    if fi_active:
        one = tp * FI_FUSION_MAX_TOKENS * model.hidden_size * 2 / GIB
        fi_gib = one + min(3 * one, 2.0)
    symm = SYMM_MEM_PREALLOC_GIB if launch.enable_symm_mem else 0.0
    draft_weights = draft_w if (draft is not None and v.regime == "A") else 0.0
    draft_kv = 0.0
    if draft is not None and v.regime == "A":
        draft_cell = cell_size_bytes(draft if draft.path != model.path else model, tp_size=tp,
                                     kv_cache_dtype=launch.kv_cache_dtype, version=v, draft=None, spec_algorithm=None)
        if draft.path == model.path:
            draft_cell = draft_cell * max(1, model.num_nextn_predict_layers) // model.num_layers
        draft_kv = (n_pos + launch.page_size) * draft_cell / GIB

    per_token = slack.prefill_bytes_per_token(model, tp)
    plan = MemoryPlan(
        version=v, capacity_gib=capacity, dist_init_gib=dist, p_gib=p, w_gib=w, a_gib=a, f=float(f),
        f_is_auto=f_is_auto, rest_gib=rest, cell_bytes=int(cell), kv_tokens=n, profiled_tokens=profiled,
        kv_gib=kv_gib, context_len=context_len, chunked_prefill_size=int(chunk), cuda_graph_max_bs=int(max_bs),
        graph_bs=graph_bs, max_running_requests=int(mrr), req_pool_size=pool_rows, req_table_gib=table,
        attn_workspace_gib=attn_ws, graph_gib=graph, prefill_graph_gib=prefill_graph, draft_graph_gib=draft_graph,
        fi_fusion_gib=fi_gib, symm_prealloc_gib=symm, draft_weights_gib=draft_weights, draft_kv_gib=draft_kv,
        prefill_bytes_per_token=per_token, prefill_oom_tokens=None, custom_ar_active=custom_ar,
        torch_symm_active=torch_symm, fi_fusion_active=fi_active, speculative=spec, draft=draft,
        warnings=warnings, fails_at=fails_at, attn_dp_size=launch.attn_dp_size,
        prefill_graphs_on=bool(prefill_on and not launch.disable_cuda_graph),
    )
    if fails_at is None:
        if plan.after_graph_gib < 0:
            plan.fails_at = "graph"
        elif plan.after_graph_gib - symm < 0:
            plan.fails_at = "symm_mem"
        elif plan.final_free_gib < 0:
            plan.fails_at = "draft"
        else:
            act_tokens = chunk if chunk > 0 else launch.max_prefill_tokens
            fits = int(plan.final_free_gib * GIB // per_token)
            plan.prefill_oom_tokens = fits if fits < act_tokens else None
    return plan


def _mamba_knobs(launch: Launch, model: ModelProfile, v: SglangVersion, spec: SpeculativeConfig,
                 page: int) -> MambaKnobs:
    """The launch's flags that size a hybrid model's state pool (the predictor reads the same ones:
    :func:`autotune.sglang.memory.predictor.mamba_knobs`)."""
    return knobs_from_args(launch.raw.get, version=v, architecture=model.architecture, attn_dp=launch.attn_dp_size,
                           max_running_requests=launch.max_running_requests,
                           draft_tokens=int(spec.num_draft_tokens or 0) if spec.enabled else 0, page_size=page)


def load_draft(spec: SpeculativeConfig, model: ModelProfile) -> ModelProfile | None:
    """The draft model a resolved speculative config runs: its own checkpoint, the target's
    MTP (NextN) layers, or none (NGRAM, off).

    An MTP draft is the checkpoint's next-token head, not the whole target
    (:func:`autotune.sim.perf.forward.mtp_head`: ``num_nextn_predict_layers`` decoder layers, ``eh_proj``
    and the shared LM head, as SGLang's ``deepseek_nextn.py`` builds it); it keeps the target's path, by
    which the memory plan recognises it and sizes its weights, KV and graphs from the target."""
    from autotune.sglang.models.profile import load_model_profile
    from autotune.sim.perf.forward import mtp_head

    if not spec.enabled or spec.algorithm == "NGRAM":
        return None
    if spec.draft_model_path and spec.draft_model_path != model.path:
        return load_model_profile(spec.draft_model_path)
    return mtp_head(model)
