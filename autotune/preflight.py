"""Every check of a study that needs no process, run before Ray, SGLang or the storage
is touched: ``autotune run`` fails on a bad study in a second, with one line (exit 2),
instead of after a Ray instance has started.

What the spec itself validates (fields, GPU catalogue, ``hardware: auto``) has already
run when the study loaded; this adds what needs the file system or the version tables:
the model and draft directories, the dataset file, the storage URL's form and driver,
and the flags of every searched value in the study's SGLang dialect (by autotune's own
tables and SGLang's argparse, as rebuilt for that version: no SGLang import).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

from autotune.errors import ConfigError
from autotune.redact import redact_url
from autotune.spec import StudySpec

# Storage URL dialects and the module each needs (sqlalchemy's defaults).
_DRIVERS = {
    "postgresql": "psycopg2", "postgresql+psycopg": "psycopg", "postgresql+psycopg2": "psycopg2",
    "postgresql+asyncpg": "asyncpg", "mysql": "MySQLdb", "mysql+pymysql": "pymysql",
    "mysql+mysqldb": "MySQLdb", "sqlite": "sqlite3",
}


def check_study(spec: StudySpec) -> None:
    """Raise ConfigError (one line, naming the field and the value) on the first problem."""
    check_models(spec)
    check_dataset(spec)
    check_storage_url(spec)
    check_flags(spec)
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
    from autotune.sglang.models import load_model_profile

    def load(field: str, raw: str) -> None:
        path = spec.resolve_path(raw)
        try:
            load_model_profile(str(path))
        except ConfigError as exc:
            raise ConfigError(f"{field}: {str(exc).removeprefix('model_path: ')} (got {raw!r})") from None

    load("server.model_path", spec.server.model_path)
    sp = spec.search_space.speculative
    if sp is not None and sp.draft_model_path and set(sp.algorithm.choices) - {"none", "NGRAM", "NEXTN"}:
        load("search_space.speculative.draft_model_path", sp.draft_model_path)


def check_dataset(spec: StudySpec) -> None:
    raw = spec.workload.dataset_path
    if raw is None:
        return
    from autotune.load.prompts import load_dataset

    path = Path(spec.resolve_path(raw) or raw)
    if not path.is_file():
        raise ConfigError(f"workload.dataset_path: no such file (got {raw!r})")
    try:
        load_dataset(path, spec.workload.backend)
    except ConfigError as exc:
        raise ConfigError(f"workload.{exc!s}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"workload.dataset_path: unreadable ({type(exc).__name__}) (got {raw!r})") from None


def check_storage_url(spec: StudySpec) -> None:
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
    from autotune.storage_check import check_writable

    check_writable(url)  # a database in memory, another application's file, a read-only file
    if parsed.drivername == "sqlite" and parsed.database:
        where = Path(parsed.database).parent
        while not where.exists() and where != where.parent:
            where = where.parent
        if not os.access(where, os.W_OK):
            raise ConfigError(f"storage: cannot create {parsed.database} ({where} is not writable)")


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
    study's dialect (a knob the version lacks, a value its parser refuses, bad extra_args)."""
    from autotune import space
    from autotune.sglang.flags import render_argv

    version = spec.server.sglang_version
    trials: list[tuple[str, dict[str, object]]] = [("server.extra_args", {})]
    sp = spec.search_space
    for name in ("mem_fraction_static", "cuda_graph_max_bs", "custom_allreduce", *space._SIMPLE_KNOBS):
        dom = getattr(sp, name, None)
        if dom is not None:
            trials += [(f"search_space.{name}", {name: v}) for v in space._values(dom)]
    for field, params in trials:
        try:
            render_argv(space.to_config(spec, params, baseline=not params), version)
        except ConfigError as exc:
            value = next(iter(params.values()), None)
            got = f" (got {value!r})" if params else ""
            raise ConfigError(f"{field}: {exc} for SGLang {version}{got}") from None
