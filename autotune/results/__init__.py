"""What a study holds, read for people: never imported by the study layer (docs/ARCHITECTURE.md).

- ``summary``: status, the best trial and its launch command, as plain dicts (``status`` / ``best --json``).
- ``choice``: why ``best`` picked its winner: what its value rests on, the ties within the noise.
- ``estimate``: the noise-aware estimate (lives in ``autotune.study.search.estimate``; re-exported here).
- ``trials``: finished trials as flat rows, the one reading export, report and dashboard share.
- ``export``: one row per trial to CSV or Parquet.
- ``report``: one self-contained HTML report; ``report_plots``: its plotly figures.
- ``output``: the ``-o`` of both checked first (never the study's own files) and written atomically.
- ``pareto``: the throughput-latency trade-off (which points no other beats on both).
- ``dashboard``: optuna-dashboard over a read-only view with notes and artifacts.
- ``progress``: a sweep's progress for the person watching (rich live view or plain lines).
"""
