"""The study's optuna storage: opening it, checking what it points at, reading it fast, riding out restarts.

- ``opening``: ``open_storage`` / ``open_study`` (the redacting ``StudyStorage``; read-only for
  commands that only read), the artifact store, trial directories. It opens; the sampler and the
  pruner are the search's (the driver builds them), so a reader or ``calibrate`` never enumerates the grid.
- ``check``: what ``storage`` points at, checked before optuna is handed it (no table created by a reader).
- ``read``: a study's trials read with six plain SELECTs instead of optuna's ORM.
- ``retry``: an RDB storage that rides out a database restart (``StorageUnavailable`` past its deadline).
- ``lock``: one driver per study: the lock file of the study's only writer.
"""
