"""One row per trial as a pandas DataFrame, written to CSV or Parquet.

Why: people compare trials in a spreadsheet or a notebook; this is every fact a
finished trial carries, flattened, with stable column names (also documented in
dashboards/README.md).

Columns, in order:

* fixed (every study): ``number``, ``state`` (optuna: COMPLETE / PRUNED / FAIL),
  ``outcome`` (``complete`` or the failure kind), ``failure_kind``, ``reason``,
  ``baseline`` (True for SGLang's defaults), ``value`` (the objective; COMPLETE
  only), ``best_point`` (the load point the value came from);
  the memory prediction ``pred_verdict``, ``pred_reason``, ``pred_kv_tokens``,
  ``pred_kv_gib``, ``pred_p_gib``, ``pred_a_gib``, ``pred_f``, ``pred_slack_gib``,
  ``pred_min_viable_mem_fraction``, ``pred_cuda_graph_max_bs``, ``pred_uncertain``;
  the observation from the server log ``obs_p_gib``, ``obs_a_gib``,
  ``obs_kv_tokens``, ``obs_graph_gib``, ``obs_max_running_requests``;
  ``kv_tokens_error_pct`` ((predicted - observed) / observed x 100),
  ``gpu_seconds`` (modelled GPU time held), ``duration_s`` (wall time of the
  trial), ``startup_s``, ``load_s``, ``teardown_s`` (where that time went),
  ``datetime_start``, ``datetime_complete``, ``note``, ``shell`` (the
  launch command as run);
* ``param_<name>`` for each search-space parameter (empty where a conditional
  parameter does not apply);
* ``<point>_<metric>`` for each load point and each scalar bench_serving key,
  e.g. ``c256_output_throughput``, ``c256_p99_ttft_ms``, ``c64_mean_itl_ms``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import BinaryIO

import pandas as pd

from autotune.errors import ConfigError
from autotune.results import trials as _trials
from autotune.results.output import check_output_path, write_atomic
from autotune.spec import StudySpec
from autotune.study.storage.opening import open_study

log = logging.getLogger(__name__)

FORMATS = (".csv", ".parquet")


def trials_frame(spec: StudySpec) -> pd.DataFrame:
    """Every trial of the study (finished or not) as one row, columns as documented above."""
    study = open_study(spec, create=False, same_file=True)
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    data = _trials.rows(trials)
    return pd.DataFrame(data, columns=_trials.columns(data))


def check_output(path: str | Path) -> str:
    """The output format from the file suffix; ConfigError for anything we cannot write."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ConfigError(f"-o/--output: unknown suffix {suffix or '(none)'!r} in {str(path)!r}; use .csv or .parquet")
    if suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigError(
                f"-o/--output: {str(path)!r} needs pyarrow for parquet (pip install 'autotune[parquet]'), or use .csv"
            ) from None
    return suffix


def export(spec: StudySpec, path: str | Path) -> pd.DataFrame:
    """Write the study's trials to ``path`` (.csv or .parquet) and return the frame written.
    The path is checked first (:func:`autotune.results.output.check_output_path`)."""
    suffix = check_output(path)
    out = check_output_path(spec, path)
    frame = trials_frame(spec)

    def write(f: BinaryIO) -> None:
        if suffix == ".csv":
            frame.to_csv(f, index=False, encoding="utf-8")
        else:
            frame.to_parquet(f, index=False)

    write_atomic(out, write)
    log.info("exported %d trials x %d columns to %s", len(frame), len(frame.columns), out)
    return frame
