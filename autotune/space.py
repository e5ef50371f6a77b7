"""The study's search space: optuna suggestions, the baseline trial, the grid, and
params -> :class:`~autotune.sglang.knobs.config.ServerConfig`.

Parameter names (what optuna stores, what tables and ``--set`` use):
``mem_fraction_static``, ``cuda_graph_max_bs``, ``custom_allreduce``,
``speculative_algorithm``, ``speculative_num_steps``, ``speculative_eagle_topk``,
``speculative_num_draft_tokens`` and the optional knobs of
:class:`~autotune.spec.SearchSpace` under their own names; flags and
environment variables searched by name under the flag (``--moe-runner-backend``)
or the variable (``SGLANG_ENABLE_PCIE_IPC_ALLREDUCE``); the node layout under
``layout`` (``tp4-dp2``).

Speculative parameters are conditional: they exist only when the algorithm is not
``none``. SGLang's rule "topk 1 => draft tokens = steps + 1" is applied here, up
front: with topk 1 the number of draft tokens is not a free parameter.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import optuna

from autotune.errors import ConfigError
from autotune.limits import GRID_AXIS, GRID_CANDIDATES, MAX_KNOB_INT, shown
from autotune.sglang.hardware.cpu import on_cpu
from autotune.sglang.knobs.config import ServerConfig, SpeculativeConfig
from autotune.spec import (
    AnyChoices,
    BoolChoices,
    FloatRange,
    IntChoices,
    IntRange,
    LayoutChoices,
    StrChoices,
    StudySpec,
    parse_layout,
)

# Optional knobs that map 1:1 onto ServerConfig fields.
_SIMPLE_KNOBS = (
    "chunked_prefill_size",
    "max_running_requests",
    "max_total_tokens",
    "flashinfer_allreduce_fusion",
    "enable_torch_symm_mem",
    "kv_cache_dtype",
    "attention_backend",
)
SPEC_PARAMS = (
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)


def _suggest(trial: optuna.Trial, name: str, dom: Any) -> Any:
    if isinstance(dom, FloatRange):
        # optuna's stepped floats carry binary noise (0.9299999999999999): use 0.93.
        return round(trial.suggest_float(name, dom.low, dom.high, step=dom.step), 6)
    if isinstance(dom, IntRange):
        return trial.suggest_int(name, dom.low, dom.high, step=dom.step)
    if isinstance(dom, (IntChoices, BoolChoices, StrChoices, AnyChoices, LayoutChoices)):
        return trial.suggest_categorical(name, list(dom.choices))
    raise TypeError(f"no suggestion for {name}: {dom!r}")  # pragma: no cover - a programming error


# ---- counting and listing an axis: never more than a limit ---------------------------------
#: Stands for an axis too large to count as a float (a range over a subnormal step).
_HUGE = 2**63


def axis_size(dom: Any) -> int:
    """Values of one axis of the space, counted without listing them (a float range without a step:
    its two ends, as the grid takes it)."""
    if isinstance(dom, FloatRange):
        if dom.step is None:
            return 1 if dom.low == dom.high else 2
        q = (dom.high - dom.low) / dom.step
        return int(round(q)) + 1 if math.isfinite(q) and q < _HUGE else _HUGE
    if isinstance(dom, IntRange):
        return (dom.high - dom.low) // dom.step + 1
    return len(dom.choices)


def _value_at(dom: Any, i: int) -> Any:
    if isinstance(dom, FloatRange):
        if dom.step is None:
            return dom.low if i == 0 else dom.high
        return round(dom.low + i * dom.step, 10)
    if isinstance(dom, IntRange):
        return dom.low + i * dom.step
    return dom.choices[i]


def _values(dom: Any, field: str = "search_space", limit: int = GRID_AXIS) -> list[Any]:
    """Every value of one axis; ConfigError naming ``field`` when there are more than ``limit``."""
    n = axis_size(dom)
    if n > limit:
        raise ConfigError(f"{field}: {_count(n)} values, more than the {limit:,} autotune lists for one axis "
                          "(a wider step, or a sampler that draws from it: sampler.kind tpe or random)")
    return [_value_at(dom, i) for i in range(n)]


def sample_values(dom: Any, limit: int = GRID_AXIS) -> list[Any]:
    """The axis's values, or ``limit`` of them evenly spaced over it, both ends included, when it has
    more (a designed start picks from these; the sampler draws from the whole axis later)."""
    n = axis_size(dom)
    if n <= limit:
        return [_value_at(dom, i) for i in range(n)]
    return list(dict.fromkeys(_value_at(dom, (i * (n - 1)) // (limit - 1)) for i in range(limit)))


def _count(n: int) -> str:
    return f"{n:,}" if n < _HUGE else f"more than {_HUGE:.1e}"


def _axes(spec: StudySpec) -> list[tuple[str, str, Any]]:
    """(param name, field of the study file, domain) of every non-speculative axis, in grid order."""
    space = spec.search_space
    out = [(name, f"search_space.{name}", getattr(space, name))
           for name in ("mem_fraction_static", "cuda_graph_max_bs", "custom_allreduce", *_SIMPLE_KNOBS)
           if getattr(space, name) is not None]
    if space.layout is not None:
        out.append(("layout", "search_space.layout", space.layout))
    out += [(name, f"search_space.flags.{name}", dom) for name, dom in space.flags.items()]
    out += [(name, f"search_space.env.{name}", dom) for name, dom in space.env.items()]
    return out


def _spec_axes(sp: Any) -> list[tuple[str, Any]]:
    return [(f"search_space.speculative.{k}", getattr(sp, k)) for k in ("num_steps", "eagle_topk", "num_draft_tokens")
            if getattr(sp, k) is not None]


def _spec_variant_count(sp: Any) -> int:
    """How many speculative variants :func:`_spec_variants` yields, counted."""
    n = 0
    for algo in sp.algorithm.choices:
        if algo == "none" or (algo != "NGRAM" and sp.num_steps is None):
            n += 1
        elif algo == "NGRAM":
            n += axis_size(sp.num_draft_tokens) if sp.num_draft_tokens else 1
        else:
            topks = axis_size(sp.eagle_topk) if sp.eagle_topk else 1
            ones = 1 if sp.eagle_topk is None or _holds_one(sp.eagle_topk) else 0
            drafts = axis_size(sp.num_draft_tokens) if sp.num_draft_tokens else 1
            n += axis_size(sp.num_steps) * (ones + (topks - ones) * drafts)
    return n


def _holds_one(dom: Any) -> bool:
    if isinstance(dom, IntRange):
        return dom.low <= 1 <= dom.high and (1 - dom.low) % dom.step == 0
    return 1 in dom.choices


def grid_size(spec: StudySpec) -> int:
    """Candidates of the whole grid (:func:`iter_grid`), counted without listing one."""
    n = math.prod(axis_size(dom) for _, _, dom in _axes(spec))
    sp = spec.search_space.speculative
    return n * (_spec_variant_count(sp) if sp is not None else 1)


def largest_axis(spec: StudySpec) -> tuple[str, int]:
    """The field of the study file with the most values, and how many (for an error naming it)."""
    sizes = [(field, axis_size(dom)) for _, field, dom in _axes(spec)]
    sp = spec.search_space.speculative
    if sp is not None:
        sizes += [(field, axis_size(dom)) for field, dom in _spec_axes(sp)]
    return max(sizes, key=lambda fs: fs[1], default=("search_space", 1))


def check_grid(spec: StudySpec, limit: int = GRID_CANDIDATES) -> int:
    """:func:`grid_size`, or ConfigError (naming the largest axis) when the grid holds more than ``limit``."""
    n = grid_size(spec)
    if n > limit:
        field, size = largest_axis(spec)
        raise ConfigError(f"{field}: the search space's grid holds {_count(n)} candidates ({field}: {_count(size)} "
                          f"values), more than the {limit:,} autotune lists: fix knobs with --set, or widen the steps")
    return n


def check_values(dom: Any) -> list[Any]:
    """Values of one axis that stand for all of it when each is checked alone (a flag's rendering, a
    parser's type): a range's ends, every choice."""
    if isinstance(dom, (FloatRange, IntRange)):
        n = axis_size(dom)
        return list(dict.fromkeys([_value_at(dom, 0), _value_at(dom, n - 1) if n < _HUGE else dom.high]))
    return list(dom.choices)


def nearest_value(dom: Any, want: float) -> Any:
    """The axis's value nearest ``want`` (the lower one on a tie), found without listing the axis."""
    step = getattr(dom, "step", None)
    if isinstance(dom, (FloatRange, IntRange)) and step is not None:
        n = axis_size(dom)
        i = min(n - 1, max(0, math.floor((want - dom.low) / step))) if n < _HUGE else 0
        near = [_value_at(dom, j) for j in (i, i + 1) if j < n]
        return min(near, key=lambda v: (abs(float(v) - want), float(v)))
    vals = check_values(dom)
    return min(vals, key=lambda v: (abs(float(v) - want), float(v)))


def suggest(trial: optuna.Trial, spec: StudySpec) -> dict[str, Any]:
    """Ask optuna for every parameter of the space (conditional ones only when they apply)."""
    space = spec.search_space
    params: dict[str, Any] = {}
    with warnings.catch_warnings():
        # The enqueued baseline may hold SGLang's automatic f, which is off the step grid.
        warnings.filterwarnings("ignore", message="Fixed parameter")
        if space.mem_fraction_static is not None:
            params["mem_fraction_static"] = _suggest(trial, "mem_fraction_static", space.mem_fraction_static)
        if space.cuda_graph_max_bs is not None:
            params["cuda_graph_max_bs"] = _suggest(trial, "cuda_graph_max_bs", space.cuda_graph_max_bs)
        if space.custom_allreduce is not None:
            params["custom_allreduce"] = _suggest(trial, "custom_allreduce", space.custom_allreduce)
        for knob in _SIMPLE_KNOBS:
            dom = getattr(space, knob)
            if dom is not None:
                params[knob] = _suggest(trial, knob, dom)
        for name, dom in _named_axes(spec):
            params[name] = _suggest(trial, name, dom)
        sp = space.speculative
        if sp is not None:
            algo = _suggest(trial, "speculative_algorithm", sp.algorithm)
            params["speculative_algorithm"] = algo
            if algo != "none":
                params.update(_suggest_spec(trial, algo, sp))
    return params


class _Probe:
    """Stands in for an optuna trial whose parameters are fixed to ``params`` (an enqueued
    configuration): each suggestion answers with the fixed value and notes the first one optuna's
    ask would refuse, a value not among a categorical knob's choices (ValueError "'8' not in (1,)");
    a number outside its range is taken, with a warning, as the ask takes it. A knob ``params``
    does not fix answers with its first value (the sampler would pick it)."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params
        self.refused: tuple[str, Any] | None = None

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        return self.params.get(name, low)

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        return self.params.get(name, low)

    def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
        if name not in self.params:
            return choices[0]
        value = self.params[name]
        try:
            optuna.distributions.CategoricalDistribution(choices).to_internal_repr(value)
        except ValueError:
            if self.refused is None:
                self.refused = (name, value)
            return choices[0]
        return value


def refused(spec: StudySpec, params: dict[str, Any]) -> tuple[str, Any] | None:
    """The first ``(knob, value)`` of an enqueued configuration that ``spec``'s space does not hold
    (optuna's ask would raise on it), or None. Knobs the space lacks are ignored, as the ask ignores them."""
    probe = _Probe(params)
    suggest(probe, spec)  # type: ignore[arg-type]  # _Probe answers the suggest calls suggest makes
    return probe.refused


def _suggest_spec(trial: optuna.Trial, algo: str, sp: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if algo == "NGRAM":
        if sp.num_draft_tokens is not None:
            out["speculative_num_draft_tokens"] = _suggest(trial, "speculative_num_draft_tokens", sp.num_draft_tokens)
        return out
    if sp.num_steps is None:
        return out  # SGLang auto-chooses (steps, topk, draft tokens) together
    out["speculative_num_steps"] = steps = _suggest(trial, "speculative_num_steps", sp.num_steps)
    topk = _suggest(trial, "speculative_eagle_topk", sp.eagle_topk) if sp.eagle_topk is not None else 1
    out["speculative_eagle_topk"] = topk
    if topk > 1 and sp.num_draft_tokens is not None:
        out["speculative_num_draft_tokens"] = _suggest(trial, "speculative_num_draft_tokens", sp.num_draft_tokens)
    else:
        out["speculative_num_draft_tokens"] = steps + 1 if topk == 1 else None
    return {k: v for k, v in out.items() if v is not None}


def _named_axes(spec: StudySpec) -> list[tuple[str, Any]]:
    """The layout, the flags and the environment variables of the space, in a stable order."""
    space = spec.search_space
    axes: list[tuple[str, Any]] = [("layout", space.layout)] if space.layout is not None else []
    axes += list(space.flags.items()) + list(space.env.items())
    return axes


def iter_grid(spec: StudySpec) -> Iterator[dict[str, Any]]:
    """Every candidate of the space, floats stepped by their step (for ``plan`` and grid search);
    ConfigError first when it holds more than :data:`~autotune.limits.GRID_CANDIDATES`."""
    check_grid(spec)
    space = spec.search_space
    axes = [(name, _values(dom, field)) for name, field, dom in _axes(spec)]
    spec_variants = list(_spec_variants(space.speculative)) if space.speculative else [{}]
    names = [a[0] for a in axes]
    for combo in itertools.product(*(a[1] for a in axes)):
        for sv in spec_variants:
            yield {**dict(zip(names, combo, strict=True)), **sv}


def spec_variants(sp: Any, limit: int = GRID_CANDIDATES) -> Iterator[dict[str, Any]]:
    """Every speculative variant of the space when there are at most ``limit`` (counted first), else the
    variants over evenly spaced samples of its axes (about ``limit`` of them): a stage that tries the
    variants one by one picks from these, never from a list it cannot hold."""
    n = _spec_variant_count(sp)
    if n <= limit:
        return _spec_variants(sp)
    algos = max(1, len([a for a in sp.algorithm.choices if a != "none"]))
    k = max(2, int((limit / algos) ** (1 / 3)))
    return _spec_variants(sp, lambda dom: sample_values(dom, k))


def spec_variant_count(sp: Any) -> int:
    """Speculative variants of the space with an algorithm on (``none`` left out), counted."""
    return _spec_variant_count(sp) - (1 if "none" in sp.algorithm.choices else 0)


def _spec_variants(sp: Any, values: Any = None) -> Iterator[dict[str, Any]]:
    vals = values or (lambda dom: _values(dom, "search_space.speculative"))
    for algo in sp.algorithm.choices:
        if algo == "none":
            yield {"speculative_algorithm": "none"}
            continue
        if algo == "NGRAM":
            for d in vals(sp.num_draft_tokens) if sp.num_draft_tokens else [None]:
                yield {"speculative_algorithm": algo, **({"speculative_num_draft_tokens": d} if d else {})}
            continue
        if sp.num_steps is None:
            yield {"speculative_algorithm": algo}
            continue
        for steps in vals(sp.num_steps):
            for topk in vals(sp.eagle_topk) if sp.eagle_topk else [1]:
                drafts = vals(sp.num_draft_tokens) if (topk > 1 and sp.num_draft_tokens) else [steps + 1]
                for d in drafts:
                    yield {
                        "speculative_algorithm": algo,
                        "speculative_num_steps": steps,
                        "speculative_eagle_topk": topk,
                        "speculative_num_draft_tokens": d,
                    }


def param_names(spec: StudySpec) -> list[str]:
    """Every parameter name this space can produce."""
    names: list[str] = []
    space = spec.search_space
    for name in ("mem_fraction_static", "cuda_graph_max_bs", "custom_allreduce", *_SIMPLE_KNOBS):
        if getattr(space, name) is not None:
            names.append(name)
    names += [name for name, _ in _named_axes(spec)]
    if space.speculative is not None:
        names.extend(SPEC_PARAMS)
    return names


def parse_overrides(spec: StudySpec, items: list[str]) -> dict[str, Any]:
    """``KNOB=VALUE`` strings (``plan --set``) to typed params. ConfigError names the bad one."""
    known = set(param_names(spec)) | {"mem_fraction_static", "cuda_graph_max_bs", "custom_allreduce", *_SIMPLE_KNOBS,
                                      *SPEC_PARAMS}
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set: expected KNOB=VALUE, got {shown(item)}")
        key, raw = item.split("=", 1)
        key = key.strip()
        named = dict(_named_axes(spec))
        if key in named:
            out[key] = _coerce_named(key, named[key], raw.strip())
            continue
        key = key.replace("-", "_")
        if key not in known:
            raise ConfigError(f"--set: unknown knob {shown(key)}; known: {', '.join(sorted(known))}")
        out[key] = _coerce(key, raw.strip())
    return out


def _coerce_named(key: str, dom: Any, raw: str) -> Any:
    """A ``--set`` value for a flag, variable or layout: the choice whose text matches."""
    for choice in dom.choices:
        if str(choice).lower() == raw.lower() or (not isinstance(choice, bool) and _same_number(choice, raw)):
            return choice
    raise ConfigError(f"--set: bad value for {key}: {shown(raw)} (choices: {shown(list(dom.choices), 120)[1:-1]})")


def _same_number(choice: Any, raw: str) -> bool:
    try:
        return isinstance(choice, (int, float)) and float(raw) == float(choice)
    except ValueError:
        return False


def env_text(value: Any) -> str:
    """An environment variable's text for a searched value (True -> "1", False -> "0")."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _coerce(key: str, raw: str) -> Any:
    def bad(why: str) -> ConfigError:  # the value and why it is refused, not just "bad value"
        return ConfigError(f"--set: bad value for {key}: {shown(raw)} ({why})")

    if key == "mem_fraction_static":
        try:
            v = float(raw)
        except ValueError:
            raise bad("must be a number") from None
        if not 0 < v <= 1:
            raise bad("a fraction of GPU memory: must be > 0 and <= 1")
        return v
    if key in ("custom_allreduce", "flashinfer_allreduce_fusion", "enable_torch_symm_mem"):
        low = raw.lower()
        if low not in ("true", "false", "1", "0", "on", "off", "yes", "no"):
            raise bad("must be true or false, 1 or 0, on or off, yes or no")
        return low in ("true", "1", "on", "yes")
    if key in ("kv_cache_dtype", "attention_backend", "speculative_algorithm"):
        return raw
    try:
        if len(raw) > 20:  # more digits than any knob holds: never converted (int() of 4,300+ digits raises)
            raise ValueError
        v = int(raw)
    except ValueError:
        raise bad("must be a whole number") from None
    if not 0 < v <= MAX_KNOB_INT:
        raise bad(f"must be > 0 and <= {MAX_KNOB_INT}")
    return v


def to_config(spec: StudySpec, params: dict[str, Any], *, baseline: bool = False, port: int = 30000) -> ServerConfig:
    """The launch for these params. ``baseline=True`` passes nothing SGLang would pick itself."""
    srv = spec.server
    cfg = ServerConfig(
        model_path=spec.resolve_path(srv.model_path) or srv.model_path,
        tp_size=srv.tp_size,
        dp_size=srv.dp_size,
        host=srv.host,
        port=port,
        extra_args=tuple(srv.extra_args),
    )
    if baseline:
        return _on_device(spec, cfg)
    updates: dict[str, Any] = _named_updates(spec, params)
    for key in ("mem_fraction_static", "cuda_graph_max_bs", "custom_allreduce", *_SIMPLE_KNOBS):
        if key in params and params[key] is not None:
            value = params[key]
            # optuna's stepped floats carry binary noise (0.9299999999999999): render 0.93.
            updates[key] = round(value, 6) if isinstance(value, float) else value
    algo = params.get("speculative_algorithm", "none")
    if algo and algo != "none":
        sp = spec.search_space.speculative
        draft = spec.resolve_path(sp.draft_model_path) if sp and algo in ("EAGLE", "EAGLE3", "STANDALONE") else None
        updates["speculative"] = SpeculativeConfig(
            algorithm=algo,
            draft_model_path=draft,
            num_steps=params.get("speculative_num_steps"),
            eagle_topk=params.get("speculative_eagle_topk"),
            num_draft_tokens=params.get("speculative_num_draft_tokens"),
        )
    return _on_device(spec, replace(cfg, **updates))


def _on_device(spec: StudySpec, cfg: ServerConfig) -> ServerConfig:
    """On ``server.device: cpu``, what real SGLang needs there (even SGLang's defaults need it)."""
    if spec.server.device != "cpu":
        return cfg
    return on_cpu(cfg, spec.server.sglang_version)


def _named_updates(spec: StudySpec, params: dict[str, Any]) -> dict[str, Any]:
    """Layout, flags and variables of ``params`` as ServerConfig updates (a known flag that the config
    models sets its field, so it renders version-correctly: ``--attn-dp-size`` is
    ``--enable-dp-attention --dp-size N`` before 0.5.22)."""
    from autotune.sglang.knobs.catalogue import lookup

    space = spec.search_space
    updates: dict[str, Any] = {}
    if space.layout is not None and params.get("layout"):
        tp, dp, ep = parse_layout(params["layout"])
        updates.update(tp_size=tp, dp_size=dp, ep_size=ep)
    flags: list[tuple[str, Any]] = []
    for name in space.flags:
        value = params.get(name)
        if value is None:
            continue
        knob = lookup(name)
        if knob is not None and knob.field is not None:
            updates[knob.field] = int(value) if knob.value == "int" else value
        else:
            flags.append((name, value))
    env = [(name, env_text(params[name])) for name in space.env if params.get(name) is not None]
    if flags:
        updates["flags"] = tuple(flags)
    if env:
        updates["env"] = tuple(env)
    return updates


def named_defaults(spec: StudySpec) -> dict[str, Any]:
    """SGLang's defaults for the layout, flags and variables of the space (trial 0): the server's own
    layout, each flag's default in the release's table (bools off), a catalogue variable's off value;
    ``None`` (not passed / not set) where there is none."""
    from autotune.sglang.flags.release_tables import table_for
    from autotune.sglang.knobs.catalogue import lookup, spelling

    space = spec.search_space
    out: dict[str, Any] = {}
    if space.layout is not None:
        srv = spec.server
        out["layout"] = f"tp{srv.tp_size}" + (f"-dp{srv.dp_size}" if srv.dp_size > 1 else "")
    table = table_for(spec.server.sglang_version)
    for name in space.flags:
        knob = lookup(name)
        spelled = (spelling(knob, spec.server.sglang_version) if knob else None) or name
        entry = table.by_name.get(spelled)
        default = None if entry is None else entry["default"]
        if knob is not None and knob.name == "--attn-dp-size":
            default = 1
        if entry is not None and entry["kind"] == "bool":
            default = bool(default)
        out[name] = default
    for name in space.env:
        knob = lookup(name)
        out[name] = knob.values[0] if knob is not None and knob.value == "bool" and knob.values else None
        if out[name] is not None:
            choices = space.env[name].choices
            match = [c for c in choices if env_text(c) == out[name]]
            out[name] = match[0] if match else out[name]
    return out


def baseline_params(spec: StudySpec, resolved: dict[str, Any]) -> dict[str, Any]:
    """Params of trial 0: SGLang's defaults, with automatic values resolved (``resolved`` from the
    memory model: ``mem_fraction_static`` and ``cuda_graph_max_bs``) so the sampler sees real numbers."""
    space = spec.search_space
    params: dict[str, Any] = {}
    if space.mem_fraction_static is not None:
        params["mem_fraction_static"] = resolved["mem_fraction_static"]
    if space.cuda_graph_max_bs is not None:
        params["cuda_graph_max_bs"] = resolved["cuda_graph_max_bs"]
    if space.custom_allreduce is not None:
        params["custom_allreduce"] = True
    # Every knob of the space gets a value, so trial 0's params describe what it ran: SGLang's
    # default, resolved where the memory model knows it, else None ("not passed").
    defaults = {"flashinfer_allreduce_fusion": False, "enable_torch_symm_mem": False, "kv_cache_dtype": "auto"}
    for knob in _SIMPLE_KNOBS:
        if getattr(space, knob) is not None:
            params[knob] = defaults[knob] if knob in defaults else resolved.get(knob)
    params.update(named_defaults(spec))
    if space.speculative is not None:
        params["speculative_algorithm"] = "none"
    return params


def widen_for_baseline(spec: StudySpec, params: dict[str, Any]) -> tuple[StudySpec, dict[str, Any]]:
    """Make trial 0 a point of the space: optuna refuses a fixed categorical outside its choices,
    and samplers re-validate stepped floats. Categorical values are added to the choices; a float
    is snapped to the nearest step (the range widened by whole steps if it lies outside). The
    exact automatic values stay in the baseline's ``resolved`` user attribute. A float SGLang picks
    where autotune cannot predict it (``mem_fraction_static`` on ``server.device: cpu``: None) leaves
    the params: a float distribution holds no None, so the sampler records a value of the range for
    the trial, which still launches SGLang's defaults (``to_config(baseline=True)`` passes nothing)."""
    space = spec.search_space
    updates: dict[str, Any] = {}
    params = dict(params)
    named = dict(_named_axes(spec))
    flag_updates: dict[str, Any] = {}
    env_updates: dict[str, Any] = {}
    for name, value in list(params.items()):
        dom = named[name] if name in named else getattr(space, name, None)
        if name in named and name != "layout" and dom is not None and value not in dom.choices:
            target = flag_updates if name in space.flags else env_updates
            target[name] = dom.model_copy(update={"choices": [*dom.choices, value]})
        elif isinstance(dom, (IntChoices, BoolChoices, StrChoices, LayoutChoices)) and value not in dom.choices:
            updates[name] = dom.model_copy(update={"choices": [*dom.choices, value]})
        elif isinstance(dom, FloatRange) and value is None:
            del params[name]
        elif isinstance(dom, FloatRange):
            low, high = dom.low, dom.high
            if dom.step:
                k = round((value - low) / dom.step)
                snapped = round(low + k * dom.step, 10)
                if snapped < low:
                    low = snapped
                if snapped > high:
                    high = snapped
                params[name] = snapped
            else:
                low, high = min(low, value), max(high, value)
            if (low, high) != (dom.low, dom.high):
                updates[name] = dom.model_copy(update={"low": low, "high": high})
    if flag_updates:
        updates["flags"] = {**space.flags, **flag_updates}
    if env_updates:
        updates["env"] = {**space.env, **env_updates}
    sp = space.speculative
    if sp is not None and "none" not in sp.algorithm.choices:
        updates["speculative"] = sp.model_copy(
            update={"algorithm": sp.algorithm.model_copy(update={"choices": ["none", *sp.algorithm.choices]})}
        )
    if not updates:
        return spec, params
    return spec.model_copy(update={"search_space": space.model_copy(update=updates)}), params


# ---- the user's own space: what a search trial may launch -----------------------------------
# The baseline widens the distributions optuna stores (widen_for_baseline: its RDB storage wants one
# distribution per parameter for the whole study), so a sampler drawing from them could hand a
# search trial SGLang's automatic value (max_running_requests 3327 where the file says 32, 64, 128).
# The study keeps the widened distributions (stable across resume) and every value a search trial
# gets is brought back into the file's space: by the sampler wrapper (samplers.InSpaceSampler), the
# grid (samplers.GridSampler enumerates iter_grid of this space only) and the driver's check of the
# queue (configurations queued by the search policy, the stages, a warm start).
def domain_of(spec: StudySpec, name: str) -> Any:
    """The domain of parameter ``name`` in ``spec``'s space, or None when the space has no such axis."""
    space = spec.search_space
    named = dict(_named_axes(spec))
    if name in named:
        return named[name]
    sp = space.speculative
    if name in SPEC_PARAMS:
        if sp is None:
            return None
        return sp.algorithm if name == "speculative_algorithm" else getattr(sp, name.removeprefix("speculative_"))
    return getattr(space, name, None) if name in ("mem_fraction_static", "cuda_graph_max_bs", "custom_allreduce",
                                                  *_SIMPLE_KNOBS) else None


def in_domain(dom: Any, value: Any) -> bool:
    """Whether ``value`` is one of the domain's values (a range's: within its ends, on its step)."""
    if isinstance(dom, (FloatRange, IntRange)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if not dom.low - 1e-9 <= value <= dom.high + 1e-9:
            return False
        if dom.step is None:
            return True
        k = (value - dom.low) / dom.step
        return abs(k - round(k)) < 1e-6
    return any(_same(value, c) for c in dom.choices)


def _same(a: Any, b: Any) -> bool:
    """Equal, a bool never standing for a number (True is not the choice 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


def into_domain(dom: Any, value: Any, pick: Any) -> Any:
    """``value`` when the domain holds it, else the domain's value that stands in for it: the nearest
    for a number (a range's end, the nearest choice), ``pick(choices)`` for anything else (a string, a
    bool, None: SGLang's "not passed")."""
    if in_domain(dom, value):
        return value
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(dom, (FloatRange, IntRange)):
        if not number:
            return _value_at(dom, 0)
        if dom.step is None:
            return min(max(float(value), dom.low), dom.high)
        return nearest_value(dom, float(value))
    numeric = [c for c in dom.choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
    if number and numeric:
        return min(numeric, key=lambda c: (abs(float(c) - value), float(c)))
    return pick(list(dom.choices))


def into_space(spec: StudySpec, params: dict[str, Any], pick: Any) -> dict[str, Any]:
    """``params`` with every value ``spec``'s space does not hold replaced (:func:`into_domain`);
    parameters the space lacks are kept as they are."""
    out = dict(params)
    for name, value in params.items():
        dom = domain_of(spec, name)
        if dom is not None:
            out[name] = into_domain(dom, value, pick)
    return out
