"""The memory verdict for candidates, without launching anything (``autotune plan``)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autotune import space
from autotune.errors import ConfigError
from autotune.limits import GRID_CANDIDATES
from autotune.redact import redact_argv
from autotune.sglang.flags.argv import render_argv
from autotune.spec import StudySpec
from autotune.storage_check import NoStudy
from autotune.study import attrs
from autotune.study.prediction import Predictor
from autotune.study.storage.opening import open_study

ROW_KEYS = ("verdict", "reason", "kv_tokens", "kv_gib", "p_gib", "a_gib", "slack_gib", "min_viable_mem_fraction",
            "server_kv_tokens", "kv_tokens_low", "kv_tokens_high", "kv_range")


def stored_calibration(spec: StudySpec) -> dict[str, Any] | None:
    """The study file's calibration, else what an earlier run or ``calibrate`` stored."""
    if spec.calibration is not None:
        return {**spec.calibration.model_dump(exclude_none=True), "source": "study file"}
    try:
        return open_study(spec, create=False).user_attrs.get(attrs.CALIBRATION)
    except NoStudy:  # nothing run yet; a storage of another application or a damaged one is refused
        return None


def _read_once(spec: StudySpec, carried: Callable[[], dict[str, Any] | None]) -> Callable[[], dict[str, Any] | None]:
    """The calibration a plan predicts with: the stored one (else ``carried()``), read at its first use and
    kept, since nothing stores another while ``plan`` runs. Each read opens the study's storage (~50 ms:
    SQLAlchemy's schema check), and the predictor asks for every candidate: a finished study of 184
    candidates took 10 s to plan, for one value."""
    kept: list[dict[str, Any] | None] = []

    def calibration() -> dict[str, Any] | None:
        if not kept:
            kept.append(stored_calibration(spec) or carried())
        return kept[0]

    return calibration


def candidates_from_sets(spec: StudySpec, items: list[str]) -> list[dict[str, Any]]:
    """``--set KNOB=V1[,V2...]``: the cross product of the listed values, other knobs at SGLang's defaults
    (counted first: more than :data:`~autotune.limits.GRID_CANDIDATES` is refused before one is made)."""
    n = math.prod(len(item.partition("=")[2].split(",")) for item in items)
    if n > GRID_CANDIDATES:
        sizes = " x ".join(str(len(item.partition("=")[2].split(","))) for item in items)
        raise ConfigError(f"--set: {sizes} = {n:,} candidates, more than the {GRID_CANDIDATES:,} autotune lists")
    axes: list[list[tuple[str, Any]]] = []
    for item in items:
        key, _, raw = item.partition("=")
        values = [space.parse_overrides(spec, [f"{key}={v}"]) for v in raw.split(",")] if raw else \
            [space.parse_overrides(spec, [item])]
        axes.append([next(iter(v.items())) for v in values])
    return [dict(combo) for combo in itertools.product(*axes)]


def plan_space(spec: StudySpec) -> dict[str, Any]:
    """The knobs removed from the space before the study starts (each with its reason) and what remains."""
    from autotune.space_prune import space_summary
    from autotune.study.candidates import without_dead_knobs

    pruned, removed = without_dead_knobs(spec, Predictor(spec, lambda: None))
    return {"removed": [{"name": r.name, "value": r.value, "reason": r.reason, "line": r.line()} for r in removed],
            "space": space_summary(pruned)}


@dataclass(frozen=True)
class WarmPlan:
    """What the studies of ``warm_start:`` carry into this one: one line per decision with its reason
    (as the run prints them), the same per earlier study as data, and the calibration carried."""

    lines: list[str] = field(default_factory=list)
    studies: list[dict[str, Any]] = field(default_factory=list)  # warm_start.Source.to_dict() each
    calibration: dict[str, Any] | None = None  # None: none carried

    def to_dict(self) -> dict[str, Any]:
        return {"studies": self.studies, "calibration": self.calibration}


def warm_start(spec: StudySpec) -> WarmPlan:
    """What the studies of ``warm_start:`` carry into this one (empty without any)."""
    import optuna

    from autotune.study.candidates import Candidates
    from autotune.study.warm_start import WarmStart

    warm = WarmStart.load(spec)
    if not warm:
        return WarmPlan()
    scratch = optuna.create_study(storage=optuna.storages.InMemoryStorage())  # the space, widened, without storage
    cands = Candidates(spec, scratch, Predictor(spec, _read_once(spec, warm.calibration)))
    warm.decide(cands.widened_spec(), cands.outside)
    return WarmPlan(warm.lines(), [src.to_dict() for src in warm.sources], warm.calibration())


def plan_rows(spec: StudySpec, sets: list[str] | None = None, warm: WarmPlan | None = None) -> list[dict[str, Any]]:
    """The memory verdict of every candidate (or of the ``--set`` ones), as the driver predicts it
    (``warm``: :func:`warm_start`'s answer, when the caller has it)."""
    from autotune.study.candidates import vet, without_dead_knobs

    if warm is None:
        warm = warm_start(spec) if spec.warm_start else WarmPlan()
    warm_cal = warm.calibration
    predictor = Predictor(spec, _read_once(spec, lambda: warm_cal))  # the driver's own prediction path
    spec, _ = without_dead_knobs(spec, predictor)  # plan_space says what left and why
    cands = candidates_from_sets(spec, sets) if sets else list(space.iter_grid(spec))
    rows = []
    for params in cands:
        cfg, notes, invalid = vet(space.to_config(spec, params), spec, predictor)
        p = predictor.predict(cfg).to_dict() if invalid is None else {"verdict": "invalid_args", "reason": invalid}
        row = dict(params)
        for key in ROW_KEYS:
            row[key] = p.get(key)
        row["uncertain"] = p.get("uncertain")
        if notes:
            row["notes"] = notes
        row["command"] = redact_argv(render_argv(cfg, spec.server.sglang_version, python="python3",
                                                 module="sglang.launch_server", check=False))  # as shown
        rows.append(row)
    return rows



def plan_document(warm: WarmPlan, space_plan: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Everything ``autotune plan`` prints, as data (``--json``): ``warm_start`` (``studies``: per earlier
    study of ``warm_start:``, its ``differences`` and ``decisions``, each ``{what, carried, reason}``;
    ``calibration``: the one carried, or null), ``removed`` (knobs that left the space, each with its
    reason), ``space`` (what remains, one line per knob) and ``candidates`` (one row each)."""
    return {"warm_start": warm.to_dict(), "removed": space_plan["removed"], "space": space_plan["space"],
            "candidates": rows}
