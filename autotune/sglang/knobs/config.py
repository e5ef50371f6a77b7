"""The canonical knobs of one SGLang launch.

``ServerConfig`` is the typed model from which argv is *rendered* for a given
SGLang version (:func:`autotune.sglang.flags.argv.render_argv`). Nothing ever parses
facts back out of an argv list.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class SpeculativeConfig:
    """Speculative decoding settings. ``algorithm=None`` means off."""

    algorithm: str | None = None  # EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM
    draft_model_path: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None

    @property
    def enabled(self) -> bool:
        return self.algorithm is not None


@dataclass(frozen=True)
class ServerConfig:
    """Everything autotune decides about one server launch.

    ``None`` means "not passed: SGLang picks its automatic value".
    """

    model_path: str
    tp_size: int = 1
    dp_size: int = 1
    ep_size: int = 1
    #: DP attention width (1 = off): attention runs data-parallel over this many groups of the tp_size GPUs.
    #: Rendered --attn-dp-size N where the release has it (0.5.22 on), else --enable-dp-attention --dp-size N.
    attn_dp_size: int = 1
    mem_fraction_static: float | None = None
    cuda_graph_max_bs: int | None = None
    disable_cuda_graph: bool = False
    custom_allreduce: bool = True  # False renders --disable-custom-all-reduce
    flashinfer_allreduce_fusion: bool = False  # True renders the version's enabling flag
    enable_torch_symm_mem: bool = False
    enable_symm_mem: bool = False
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    chunked_prefill_size: int | None = None
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    kv_cache_dtype: str = "auto"
    attention_backend: str | None = None
    context_length: int | None = None
    load_format: str | None = None
    trust_remote_code: bool = False
    host: str = "127.0.0.1"
    port: int = 30000
    extra_args: tuple[str, ...] = ()
    #: Searched flags by name (``search_space.flags``): ``(flag, value)`` rendered for the release
    #: (:mod:`autotune.sglang.knobs.catalogue`); a bool True is the bare flag, False is not passed.
    flags: tuple[tuple[str, Any], ...] = ()
    #: Searched environment variables (``search_space.env``), added to the server's environment.
    env: tuple[tuple[str, str], ...] = ()

    @property
    def num_gpus(self) -> int:
        """GPUs one launch occupies (plain DP = independent replicas of tp_size GPUs)."""
        return self.tp_size * self.dp_size

    def with_port(self, port: int) -> ServerConfig:
        return replace(self, port=port)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["extra_args"] = list(self.extra_args)
        d["flags"] = [list(kv) for kv in self.flags]
        d["env"] = [list(kv) for kv in self.env]
        return d

    def flag(self, name: str, default: Any = None) -> Any:
        """The searched value of flag ``name`` (``default`` when not searched)."""
        return dict(self.flags).get(name, default)

    def env_value(self, name: str, default: str | None = None) -> str | None:
        return dict(self.env).get(name, default)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ServerConfig:
        d = dict(d)
        d["speculative"] = SpeculativeConfig(**(d.get("speculative") or {}))
        d["extra_args"] = tuple(d.get("extra_args") or ())
        d["flags"] = tuple((str(k), v) for k, v in (d.get("flags") or ()))
        d["env"] = tuple((str(k), str(v)) for k, v in (d.get("env") or ()))
        return cls(**d)
