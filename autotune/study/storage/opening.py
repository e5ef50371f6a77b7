"""Opening the study's optuna storage and its artifact store.

Only opening: the sampler and the pruner are the search's, built by the driver
(:mod:`autotune.study.search`), so storing a calibration from a log or reading a study never
builds a sampler (``sampler.kind: auto`` enumerates the grid to choose one)."""

from __future__ import annotations

import copy
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
from optuna.artifacts import FileSystemArtifactStore, upload_artifact

from autotune.errors import ConfigError
from autotune.redact import redact_text, redact_url, redact_value
from autotune.spec import StudySpec
from autotune.storage_check import check_readable, check_writable, no_study
from autotune.study.storage.retry import (
    RetryingRDBStorage,
    StorageUnavailable,
    engine_kwargs,
)

log = logging.getLogger(__name__)


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


class StudyStorage(RetryingRDBStorage):
    """The study's storage: every user attribute passes through the one redaction rule
    (:mod:`autotune.redact`) on its way to the database, so a secret of the launch (an
    ``--api-key`` in ``extra_args``, a token in ``server.env``, a token-shaped value in a log
    line) is never written to the study, whichever writer handed it over."""

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        super().set_trial_user_attr(trial_id, key, redact_value(value))

    def set_study_user_attr(self, study_id: int, key: str, value: Any) -> None:
        super().set_study_user_attr(study_id, key, redact_value(value))

    def _create_new_trial(self, study_id: int,
                          template_trial: optuna.trial.FrozenTrial | None = None) -> optuna.trial.FrozenTrial:
        if template_trial is not None and template_trial.user_attrs:
            template_trial = copy.copy(template_trial)
            template_trial.user_attrs = redact_value(dict(template_trial.user_attrs))
        return super()._create_new_trial(study_id, template_trial)


def open_storage(spec: StudySpec, *, read_only: bool = False) -> optuna.storages.RDBStorage:
    """The study's storage (SQLite by default; any SQLAlchemy URL). ``read_only``: for a command
    that only reads (``status``, ``best``, ``export``, ``report``, ``plan``): an existing SQLite
    file of optuna's, opened read-only, and no table created in any database
    (:mod:`autotune.storage_check`)."""
    shown = redact_url(spec.storage_url)
    if read_only:
        url = check_readable(spec.name, spec.storage_url, spec.storage)
    else:
        check_writable(spec.storage_url, spec.storage)
        url = _engine_url(spec.storage_url)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for attempt in range(5):
        try:
            return StudyStorage(url, engine_kwargs=engine_kwargs(url), skip_table_creation=read_only, where=shown)
        except (StorageUnavailable, ConfigError):
            raise
        except Exception as exc:  # sqlalchemy raises many kinds for a bad URL
            # Two processes opening a new database at once race on creating optuna's schema;
            # the loser just opens what the winner created.
            if _schema_race(exc) and attempt < 4 and not read_only:
                time.sleep(0.5)
                continue
            if read_only and _no_tables(exc):  # a server database without optuna's schema
                raise no_study(spec.name, spec.storage_url) from None
            first = (redact_url(str(exc)).splitlines() or [type(exc).__name__])[0]
            raise ConfigError(f"storage: cannot open {shown!r}: {first}") from None
    raise ConfigError(f"storage: cannot open {shown!r}")  # pragma: no cover - the loop returns or raises


def _no_tables(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps: optuna's StorageInternalError) says optuna's tables are missing."""
    cur: BaseException | None = exc
    for _ in range(8):
        if cur is None:
            return False
        text = str(cur)
        if "no such table" in text or "does not exist" in text or "doesn't exist" in text:
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def open_study(spec: StudySpec, *, create: bool = True, storage: optuna.storages.RDBStorage | None = None,
               sampler: optuna.samplers.BaseSampler | None = None,
               pruner: optuna.pruners.BasePruner | None = None, same_file: bool = False) -> optuna.Study:
    """Create or load the study. ``create=False`` (every command that only reads) opens the
    storage read-only and raises ConfigError when the study does not exist.

    ``sampler`` / ``pruner``: the search's, for the driver (optuna persists neither: it builds
    them again on resume). Without them the study is opened to read or to store an attribute,
    never to ask: it gets optuna's plain random sampler and no pruner, and nothing of the
    study's search space is enumerated.

    ``same_file`` (the commands that show a study's results from its study file): ConfigError when
    the study was created from another study file with the same name (study.storage.identity)."""
    storage = storage if storage is not None else open_storage(spec, read_only=not create)
    sampler = sampler if sampler is not None else optuna.samplers.RandomSampler()
    if same_file:
        from autotune.study.storage.identity import check_same_study  # identity imports the study layer

        check_same_study(spec, storage, pruned=False)
    if not create:
        try:
            return optuna.load_study(study_name=spec.name, storage=storage, sampler=sampler)
        except KeyError:
            raise no_study(spec.name, spec.storage_url) from None
    return optuna.create_study(
        study_name=spec.name,
        storage=storage,
        sampler=sampler,
        pruner=pruner if pruner is not None else optuna.pruners.NopPruner(),
        direction="maximize" if spec.objective.resolved_direction == "maximize" else "minimize",
        load_if_exists=True,
    )


def artifact_store(spec: StudySpec) -> FileSystemArtifactStore:
    path = spec.run_path / "artifacts"
    path.mkdir(parents=True, exist_ok=True)
    return FileSystemArtifactStore(base_path=str(path))


#: Artifacts uploaded through the redaction rule: the server's log (SGLang logs its ServerArgs,
#: ``api_key='...'`` included, at startup), the launch files, the load summaries. The per-request
#: records (``*.jsonl``: numbers the load generator measured, often the largest files) go as they are.
_REDACTED_ARTIFACTS = (".log", ".sh", ".json", ".txt", ".out", ".err")


def store_artifact(store: FileSystemArtifactStore, trial: optuna.Trial, path: str,
                   mimetype: str | None = None) -> None:
    """Upload the file ``path`` as an artifact of ``trial`` (what the dashboard serves), a text
    file with every secret hidden (:func:`autotune.redact.redact_text`, line by line); the
    trial directory keeps the server's own file."""
    if not path.endswith(_REDACTED_ARTIFACTS):
        upload_artifact(artifact_store=store, file_path=path, study_or_trial=trial, mimetype=mimetype)
        return
    with tempfile.TemporaryDirectory(prefix="autotune-artifact-") as tmp:
        copy_path = Path(tmp) / Path(path).name
        with open(path, encoding="utf-8", errors="replace") as src, open(copy_path, "w", encoding="utf-8") as dst:
            for line in src:
                dst.write(redact_text(line))
        upload_artifact(artifact_store=store, file_path=str(copy_path), study_or_trial=trial, mimetype=mimetype)


def trial_dir(spec: StudySpec, number: int) -> Path:
    return spec.run_path / "trials" / f"{number:05d}"


def study_attr(study: optuna.Study, key: str, default: Any = None) -> Any:
    return study.user_attrs.get(key, default)
