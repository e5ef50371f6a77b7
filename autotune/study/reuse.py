"""Reusing a measured launch: a search trial whose resolved launch argv the study already
measured is answered from the stored result instead of launching the same server again
(repeats happen only in the confirmation phase)."""

from __future__ import annotations

import shlex
import warnings

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.redact import REDACTED, redact_argv
from autotune.sglang.config import ServerConfig
from autotune.sglang.flags import render_argv, shell_line
from autotune.study import attrs
from autotune.study.record import FLAT_METRICS

#: What a trial that reuses another's result copies from it.
REUSED_ATTRS = (attrs.COMMAND, attrs.SHELL, attrs.OBSERVED, attrs.TIMINGS, attrs.METRICS, attrs.BEST_POINT,
                attrs.SLO_VIOLATION, attrs.SLO_MET, attrs.FAILURE_KIND, attrs.EVIDENCE, attrs.REASON, attrs.NOTE,
                attrs.KV_TOKENS_ERROR_PCT, *FLAT_METRICS)


def launch_key(cfg: ServerConfig, version: str) -> str:
    """The resolved launch argv of ``cfg`` (port left out), its secrets hidden: two trials with
    the same key launch the same server. Secrets are fixed for a study (``server.extra_args``),
    so hiding them joins no two launches that differ in a knob."""
    argv = render_argv(cfg.with_port(0), version, python="python", module="sglang.launch_server")
    return shell_line(redact_argv(argv))


def _as_stored(key: str) -> str:
    """A stored launch key as this version writes it: a study recorded before keys were
    redacted holds the clear argv; hidden the same way it matches the keys of its resumed run."""
    try:
        return shell_line(redact_argv(shlex.split(key)))
    except ValueError:  # not a shell line: compared as it is
        return key


def stored_result(study: optuna.Study, key: str) -> FrozenTrial | None:
    """A finished, measured trial of the launch ``key`` (not one that was interrupted)."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)):
        stored = t.user_attrs.get(attrs.LAUNCH_KEY)
        if stored is not None and (stored == key or (REDACTED in key and REDACTED not in stored
                                                     and _as_stored(stored) == key)) \
                and not t.user_attrs.get(attrs.RETRIED) and t.user_attrs.get(attrs.COMMAND):
            return t
    return None


def copy_result(trial: optuna.Trial, source: FrozenTrial) -> None:
    """What ``source`` measured, onto ``trial`` (before tell): its attributes and constraints;
    no GPU time spent."""
    for key in REUSED_ATTRS:
        if key in source.user_attrs:
            trial.set_user_attr(key, source.user_attrs[key])
    trial.set_user_attr(attrs.REUSED_FROM, source.number)
    trial.set_user_attr(attrs.GPU_SECONDS, 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, value in (source.constraints or {}).items():
            trial.set_constraint(name, value)
