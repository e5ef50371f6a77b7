"""SGLang flag dialects: render a :class:`ServerConfig` into argv, and build SGLang's parser.

argv is only ever *rendered* from the typed config (never parsed back for
facts by the orchestrator). :func:`build_parser` reproduces the flags of
``python -m sglang.launch_server`` for one version, with ``allow_abbrev=True``
as SGLang has it, so a classic ``--cuda-graph-max-bs 128`` is an ambiguous
prefix for the modern (0.5.23+) parser exactly as on a real server. The
simulated server builds its parser from it; :func:`config_from_namespace`
gives it the canonical knobs back.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NoReturn

from autotune.errors import ConfigError
from autotune.limits import shown
from autotune.sglang.flags.modelled import FLAGS, Flag, human_readable_int
from autotune.sglang.flags.release_tables import table_for
from autotune.sglang.flags.unknown import accept_newer_flags, newer_flags
from autotune.sglang.knobs.config import ServerConfig, SpeculativeConfig
from autotune.sglang.knobs.speculative import validate_speculative
from autotune.sglang.versions import SglangVersion, as_version

__all__ = [
    "build_parser",
    "render_argv",
    "render_flag",
    "shell_line",
    "flags_for",
    "flag_names",
    "has_flag",
    "config_from_namespace",
    "effective_config",
    "validate_speculative",
]


def _in_range(flag: Flag, v: SglangVersion) -> bool:
    if flag.since is not None and v < as_version(flag.since):
        return False
    if flag.until is not None and as_version(flag.until) < v:
        return False
    return True


def flags_for(version: str | SglangVersion) -> list[Flag]:
    """The modelled flags (typed, see ``_flag_table``) that ``version`` of ``sglang.launch_server`` accepts.

    A modelled flag counts only where the release's own table (read from its
    wheel) has it; its aliases are those that release declares.
    """
    v = as_version(version)
    table = table_for(v)
    out = []
    for f in FLAGS:
        if not _in_range(f, v) or not table.has(f.name):
            continue
        names = tuple(n for n in f.names if table.has(n))
        out.append(f if names == f.names else replace(f, names=names))
    return out


def flag_names(version: str | SglangVersion) -> set[str]:
    """Every spelling (aliases included) ``version`` accepts: all of its real parser's flags."""
    return set(table_for(version).by_name)


def has_flag(version: str | SglangVersion, name: str, *, current: bool = False) -> bool:
    """Whether ``version`` declares ``name`` (``current``: and not as a deprecated alias)."""
    table = table_for(version)
    return table.has(name) and not (current and table.deprecated(name))


class _RaisingParser(argparse.ArgumentParser):
    """An ArgumentParser that raises ConfigError instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"argv: SGLang's parser refuses it: {message}")


#: argparse ``type`` for the type names the tables hold (other converters read as text).
_TYPES: dict[str | None, Callable[[str], Any]] = {
    "int": int, "float": float, "str": str, None: str, "human_readable_int": human_readable_int, "loads": json.loads,
}
#: 0.5.9 declares --tensor-parallel-size first (dest tensor_parallel_size); autotune's dests are the short ones.
_DEST_RENAME = {"tensor_parallel_size": "tp_size", "data_parallel_size": "dp_size",
                "expert_parallel_size": "ep_size", "pipeline_parallel_size": "pp_size"}


def build_parser(
    version: str | SglangVersion,
    *,
    prog: str = "launch_server.py",
    parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser,
) -> argparse.ArgumentParser:
    """An ``argparse.ArgumentParser`` with every flag of ``version``'s real parser, ``allow_abbrev=True``.

    Built from the release's table (``flag_tables/<version>.json``, read from
    its wheel), so unique prefixes, ambiguous prefixes, choices and types
    behave as on a real server. Callers may add their own flags (the simulated
    server adds ``--sim-*``). On a bad argv it prints ``<prog>: error: ...`` and
    exits 2, as SGLang does.
    """
    v = as_version(version)
    table = table_for(v)
    parser = parser_class(prog=prog, description=f"SGLang {table.version} launch_server flags (read from its wheel)",
                          allow_abbrev=True)
    for flag in table.flags:
        dest = _DEST_RENAME.get(flag["dest"], flag["dest"])
        kwargs: dict[str, Any] = {"dest": dest}
        names = list(flag["names"])
        if flag["action"] == "BooleanOptionalAction":
            names = [n for n in names if not n.startswith("--no-")]
            kwargs["action"] = argparse.BooleanOptionalAction
            kwargs["default"] = flag["default"]
        elif flag["kind"] == "bool":
            if flag["action"] == "DeprecatedStoreConstAction" and "disable" in names[0]:
                kwargs.update(action="store_const", const="disabled")
            elif flag["action"] == "_StoreFalseAction":
                kwargs["action"] = "store_false"
            else:
                kwargs["action"] = "store_true"
            if flag["default"] is not None or flag["action"] == "_StoreTrueAction":
                kwargs["default"] = flag["default"]
        else:
            kwargs["type"] = _TYPES.get(flag["type"], str)
            kwargs["default"] = flag["default"]
            if flag["choices"] is not None:
                kwargs["choices"] = flag["choices"]
            if flag["nargs"] is not None:
                kwargs["nargs"] = flag["nargs"]
            if flag["required"]:
                kwargs["required"] = True
        parser.add_argument(*names, **kwargs)
    return parser


def shell_line(argv: list[str]) -> str:
    """A copy-pasteable, shlex-quoted command line."""
    return shlex.join(argv)


def _num(x: float | int) -> str:
    return repr(float(x)) if isinstance(x, float) else str(x)


def _check_choice(field: str, flag_name: str, value: str, v: SglangVersion) -> None:
    flag = table_for(v).by_name.get(flag_name)
    if flag is not None and flag["choices"] is not None and value not in flag["choices"]:
        raise ConfigError(
            f"{field}: {value!r} is not accepted by SGLang {v} {flag_name} (choices: {', '.join(flag['choices'])})"
        )


def _check_positive(cfg: ServerConfig) -> None:
    for field in ("tp_size", "dp_size", "ep_size", "attn_dp_size"):
        if getattr(cfg, field) < 1:
            raise ConfigError(f"{field}: must be >= 1, got {getattr(cfg, field)}")
    if cfg.attn_dp_size > 1 and cfg.dp_size != 1:
        raise ConfigError(f"attn_dp_size: {cfg.attn_dp_size} with dp_size {cfg.dp_size}: DP attention runs on the "
                          "tp_size GPUs; plain DP replicas on top of it are not modelled (set dp_size to 1)")
    if cfg.tp_size % cfg.attn_dp_size:
        raise ConfigError(f"attn_dp_size: {cfg.attn_dp_size} does not divide tp_size {cfg.tp_size}")
    if cfg.mem_fraction_static is not None and not 0.0 < cfg.mem_fraction_static < 1.0:
        raise ConfigError(f"mem_fraction_static: must be in (0, 1), got {cfg.mem_fraction_static}")
    for field in ("cuda_graph_max_bs", "max_running_requests", "max_total_tokens", "context_length"):
        value = getattr(cfg, field)
        if value is not None and value < 1:
            raise ConfigError(f"{field}: must be >= 1, got {value}")


def render_argv(
    cfg: ServerConfig,
    version: str | SglangVersion,
    *,
    python: str = sys.executable,
    module: str = "sglang.launch_server",
    check: bool = True,
) -> list[str]:
    """``[python, "-m", module, "--model-path", ...]`` for ``cfg`` in ``version``'s dialect.

    Only knobs that differ from SGLang's defaults are passed (``None`` = not
    passed); ``--host`` and ``--port`` are always passed. ``extra_args`` are
    appended verbatim. Raises :class:`ConfigError` for a knob the version lacks
    and, with ``check``, when the version's parser would refuse the result (a
    flag no release has and no flag of this one is near is taken for a newer
    build's: :mod:`autotune.sglang.flags.unknown`).
    """
    v = as_version(version)
    _check_positive(cfg)
    split_graph_flags = not has_flag(v, "--cuda-graph-max-bs", current=True)  # 0.5.14 on: -decode / -prefill
    a: list[str] = ["--model-path", str(cfg.model_path)]
    if cfg.tp_size != 1:
        a += ["--tp-size", str(cfg.tp_size)]
    if cfg.dp_size != 1:
        a += ["--dp-size", str(cfg.dp_size)]
    if cfg.ep_size != 1:
        a += ["--ep-size", str(cfg.ep_size)]
    if cfg.attn_dp_size > 1:
        if has_flag(v, "--attn-dp-size"):
            a += ["--attn-dp-size", str(cfg.attn_dp_size)]
        else:
            a += ["--enable-dp-attention", "--dp-size", str(cfg.attn_dp_size)]
    a += ["--host", cfg.host, "--port", str(cfg.port)]
    if cfg.mem_fraction_static is not None:
        a += ["--mem-fraction-static", _num(cfg.mem_fraction_static)]
    if cfg.cuda_graph_max_bs is not None:
        a += ["--cuda-graph-max-bs-decode" if split_graph_flags else "--cuda-graph-max-bs", str(cfg.cuda_graph_max_bs)]
    if cfg.disable_cuda_graph:
        if not has_flag(v, "--disable-cuda-graph", current=True):
            a += ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]
        else:
            a += ["--disable-cuda-graph"]
    if not cfg.custom_allreduce:
        a += ["--disable-custom-all-reduce"]
    if cfg.flashinfer_allreduce_fusion:
        a += (["--flashinfer-allreduce-fusion-backend", "auto"] if has_flag(v, "--flashinfer-allreduce-fusion-backend")
              else ["--enable-flashinfer-allreduce-fusion"])
    if cfg.enable_torch_symm_mem:
        a += ["--enable-torch-symm-mem"]
    if cfg.enable_symm_mem:
        a += ["--enable-symm-mem"]
    a += _render_speculative(cfg.speculative, v)
    if cfg.chunked_prefill_size is not None:
        a += ["--chunked-prefill-size", str(cfg.chunked_prefill_size)]
    if cfg.max_running_requests is not None:
        a += ["--max-running-requests", str(cfg.max_running_requests)]
    if cfg.max_total_tokens is not None:
        a += ["--max-total-tokens", str(cfg.max_total_tokens)]
    if cfg.kv_cache_dtype and cfg.kv_cache_dtype != "auto":
        _check_choice("kv_cache_dtype", "--kv-cache-dtype", cfg.kv_cache_dtype, v)
        a += ["--kv-cache-dtype", cfg.kv_cache_dtype]
    if cfg.attention_backend is not None:
        _check_choice("attention_backend", "--attention-backend", cfg.attention_backend, v)
        a += ["--attention-backend", cfg.attention_backend]
    if cfg.context_length is not None:
        a += ["--context-length", str(cfg.context_length)]
    if cfg.load_format is not None:
        _check_choice("load_format", "--load-format", cfg.load_format, v)
        a += ["--load-format", cfg.load_format]
    if cfg.trust_remote_code:
        a += ["--trust-remote-code"]
    for name, value in cfg.flags:
        a += render_flag(name, value, v)
    a += [str(x) for x in cfg.extra_args]
    if check:
        _parser(v, tuple(newer_flags(a, v))).parse_args(a)
    return [python, "-m", module, *a]


def render_flag(name: str, value: Any, version: str | SglangVersion) -> list[str]:
    """One flag searched by name, for ``version``: the spelling the release has (a catalogue knob renamed
    across releases renders its release's name), a bool as the bare flag (False: not passed; a
    ``--x/--no-x`` flag: ``--no-x``), a value as ``--flag VALUE``. A flag the release lacks renders as
    written, so the release's parser refuses it with its own message."""
    from autotune.sglang.knobs.catalogue import lookup, spelling

    if value is None:
        return []
    v = as_version(version)
    knob = lookup(name)
    spelled = (spelling(knob, v) if knob is not None else None) or name
    entry = table_for(v).by_name.get(spelled)
    is_bool = isinstance(value, bool) or (entry is not None and entry["kind"] == "bool")
    if is_bool:
        on = value if isinstance(value, bool) else str(value).lower() in ("1", "true", "on", "yes")
        if entry is not None and entry["action"] == "BooleanOptionalAction":
            return [spelled] if on else ["--no-" + spelled[2:]]
        return [spelled] if on else []
    return [spelled, _num(value) if isinstance(value, (int, float)) else str(value)]


def _render_speculative(spec: SpeculativeConfig, v: SglangVersion) -> list[str]:
    if not spec.enabled:
        return []
    _check_choice("speculative.algorithm", "--speculative-algorithm", str(spec.algorithm).upper(), v)
    out = ["--speculative-algorithm", str(spec.algorithm).upper()]
    if spec.draft_model_path is not None:
        out += ["--speculative-draft-model-path", str(spec.draft_model_path)]
    if spec.num_steps is not None:
        out += ["--speculative-num-steps", str(spec.num_steps)]
    if spec.eagle_topk is not None:
        out += ["--speculative-eagle-topk", str(spec.eagle_topk)]
    if spec.num_draft_tokens is not None:
        out += ["--speculative-num-draft-tokens", str(spec.num_draft_tokens)]
    return out


_PARSERS: dict[tuple[str, tuple[str, ...]], argparse.ArgumentParser] = {}


def _parser(v: SglangVersion, newer: tuple[str, ...] = ()) -> argparse.ArgumentParser:
    """The release's parser; ``newer``: flags taken for a newer build's (see autotune.sglang.flags.unknown)."""
    key = (str(v), newer)
    if key not in _PARSERS:
        parser = build_parser(v, parser_class=_RaisingParser)
        accept_newer_flags(parser, newer, v)
        _PARSERS[key] = parser
    return _PARSERS[key]


def config_from_namespace(ns: argparse.Namespace, version: str | SglangVersion) -> ServerConfig:
    """The canonical knobs of a parsed launch (for the simulated server, and round-trip tests).

    Deprecated spellings are folded in: ``--cuda-graph-max-bs`` (0.5.19-0.5.22)
    and ``--cuda-graph-max-bs-decode``; ``--disable-cuda-graph`` and the 0.5.23
    graph backends; ``--enable-flashinfer-allreduce-fusion`` and the 0.5.23 backend flag.
    """
    v = as_version(version)
    g = vars(ns).get
    max_bs = g("cuda_graph_max_bs_decode") or g("cuda_graph_max_bs")
    bs_list = g("cuda_graph_bs_decode") or g("cuda_graph_bs")
    if max_bs is None and bs_list:
        max_bs = max(bs_list)
    disable_graph = bool(
        g("disable_cuda_graph") or g("disable_decode_cuda_graph") or g("cuda_graph_backend_decode") == "disabled"
    )
    fusion = bool(g("enable_flashinfer_allreduce_fusion") or g("flashinfer_allreduce_fusion_backend"))
    if g("enforce_disable_flashinfer_allreduce_fusion"):
        fusion = False
    dp_size, attn_dp = g("dp_size") or 1, g("attn_dp_size") or 1
    if g("enable_dp_attention") and attn_dp == 1:  # the spelling before 0.5.22
        dp_size, attn_dp = 1, dp_size
    algo = g("speculative_algorithm")
    spec = SpeculativeConfig(
        algorithm=str(algo).upper() if algo else None,
        draft_model_path=g("speculative_draft_model_path"),
        num_steps=g("speculative_num_steps"),
        eagle_topk=g("speculative_eagle_topk"),
        num_draft_tokens=g("speculative_num_draft_tokens"),
    )
    del v  # the namespace already carries the dialect's dests
    return ServerConfig(
        model_path=str(g("model_path") or ""),
        tp_size=g("tp_size") or 1,
        dp_size=dp_size,
        ep_size=g("ep_size") or 1,
        attn_dp_size=attn_dp,
        mem_fraction_static=g("mem_fraction_static"),
        cuda_graph_max_bs=max_bs,
        disable_cuda_graph=disable_graph,
        custom_allreduce=not g("disable_custom_all_reduce"),
        flashinfer_allreduce_fusion=fusion,
        enable_torch_symm_mem=bool(g("enable_torch_symm_mem")),
        enable_symm_mem=bool(g("enable_symm_mem")),
        speculative=spec,
        chunked_prefill_size=g("chunked_prefill_size"),
        max_running_requests=g("max_running_requests"),
        max_total_tokens=g("max_total_tokens"),
        kv_cache_dtype=g("kv_cache_dtype") or "auto",
        attention_backend=g("attention_backend"),
        context_length=g("context_length"),
        load_format=None if g("load_format") in (None, "auto") else g("load_format"),
        trust_remote_code=bool(g("trust_remote_code")),
        host=g("host") or "127.0.0.1",
        port=g("port") or 30000,
    )


def effective_config(cfg: ServerConfig, version: str | SglangVersion) -> ServerConfig:
    """The knobs the server will really run with: the knobs, then ``extra_args``, as the release parses them.

    The memory model predicts from this, so a memory-relevant flag counts
    whatever path it took (``--kv-cache-dtype fp8_e4m3`` in ``extra_args`` is
    an fp8 cache). A flag in ``extra_args`` that sets what a knob already sets,
    to another value, is refused: the launch would silently run the last one.
    ``extra_args`` are kept (the memory model reads ``--page-size`` and the
    graph flags from them). SGLang has no environment spelling of these flags
    (0.5.9 and 0.5.23 ``environ.py`` read), so knobs and ``extra_args`` are
    every path a memory-relevant setting can take.
    """
    if not cfg.extra_args and not cfg.flags:
        return cfg
    v = as_version(version)
    argv = render_argv(cfg, v, python="python", check=False)[3:]
    parser = _parser(v, tuple(newer_flags(argv, v)))
    knobs_only = replace(cfg, extra_args=(), flags=())
    try:
        ns_all = parser.parse_args(argv)
        extra = parser.parse_args(["--model-path", cfg.model_path, *map(str, cfg.extra_args),
                                   *(x for n, val in cfg.flags for x in render_flag(n, val, v))])
    except ConfigError as exc:
        raise ConfigError(f"server.extra_args: {exc}") from None
    ns_knobs = parser.parse_args(render_argv(knobs_only, v, python="python", check=False)[3:])
    base = parser.parse_args(["--model-path", cfg.model_path])
    for dest, value in vars(extra).items():
        if dest in ("model_path", "host", "port") or value == getattr(base, dest, None):
            continue
        knob_value = getattr(ns_knobs, dest, None)
        if knob_value != getattr(base, dest, None) and knob_value != value:
            raise ConfigError(f"server.extra_args: sets {dest}={shown(value)}, contradicting the knob's {shown(knob_value)} "
                              "(set it in one place)")
    folded = config_from_namespace(ns_all, v)
    return replace(folded, extra_args=cfg.extra_args, flags=cfg.flags, env=cfg.env, host=cfg.host, port=cfg.port)
