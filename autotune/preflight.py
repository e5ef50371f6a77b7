"""Every check of a study that needs no process, run before Ray, SGLang or the storage
is touched: ``autotune run`` fails on a bad study in a second, with one line (exit 2),
instead of after a Ray instance has started.

What the spec itself validates (fields, GPU catalogue, ``hardware: auto``, the calibration
against the GPU) has already run when the study loaded; this adds what needs the file system,
the model or the version tables: the model and draft directories, the workload's lengths
against the model's context, the dataset file, the storage URL's form and driver, the flags of
every searched value in the study's SGLang dialect (by autotune's own tables and SGLang's
argparse, as rebuilt for that version: no SGLang import), the ``search.references`` points,
and what an exhaustive grid would enumerate. ``autotune plan``, ``run`` and ``calibrate`` run it
all (``plan`` without the storage's write check): a study ``plan`` accepts does not fail later
on a value.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

from autotune.errors import ConfigError
from autotune.limits import GRID_AXIS, MAX_REFERENCES, clip, shown
from autotune.redact import redact_url
from autotune.spec import StudySpec

# Storage URL dialects and the module each needs (sqlalchemy's defaults).
_DRIVERS = {
    "postgresql": "psycopg2", "postgresql+psycopg": "psycopg", "postgresql+psycopg2": "psycopg2",
    "postgresql+asyncpg": "asyncpg", "mysql": "MySQLdb", "mysql+pymysql": "pymysql",
    "mysql+mysqldb": "MySQLdb", "sqlite": "sqlite3",
}


def check_study(spec: StudySpec, *, writes: bool = True, launches: bool = True) -> None:
    """Raise ConfigError (one line, naming the field and the value) on the first problem
    (``writes``: the command will write the storage, so it must be optuna's and writable;
    ``launches``: it will start servers, so the Ray address must answer)."""
    check_models(spec)
    check_lengths(spec)
    check_dataset(spec)
    check_storage_url(spec, writable=writes)
    check_space(spec)
    check_flags(spec)
    check_references(spec)
    check_sim(spec)
    if launches:
        check_executor(spec)


def warn_exposed(spec: StudySpec) -> str | None:
    """The warning ``run`` prints first when the study lets its servers listen beyond loopback
    (``server.expose: true`` with another ``server.host``); None when they listen on loopback."""
    from autotune.spec import is_loopback

    if is_loopback(spec.server.host):
        return None
    line = (f"server.host {spec.server.host!r} (server.expose: true): every SGLang server of this study "
            "listens beyond loopback; anyone who can reach this node can send it requests"
            + ("" if "--api-key" in " ".join(spec.server.extra_args) else " (no --api-key in server.extra_args)"))
    logging.getLogger("autotune.run").warning(line)
    return line


def check_models(spec: StudySpec) -> None:
    from autotune.sglang.models.profile import load_model_profile

    def load(field: str, raw: str) -> None:
        path = spec.resolve_path(raw)
        try:
            load_model_profile(str(path))
        except ConfigError as exc:
            text = str(exc).removeprefix("model_path: ")
            got = "" if "(got " in text else f" (got {shown(raw, 200)})"
            raise ConfigError(f"{field}: {text}{got}") from None

    load("server.model_path", spec.server.model_path)
    sp = spec.search_space.speculative
    if sp is not None and sp.draft_model_path and set(sp.algorithm.choices) - {"none", "NGRAM", "NEXTN"}:
        load("search_space.speculative.draft_model_path", sp.draft_model_path)


def check_lengths(spec: StudySpec) -> None:
    """Each workload's longest request within the model's context: SGLang refuses a request whose
    input, or input plus ``max_new_tokens``, reaches ``context_len`` (``--context-length`` when
    given, else the model's ``max_position_embeddings``): ``TokenizerManager._validate_one_request``
    in SGLang's ``srt/managers/tokenizer_manager.py``. Every request of the trial would fail."""
    from autotune import space
    from autotune.sglang.flags.argv import effective_config
    from autotune.sglang.models.profile import load_model_profile

    model = load_model_profile(spec.resolve_path(spec.server.model_path))
    try:
        cfg = effective_config(space.to_config(spec, {}, baseline=True), spec.server.sglang_version)
    except ConfigError:
        return  # check_flags names the bad extra_args
    context = cfg.context_length or model.context_len
    where = "server.extra_args --context-length" if cfg.context_length else "the model's max_position_embeddings"
    for name, wl in spec.named_workloads():
        if wl.dataset is not None and wl.dataset.kind != "random":
            continue  # the data set's own lengths
        if wl.input_len + wl.output_len >= context:
            raise ConfigError(f"{name}.input_len + output_len = {wl.input_len:,} + {wl.output_len:,} reaches the "
                              f"context length {context:,} ({where}): SGLang refuses every such request")


def check_dataset(spec: StudySpec) -> None:
    """Each workload's files, read now as the load generator will read them (regular files within
    :mod:`autotune.limits`' sizes: never ``/dev/zero`` or a FIFO): ``dataset_path``, a data set's or
    trace's ``path``, the ``tokenizer``."""
    from autotune.load.prompts import load_dataset
    from autotune.load.sources import check_workload_files
    from autotune.load.tokens import tokenizer_file
    from autotune.spec import resolve_workload

    for name, wl in spec.named_workloads():
        raw = wl.dataset_path
        if raw is not None:
            path = Path(spec.resolve_path(raw) or raw)
            if not path.is_file() and not os.path.lexists(path):
                raise ConfigError(f"{name}.dataset_path: no such file (got {shown(raw)})")
            try:
                load_dataset(path, wl.backend)
            except ConfigError as exc:
                raise ConfigError(f"{name}.{exc!s}") from None
        resolved = resolve_workload(spec, wl)
        try:
            check_workload_files(resolved.dataset)
        except ConfigError as exc:
            raise ConfigError(f"{name}.dataset.path: {exc}") from None
        if wl.tokenizer is not None and resolved.tokenizer is not None:
            tokenizer_file(resolved.tokenizer, f"{name}.tokenizer")


def check_storage_url(spec: StudySpec, *, writable: bool = True) -> None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    url = spec.storage_url
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(f"storage: not a database URL (got {redact_url(spec.storage or url)!r})") from None
    module = _DRIVERS.get(parsed.drivername)
    if module is None:
        try:
            parsed.get_dialect()
        except Exception:  # noqa: BLE001 - sqlalchemy raises NoSuchModuleError and others
            raise ConfigError(f"storage: unknown database kind {parsed.drivername!r} "
                              f"(got {redact_url(spec.storage or url)!r})") \
                from None
    elif importlib.util.find_spec(module) is None:
        hint = " (pip install -e '.[postgres]')" if parsed.drivername.startswith("postgresql") else ""
        raise ConfigError(f"storage: {parsed.drivername} needs the {module} driver, not installed{hint}")
    if not writable:
        return  # a command that only reads opens the storage read-only (autotune.storage_check)
    from autotune.storage_check import check_writable

    check_writable(url, spec.storage)  # a database in memory, another application's file, a read-only file
    if parsed.drivername == "sqlite" and parsed.database:
        where = Path(parsed.database).parent
        while not where.exists() and where != where.parent:
            where = where.parent
        if not os.access(where, os.W_OK):
            raise ConfigError(f"storage: cannot create {parsed.database} ({where} is not writable)")


def check_space(spec: StudySpec) -> None:
    """What an exhaustive grid (``sampler.kind: grid``) enumerates: every float range needs a step, and no
    axis may hold more than :data:`~autotune.limits.GRID_AXIS` values (optuna's BruteForceSampler lists
    each axis whole; TPE, random and GP draw from any size). ``sampler.kind: auto`` picks the grid only
    for a space no larger than ``n_trials`` (counted, never listed)."""
    from autotune import space
    from autotune.spec import FloatRange

    if spec.sampler.kind != "grid":
        return
    axes = [(field, dom) for _, field, dom in space._axes(spec)]
    if spec.search_space.speculative is not None:
        axes += space._spec_axes(spec.search_space.speculative)
    for field, dom in axes:
        if isinstance(dom, FloatRange) and dom.step is None:
            raise ConfigError(f"{field}: sampler.kind grid needs a step for a float range "
                              f"(got low={dom.low} high={dom.high})")
        n = space.axis_size(dom)
        if n > GRID_AXIS:
            raise ConfigError(f"{field}: sampler.kind grid would enumerate its {n:,} values, more than "
                              f"{GRID_AXIS:,}: a wider step, or sampler.kind tpe or random")


def check_sim(spec: StudySpec) -> None:
    """``server.sim.faults`` read now as the simulated server will read them (a bad one failed every
    launch); ``time_scale`` the spec bounds itself."""
    if spec.server.backend != "sim" or not spec.server.sim.faults:
        return
    from autotune.sim.faults import parse_faults

    try:
        parse_faults(spec.server.sim.faults)
    except ConfigError as exc:
        raise ConfigError(f"server.sim.faults: {str(exc).removeprefix('--sim-fault: ')}") from None


def check_executor(spec: StudySpec) -> None:
    """A Ray cluster address (``executor.address`` or ``RAY_ADDRESS``) that is malformed or does
    not resolve: one line now (exit 2), instead of ray.init's minutes of retries; one where no
    head answers: exit 1 (:func:`autotune.ray_address.check_address`)."""
    if spec.executor.kind != "ray":
        return
    from autotune.ray_address import check_address

    check_address(spec.executor.address)


def check_flags(spec: StudySpec) -> None:
    """The baseline and each searched value of each non-speculative knob, rendered in the
    study's dialect (a knob the version lacks, a value its parser refuses, bad extra_args):
    every choice, and a range's two ends (a range is one type: its ends stand for it)."""
    from autotune import space
    from autotune.sglang.flags.argv import render_argv
    from autotune.sglang.flags.release_tables import table_for

    version = spec.server.sglang_version
    table_for(version)  # a release autotune does not read is the version's fault, not extra_args'
    trials: list[tuple[str, dict[str, object]]] = [("server.extra_args", {})]
    sp = spec.search_space
    for name in ("mem_fraction_static", "cuda_graph_max_bs", "custom_allreduce", *space._SIMPLE_KNOBS):
        dom = getattr(sp, name, None)
        if dom is not None:
            trials += [(f"search_space.{name}", {name: v}) for v in space.check_values(dom)]
    for field, params in trials:
        try:
            render_argv(space.to_config(spec, params, baseline=not params), version)
        except ConfigError as exc:
            value = next(iter(params.values()), None)
            got = f" (got {shown(value)})" if params else ""
            raise ConfigError(f"{field}: {exc} for SGLang {version}{got}") from None


def check_references(spec: StudySpec) -> None:
    """Each ``search.references`` point: knobs of the study's space, each value one the knob takes
    (as ``plan --set`` reads it; a choice of a searched flag or variable). Checked here, not when the
    point is enqueued after the baseline (or compared at the end of the search). A flag the release's
    parser refuses is judged as the space's own values are: pruned as invalid_args at its turn.
    Each point is one launch beside the baseline's, so there are at most
    :data:`~autotune.limits.MAX_REFERENCES`, they and the baseline fit ``n_trials``, and no two are
    the same point (as their values read)."""
    from autotune import space

    refs = spec.search.references
    if len(refs) > MAX_REFERENCES:
        raise ConfigError(f"search.references: {len(refs):,} points, more than {MAX_REFERENCES} "
                          f"(each is a launch of its own beside the baseline)")
    if 1 + len(refs) > spec.n_trials:
        raise ConfigError(f"search.references: {len(refs):,} points and the baseline are {1 + len(refs):,} launches, "
                          f"more than n_trials = {spec.n_trials:,} (each counts as one of its trials)")
    names = set(space.param_names(spec))
    seen: dict[frozenset[tuple[str, object]], str] = {}
    for ref, params in refs.items():
        field = f"search.references.{clip(ref, 40)}"
        point: dict[str, object] = {}
        if not params:
            raise ConfigError(f"{field}: names no knob (give the knobs it launched with, e.g. mem_fraction_static)")
        for key, value in params.items():
            if key not in names:
                raise ConfigError(f"{field}.{clip(str(key), 60)}: not a knob of this study's search space "
                                  f"(its knobs: {', '.join(sorted(names)) or 'none'})")
            if isinstance(value, (dict, list)) or value is None:
                raise ConfigError(f"{field}.{key}: must be one value (got {shown(value)})")
            text = str(value).lower() if isinstance(value, bool) else str(value)
            try:
                typed = space.parse_overrides(spec, [f"{key}={text}"])[key]
            except ConfigError as exc:
                raise ConfigError(f"{field}.{key}: {str(exc).removeprefix('--set: ')}") from None
            _check_in_domain(spec, field, key, typed)
            point[key] = typed
        key_ = frozenset(point.items())
        if key_ in seen:
            raise ConfigError(f"{field}: the same point as search.references.{clip(seen[key_], 40)} "
                              f"({shown(point)}): each reference is a launch, give the point once")
        seen[key_] = ref


def _check_in_domain(spec: StudySpec, field: str, key: str, value: object) -> None:
    """A categorical knob's reference value must be one of its choices: optuna cannot hold a fixed
    categorical value outside them (a float range may lie outside: it is recorded as given)."""
    from autotune.spec import BoolChoices, IntChoices, StrChoices

    dom = getattr(spec.search_space, key, None)
    if isinstance(dom, (IntChoices, BoolChoices, StrChoices)) and value not in dom.choices:
        raise ConfigError(f"{field}.{key}: {shown(value)} is not one of its choices "
                          f"({shown(list(dom.choices), 120)[1:-1]})")
