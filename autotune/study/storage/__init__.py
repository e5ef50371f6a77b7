"""The study's optuna storage: opening it, reading it fast, riding out restarts, one writer at a time.

- ``opening``: ``open_storage`` / ``open_study`` (the redacting ``StudyStorage``; read-only for
  commands that only read), the artifact store, trial directories. It opens; the sampler and the
  pruner are the search's (the driver builds them), so a reader or ``calibrate`` never enumerates the grid.
- ``read``: a study's trials read with six plain SELECTs instead of optuna's ORM.
- ``retry``: an RDB storage that rides out a database restart (``StorageUnavailable`` past its deadline).
- ``lock``: one driver per study: a lock file beside SQLite, an advisory lock on PostgreSQL.
- ``identity``: the study file must be the one that created the study (same name, another file: refused).

What ``storage`` points at is checked before optuna is handed it by :mod:`autotune.storage_check`
(below the study: preflight runs it first).
"""
