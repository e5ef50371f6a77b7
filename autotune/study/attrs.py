"""The keys of what a finished optuna trial (and the study) carries: written by the study layer,
read by :mod:`autotune.results`. One place, so a writer and a reader cannot drift apart
(docs/ARCHITECTURE.md lists what each holds)."""

from __future__ import annotations

from typing import Any

# ---- trial user_attrs --------------------------------------------------------------------
BASELINE = "baseline"  # True on the run of SGLang's defaults
RESOLVED = "resolved"  # the baseline's resolved automatic values
REFERENCE = "reference"  # the name of a search.references launch point (run right after the baseline)
FAILURE_KIND = "failure_kind"  # FailureKind value, when not COMPLETE
EVIDENCE = "evidence"
REASON = "reason"  # one line with the numbers
NOTE = "note"  # short human note
NOTES = "notes"  # adjustments SGLang would make, applied up front
PREDICTION = "prediction"  # Prediction.to_dict()
OBSERVED = "observed"  # the startup log's summary
METRICS = "metrics"  # {point: {bench_serving keys}}
BEST_POINT = "best_point"
COMMAND = "command"  # argv list
SHELL = "shell"  # copy-pasteable line
TIMINGS = "timings"
GPU_SECONDS = "gpu_seconds"
TRIAL_DIR = "trial_dir"
KV_TOKENS_ERROR_PCT = "kv_tokens_error_pct"
SLO_VIOLATION = "slo_violation"
SLO_MET = "slo_met"
MIX = "mix"  # a workload mix: {name: {weight, point, value, violation}}
STAGE = "stage"  # 1: base knobs, 2: speculative
STAGE_BASE = "stage_base"
CONFIRM_OF = "confirm_of"  # N on confirmation re-runs of trial N (outside the budget)
RACE = "race"  # True on a confirmation re-run of a new leader during the search (search.repeats >= 2)
RETRY_OF = "retry_of"  # N on re-runs of interrupted trial N (outside the budget)
RETRIED = "retried"  # True on a trial that was re-run
AFTER_DEATH = "after_death"  # a re-run after the first death of its Ray worker
REUSED_FROM = "reused_from"  # N when the result of trial N (same launch argv) was reused
WARM_FROM = "warm_from"  # "<study> trial N": a configuration carried from an earlier study (warm start)
DROPPED = "dropped"  # the line that dropped the configuration queued in this trial's slot (not in the space)
LAUNCH_KEY = "launch_key"  # the resolved launch argv (port left out), to find a launch already measured

# ---- study user_attrs --------------------------------------------------------------------
CALIBRATION = "calibration"
SPEC = "spec"
CONFIRMATION = "confirmation"
CONFIRMATION_STARTED = "confirmation_started"
WARM_START = "warm_start"  # the earlier studies this one started from, what each carried and why
BASELINE_RESOLVED = "baseline_resolved"  # SGLang's automatic values as predicted at the study's start


def as_launched(params: dict[str, Any], user_attrs: dict[str, Any]) -> dict[str, Any]:
    """A trial's params as its launch passed them: on the baseline, None for a knob SGLang chose
    where autotune could not predict the value (``RESOLVED`` says None: ``mem_fraction_static`` on
    CPU); optuna holds the sampler's stand-in there (a float distribution holds no None)."""
    resolved = (user_attrs.get(RESOLVED) or {}) if user_attrs.get(BASELINE) else {}
    return {k: None if k in resolved and resolved[k] is None else v for k, v in params.items()}
