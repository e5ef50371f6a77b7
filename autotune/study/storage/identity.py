"""One study, one study file: a resume must measure what the study measured.

A study is found by its name in its storage, so two study files that share a ``name`` (and a
storage) open the same study: the second file used to report the first one's trials as its own,
and its next trials crashed on optuna's distributions of the other space. The study keeps the
spec it was created from (``attrs.SPEC``, written with its first trial); a run compares it with
the spec it runs, before anything is asked, launched or written, and refuses a difference in
what defines the study's measurements (:data:`DEFINING`) with one line naming the first field
that differs. What only spends or places the budget stays changeable on resume.
"""

from __future__ import annotations

from typing import Any

import optuna

from autotune.errors import ConfigError
from autotune.limits import shown
from autotune.redact import redact_text, redact_url, redact_value
from autotune.spec import StudySpec
from autotune.study import attrs

#: The fields of the study file that define what a trial measures, compared on resume:
#:
#: * ``search_space`` (after pruning, as the study stores it): optuna's distributions and what a
#:   trial may launch;
#: * ``workload`` and ``workloads``: the load a value is measured under;
#: * ``objective``: what the value is (metric, direction, SLO);
#: * ``server.backend``, ``.device``, ``.sglang_version``, ``.model_path``, ``.tp_size``,
#:   ``.dp_size``, ``.extra_args``, ``.env`` (secrets compared as stored: redacted) and
#:   ``.sim.seed``: what is launched besides the searched knobs;
#: * ``hardware``: the node the numbers are measured on.
#:
#: Everything else may change on resume: ``n_trials``, ``budget``, ``sampler``, ``search``
#: (confirmation, stages, references, early stopping), ``executor``, ``calibration``,
#: ``warm_start``, ``run_dir``, ``server.startup_timeout_s``, ``.host``, ``.expose``, ``.python``,
#: ``.sim.time_scale`` and ``.sim.faults``. A warm start reads other studies and is not compared.
DEFINING: tuple[tuple[str, ...], ...] = (
    ("search_space",),
    ("workload",),
    ("workloads",),
    ("objective",),
    ("server", "backend"),
    ("server", "device"),
    ("server", "sglang_version"),
    ("server", "model_path"),
    ("server", "tp_size"),
    ("server", "dp_size"),
    ("server", "extra_args"),
    ("server", "env"),
    ("server", "sim", "seed"),
    ("hardware",),
)

_MISSING = object()
#: Mappings keyed by the user's names (flags, variables): a name on one side only is a difference.
_OPEN = ("flags", "env")


def stored_form(spec: StudySpec) -> dict[str, Any]:
    """``spec`` as the study stores it (``attrs.SPEC``): JSON, secrets of server.env / extra_args hidden."""
    out: dict[str, Any] = redact_value(spec.model_dump(mode="json", exclude={"source_path"}))
    return out


def check_same_study(spec: StudySpec, storage: optuna.storages.BaseStorage, *, pruned: bool = True) -> None:
    """ConfigError (one line) when the study ``spec`` names in ``storage`` was created from a spec that
    differs from ``spec`` in a :data:`DEFINING` field; read only, before the study is even opened. A
    study that does not exist, or holds no stored spec (nothing run yet), passes. A field the stored
    spec lacks (written by an autotune whose study file had no such field) is not compared.

    The study stores its space after pruning (knobs and values that cannot matter on its node left
    it). ``pruned=False``: ``spec`` is the study file as read (a command that shows results, which
    does not prune): its space may hold more than the stored one, a knob or a choice more, never
    less or another range."""
    try:
        study_id = storage.get_study_id_from_name(spec.name)
    except KeyError:
        return
    stored = storage.get_study_user_attrs(study_id).get(attrs.SPEC)
    if not isinstance(stored, dict):
        return
    current = stored_form(spec)
    for path in DEFINING:
        hit = _first_difference(_get(stored, path), _get(current, path), list(path),
                                wider=not pruned and path == ("search_space",))
        if hit is not None:
            where, was, now = hit
            # the name and the values are the user's text: a token pasted there is hidden
            raise ConfigError(redact_text(
                f"study {spec.name!r} in {redact_url(spec.storage_url)} was created from another study file: "
                f"its {where} differs (stored {_text(was)}, this file {_text(now)}); give this study another name"))


def _get(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return _MISSING
        data = data[key]
    return data


def _first_difference(was: Any, now: Any, path: list[str], wider: bool = False) -> tuple[str, Any, Any] | None:
    """(dotted field, stored value, current value) of the first difference, or None. ``wider``: the
    current value may hold more than the stored one (a knob or a choice pruning took out)."""
    if was is _MISSING or now is _MISSING:
        return None
    if wider and was is None:
        return None
    if wider and path[-1] == "choices" and isinstance(was, list) and isinstance(now, list):
        if all(any(_same(w, n) for n in now) for w in was):
            return None
    if isinstance(was, dict) and isinstance(now, dict):
        for key in [*was, *(k for k in now if k not in was)]:
            if key in was and key in now:
                hit = _first_difference(was[key], now[key], [*path, str(key)], wider)
            elif wider and key in now:
                hit = None
            elif path[-1] in _OPEN:
                hit = (".".join([*path, str(key)]), was.get(key), now.get(key))
            else:  # a field of one autotune's study file only
                hit = None
            if hit is not None:
                return hit
        return None
    if _same(was, now):
        return None
    if path[-1] == "choices" and len(path) > 1:  # search_space.X differs, shown as its choices
        path = path[:-1]
    return ".".join(path), was, now


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
    return bool(a == b)


def _text(value: Any) -> str:
    return "not set" if value is None else shown(value, 120)
