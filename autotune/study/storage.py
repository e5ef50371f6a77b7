"""Opening the study's optuna storage, its sampler and its artifact store."""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.artifacts import FileSystemArtifactStore

from autotune.errors import ConfigError
from autotune.spec import StudySpec
from autotune.study.pruner import ClearlyWorsePruner
from autotune.study.samplers import GridSampler, choose_sampler
from autotune.study.storage_retry import (
    RetryingRDBStorage,
    StorageUnavailable,
    engine_kwargs,
)

log = logging.getLogger(__name__)


def make_sampler(spec: StudySpec, *, say: bool = False) -> optuna.samplers.BaseSampler:
    """The study's sampler. Samplers are not persisted by optuna: build it again on resume.
    ``say``: log the choice of ``sampler.kind: auto`` and why (once per run: the study it runs,
    not an earlier study of ``warm_start:`` or a results command that only reads one)."""
    s = spec.sampler
    if s.kind == "auto":
        sampler, why = choose_sampler(spec)
        if say:
            log.info("sampler: %s", why)
        return sampler
    if s.kind == "tpe":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return optuna.samplers.TPESampler(
                seed=s.seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=s.n_startup_trials
            )
    if s.kind == "random":
        return optuna.samplers.RandomSampler(seed=s.seed)
    if s.kind == "grid":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return GridSampler(seed=s.seed)
    if s.kind == "gp":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise ConfigError("sampler.kind: 'gp' needs torch installed (pip install torch)") from None
        return optuna.samplers.GPSampler(seed=s.seed)
    raise ConfigError(f"sampler.kind: unknown {s.kind!r}")  # pragma: no cover - pydantic guards it


def _engine_url(url: str) -> str:
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    return url


#: How the schema-creation race reads: SQLite's alembic_version row; PostgreSQL's enum type
#: (pg_type_typname_nsp_index), alembic_version key or a table created by the other process.
_SCHEMA_RACE = ("UNIQUE constraint failed: alembic_version", "pg_type_typname_nsp_index",
                "alembic_version_pkc", "DuplicateTable", "already exists")


def _schema_race(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(marker in text for marker in _SCHEMA_RACE)


def open_storage(spec: StudySpec) -> optuna.storages.RDBStorage:
    """The study's storage (SQLite by default; any SQLAlchemy URL)."""
    url = _engine_url(spec.storage_url)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for attempt in range(5):
        try:
            return RetryingRDBStorage(url, engine_kwargs=engine_kwargs(url))
        except StorageUnavailable:
            raise
        except Exception as exc:  # sqlalchemy raises many kinds for a bad URL
            # Two processes opening a new database at once race on creating optuna's schema;
            # the loser just opens what the winner created.
            if _schema_race(exc) and attempt < 4:
                time.sleep(0.5)
                continue
            raise ConfigError(f"storage: cannot open {spec.storage_url!r}: {exc}".splitlines()[0]) from None
    raise ConfigError(f"storage: cannot open {spec.storage_url!r}")  # pragma: no cover - the loop returns or raises


def open_study(spec: StudySpec, *, create: bool = True,
               storage: optuna.storages.RDBStorage | None = None, say_sampler: bool = False) -> optuna.Study:
    """Create or load the study. ``create=False`` raises ConfigError when it does not exist.
    ``say_sampler``: log the sampler chosen (the driver, for the study it runs)."""
    if not create and spec.storage_url.startswith("sqlite:///") and \
            not Path(spec.storage_url.removeprefix("sqlite:///")).exists():
        raise ConfigError(f"name: no study {spec.name!r} in {spec.storage_url} (run `autotune run` first)")
    storage = storage if storage is not None else open_storage(spec)
    if not create:
        try:
            return optuna.load_study(study_name=spec.name, storage=storage, sampler=make_sampler(spec))
        except KeyError:
            raise ConfigError(f"name: no study {spec.name!r} in {spec.storage_url} "
                              "(run `autotune run` first)") from None
    return optuna.create_study(
        study_name=spec.name,
        storage=storage,
        sampler=make_sampler(spec, say=say_sampler),
        pruner=_pruner(spec),
        direction="maximize" if spec.objective.resolved_direction == "maximize" else "minimize",
        load_if_exists=True,
    )


def _pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    es = spec.search.early_stopping
    if not es.enabled:
        return optuna.pruners.NopPruner()
    return ClearlyWorsePruner(margin=es.margin, n_startup_trials=es.n_startup_trials,
                              n_warmup_steps=es.n_warmup_steps)


def artifact_store(spec: StudySpec) -> FileSystemArtifactStore:
    path = spec.run_path / "artifacts"
    path.mkdir(parents=True, exist_ok=True)
    return FileSystemArtifactStore(base_path=str(path))


def trial_dir(spec: StudySpec, number: int) -> Path:
    return spec.run_path / "trials" / f"{number:05d}"


def study_attr(study: optuna.Study, key: str, default: Any = None) -> Any:
    return study.user_attrs.get(key, default)
