"""Warm start: a study begins from what earlier studies (``warm_start:`` in the study file) learned.

Each earlier study is read (its storage is opened read-only in effect: nothing is written to it)
and compared with this one. What carries over, and only when it applies:

* **calibration** (P, A, graph memory): same node (GPU kind, count, interconnect) and same model
  (architecture, shape and weight size). A different TP or memory regime re-derives it through the
  memory model (:func:`autotune.sglang.memory.predictor.predict` rescales a calibration taken at another TP;
  the draft weights inside A follow the regime it was measured under). A launch of this study
  calibrates again and replaces it.
* **infeasible regions** (:mod:`autotune.study.infeasible`): same node, model, TP and memory regime;
  an out-of-memory under load only with the same workload (it depends on the requests).
* **top configurations** (by the noise-aware estimate, :mod:`autotune.study.search.estimate`): related
  studies (same GPU kind and interconnect, same architecture and shape), translated to this
  release's flags (a renamed flag follows its new name; one the release removed is dropped and
  reported), enqueued before the search (right after the baseline when it runs first). From a
  study with another workload, its best configuration **for each speculative algorithm** it
  measured (none included) instead: whether speculative decoding pays, and at what depth, turns
  on the batch and the request shape, so it is a choice a workload change can flip,
  and the top three of one study are mostly near-copies of one winner (the same algorithm).
* **sampler prior**: every earlier trial that still lies in this study's space joins the sampler's
  history (never this study's storage), its value rescaled by this study's best over the earlier
  one's; weighted by how alike the studies are: all of them from a study that differs only in
  release or TP, every other one (by rank) from one with another node size or checkpoint, none
  from one with another workload (its landscape moved: the prior anchored the sampler off target).

An unrelated study (another model, another GPU kind) carries nothing: the study runs cold.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune import space
from autotune.errors import ConfigError
from autotune.limits import shown
from autotune.node.study_file import load_study
from autotune.redact import redact_url
from autotune.sglang.flags.release_tables import table_for
from autotune.sglang.knobs.catalogue import exists_in, lookup
from autotune.sglang.models.profile import ModelProfile, load_model_profile
from autotune.sglang.versions import as_version
from autotune.spec import StudySpec
from autotune.study import attrs
from autotune.study.infeasible import LEARNED_KINDS, Failure
from autotune.study.storage.lock import same_storage

log = logging.getLogger(__name__)

#: Earlier configurations enqueued per earlier study.
TOP_K = 3
LINEAGE = attrs.WARM_START
WARM_FROM = attrs.WARM_FROM
#: Trial attribute on the sampler's prior trials (never stored in this study).
PRIOR = "warm_prior"

WHAT = ("calibration", "infeasible regions", "top configurations", "sampler prior")


@dataclass(frozen=True)
class Decision:
    what: str
    carried: bool
    reason: str

    def line(self, source: str) -> str:
        return f"warm start from {source}: {self.what}: {'carried' if self.carried else 'not carried'} ({self.reason})"

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "carried": self.carried, "reason": self.reason}


@dataclass(frozen=True)
class Relation:
    """How an earlier study's setting compares with this one's."""

    same_gpu: bool  # GPU kind and interconnect
    same_count: bool  # number of GPUs
    same_arch: bool  # architecture and shape (layers, hidden size, heads)
    same_weights: bool  # and the same weight size (the same checkpoint as far as memory goes)
    same_tp: bool
    same_regime: bool
    same_release: bool
    same_workload: bool
    same_objective: bool

    @property
    def same_node(self) -> bool:
        return self.same_gpu and self.same_count

    @property
    def same_model(self) -> bool:
        return self.same_arch and self.same_weights

    @property
    def related(self) -> bool:
        return self.same_gpu and self.same_arch and self.same_objective

    @property
    def weight(self) -> float:
        """How much of the earlier landscape the sampler's prior takes: 1 when only the release or
        TP differ, 1/2 when the node's size or the checkpoint differ too, 0 for another workload or
        an unrelated study."""
        if not self.related or not self.same_workload:
            return 0.0  # another workload moves the landscape: its trials anchored TPE off target
            # (benchmarks/warm_start.py, prompts 512 -> 2048, 2026-12-02: 0.936 x cold with a prior at 1/2,
            # 0.171 x without it)
        return 1.0 if self.same_node and self.same_model else 0.5


def _model_key(m: ModelProfile) -> tuple[Any, ...]:
    return (m.architecture, m.num_layers, m.hidden_size, m.num_attention_heads, m.num_kv_heads, m.is_mla)


def _workload_key(spec: StudySpec) -> str:
    return repr([(w.input_len, w.output_len, w.concurrency, w.request_rate, w.dataset_path, w.num_prompts)
                 for _, w in spec.named_workloads()])


def relation(new: StudySpec, old: StudySpec) -> Relation:
    mn = load_model_profile(new.resolve_path(new.server.model_path))
    mo = load_model_profile(old.resolve_path(old.server.model_path))
    hn, ho = new.hardware, old.hardware
    vn, vo = as_version(new.server.sglang_version), as_version(old.server.sglang_version)
    return Relation(
        same_gpu=(hn.gpu, hn.interconnect) == (ho.gpu, ho.interconnect), same_count=hn.num_gpus == ho.num_gpus,
        same_arch=_model_key(mn) == _model_key(mo), same_weights=mn.weight_bytes == mo.weight_bytes,
        same_tp=new.server.tp_size == old.server.tp_size, same_regime=vn.regime == vo.regime,
        same_release=vn == vo, same_workload=_workload_key(new) == _workload_key(old),
        same_objective=(new.objective.metric, new.objective.resolved_direction)
        == (old.objective.metric, old.objective.resolved_direction))


def _differences(r: Relation, new: StudySpec, old: StudySpec) -> str:
    hw_old, hw_new, sv_old, sv_new = old.hardware, new.hardware, old.server, new.server
    node = f"node {hw_old.gpu}/{hw_old.interconnect} -> {hw_new.gpu}/{hw_new.interconnect}" if not r.same_gpu \
        else (f"GPUs {hw_old.num_gpus} -> {hw_new.num_gpus}" if not r.same_count else "")
    model = "another model" if not r.same_arch else ("another checkpoint (weight size)" if not r.same_weights else "")
    out = [node, model,
           "" if r.same_tp else f"TP {sv_old.tp_size} -> {sv_new.tp_size}",
           "" if r.same_release else f"SGLang {sv_old.sglang_version} -> {sv_new.sglang_version}",
           "" if r.same_workload else "workload", "" if r.same_objective else "objective"]
    return ", ".join(x for x in out if x) or "same setting"


# ---- translating an earlier study's parameters ------------------------------------------------
def translate(params: dict[str, Any], old: StudySpec, new: StudySpec) -> tuple[dict[str, Any], list[str]]:
    """``params`` of the earlier study under this study's names: a flag renamed between the releases
    (one catalogue knob, two spellings) follows its new name; a flag or variable this release lacks
    is dropped. Returns the params and one note per rename or drop."""
    version = new.server.sglang_version
    new_named = list(new.search_space.flags) + list(new.search_space.env)
    out: dict[str, Any] = {}
    notes: list[str] = []
    for key, value in params.items():
        if not key.startswith("--") and key not in old.search_space.env:
            out[key] = value  # a typed knob, the layout or a speculative setting: one name everywhere
            continue
        knob = lookup(key)
        gone = (not exists_in(knob, version)) if knob is not None else \
            (key.startswith("--") and not table_for(version).has(key))
        if gone:
            notes.append(f"{key} dropped: SGLang {version} has no such {'flag' if key.startswith('--') else 'variable'}")
            continue
        renamed = next((n for n in new_named if n != key and knob is not None and lookup(n) is knob), None)
        if renamed is not None and key not in new_named:
            notes.append(f"{key} renamed {renamed} in SGLang {version}")
            key = renamed
        out[key] = value
    return out, notes


def _with_new_knobs(params: dict[str, Any], spec: StudySpec) -> dict[str, Any]:
    """``params`` with each flag or variable of ``spec``'s space that the earlier study did not search
    at SGLang's default (what the earlier launch ran with, e.g. a variable its release did not read)."""
    defaults = {k: v for k, v in space.named_defaults(spec).items() if k != "layout" and v is not None}
    return {**{k: v for k, v in defaults.items() if k not in params}, **params}


def _fixed(params: dict[str, Any], spec: StudySpec) -> tuple[dict[str, Any], dict[str, BaseDistribution]] | None:
    """The params and distributions optuna would record for ``params`` in ``spec``'s space, or None
    when a value lies outside it or a knob is missing."""
    ft = optuna.trial.FixedTrial(params)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            space.suggest(ft, spec)  # type: ignore[arg-type]  # FixedTrial has Trial's suggest API
        dists = ft.distributions
        for name, dist in dists.items():
            if not dist._contains(dist.to_internal_repr(ft.params[name])):
                return None
    except (ValueError, KeyError, TypeError):
        return None
    return dict(ft.params), dists


# ---- one earlier study ----------------------------------------------------------------------
@dataclass
class Source:
    """One earlier study and what it carries into this one."""

    path: str  # as the study file names it
    spec: StudySpec
    study: optuna.Study
    relation: Relation
    new: StudySpec  # this study
    decisions: list[Decision] = field(default_factory=list)
    calibration: dict[str, Any] | None = None
    failures: list[Failure] = field(default_factory=list)
    top: list[tuple[dict[str, Any], int]] = field(default_factory=list)  # (translated params, earlier trial)
    notes: list[str] = field(default_factory=list)  # renamed / dropped flags

    @property
    def name(self) -> str:
        return self.spec.name

    def to_dict(self) -> dict[str, Any]:
        """What :meth:`lines` says, as data (``autotune plan --json``; the study's lineage attribute)."""
        return {"study": self.name, "file": self.path, "sglang_version": self.spec.server.sglang_version,
                "differences": _differences(self.relation, self.new, self.spec),
                "carried": [d.what for d in self.decisions if d.carried],
                "decisions": [d.to_dict() for d in self.decisions], "notes": list(self.notes)}

    def lines(self) -> list[str]:
        out = [f"warm start from {self.name} ({self.path}): {_differences(self.relation, self.new, self.spec)}"]
        out += [d.line(self.name) for d in self.decisions]
        out += [f"warm start from {self.name}: {n}" for n in self.notes]
        return out


def _open(spec: StudySpec, path: str) -> optuna.Study:
    """The earlier study, loaded (optuna's load_study: no trial or attribute is written)."""
    from autotune.storage_check import NoStudy
    from autotune.study.storage.opening import open_study

    try:
        return open_study(spec, create=False)
    except NoStudy:
        raise ConfigError(f"warm_start: no study {spec.name!r} in {redact_url(spec.storage_url)} "
                          f"(from {shown(path, 200)}); run it first or remove it from warm_start") from None
    except ConfigError as exc:
        raise ConfigError(f"warm_start {shown(path, 200)}: {exc}") from None


#: The opener of earlier studies (the benchmark swaps in its in-memory ones).
OPEN: list[Callable[[StudySpec, str], optuna.Study]] = [_open]


def _calibration(src: Source, new: StudySpec) -> tuple[dict[str, Any] | None, Decision]:
    r = src.relation
    cal = src.spec.calibration.model_dump(exclude_none=True) if src.spec.calibration is not None \
        else src.study.user_attrs.get(attrs.CALIBRATION)
    if not cal or cal.get("p_gib") is None or cal.get("a_gib") is None:
        return None, Decision("calibration", False, "the earlier study has none")
    if not r.same_node:
        return None, Decision("calibration", False, "another node: P and A are the node's")
    if not r.same_model:
        return None, Decision("calibration", False, "another model: A holds its weights")
    out = dict(cal)
    out.setdefault("tp_size", src.spec.server.tp_size)
    out["source"] = f"warm start: {src.name} ({cal.get('source', 'calibration')})"
    how = []
    if not r.same_release:
        out["f_is_auto"] = False  # the automatic f is the release's own: never taken from another one
    if not r.same_regime and out.get("draft_w_gib") is None:
        # regime A measured A before the draft was loaded, B after: the draft weights in A are the old regime's
        out["draft_w_gib"] = 0.0 if as_version(src.spec.server.sglang_version).regime == "A" else None
        how.append(f"memory regime {as_version(src.spec.server.sglang_version).regime} -> "
                   f"{as_version(new.server.sglang_version).regime}")
        if out["draft_w_gib"] is None:
            out.pop("draft_w_gib")
    if not r.same_tp:
        how.append(f"TP {src.spec.server.tp_size} -> {new.server.tp_size}")
    if how:
        return out, Decision("calibration", True, f"same node and model; re-derived by the memory model ({', '.join(how)})")
    return out, Decision("calibration", True, "same node and model")


def _failures(src: Source, new: StudySpec) -> tuple[list[Failure], Decision]:
    r = src.relation
    why = None if r.same_node else "another node"
    why = why or (None if r.same_model else "another model")
    why = why or (None if r.same_tp else "another TP: memory per GPU differs")
    why = why or (None if r.same_regime else "another memory regime")
    if why:
        return [], Decision("infeasible regions", False, why)
    out = []
    for t in src.study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        kind = t.user_attrs.get(attrs.FAILURE_KIND)
        if kind not in LEARNED_KINDS or (kind == "runtime_oom" and not r.same_workload):
            continue
        params, _ = translate(dict(t.params), src.spec, new)
        out.append(Failure(number=t.number, kind=kind, params=params, study=src.name))
    skipped = "" if r.same_workload else "; out-of-memory under load left out (another workload)"
    if not out:
        return [], Decision("infeasible regions", False, f"same node, model, TP and memory regime, but the earlier "
                                                         f"study learnt none{skipped}")
    return out, Decision("infeasible regions", True, f"same node, model, TP and memory regime: {len(out)} failure(s)"
                                                     f"{skipped}")


#: Why a configuration does not lie in this study's space after pruning (None: it does):
#: :meth:`autotune.study.candidates.Candidates.outside`.
Outside = Callable[[dict[str, Any]], str | None]


def _top(src: Source, new: StudySpec, widened: StudySpec,
         outside: Outside | None = None) -> tuple[list[tuple[dict[str, Any], int]], Decision]:
    from autotune.study.phases import ranked
    from autotune.study.search.estimate import estimates, key_of

    if not src.relation.related:
        return [], Decision("top configurations", False, "unrelated study (another model or GPU kind, or objective)")
    done = ranked(src.study)
    pooled = estimates(src.study)
    if pooled:
        sign = 1.0 if src.study.direction == optuna.study.StudyDirection.MAXIMIZE else -1.0
        done = sorted(done, key=lambda t: -sign * (pooled[key_of(t)].value if key_of(t) in pooled else t.value or 0))
    basis = "noise-aware estimate" if pooled else "measured value"
    out: list[tuple[dict[str, Any], int]] = []
    seen: set[str] = set()
    # another workload: not its top three (near-copies of one winner) but its best with each speculative
    # algorithm (none included), a choice a workload change can flip (module docstring)
    per_algorithm = not src.relation.same_workload
    algorithms: set[Any] = set()
    left_out: dict[str, list[int]] = {}  # why -> the earlier trials a value this space lacks kept out
    for t in done:
        params, notes = translate(dict(t.params), src.spec, new)
        params = _with_new_knobs(params, widened)
        fixed = _fixed(params, widened)
        if fixed is None:
            # a value outside this space (another range or choice, or one this node removes):
            # not this study's candidate; the next best is
            why = outside(params) if outside is not None else None
            if why:
                left_out.setdefault(why, []).append(t.number)
            continue
        kept = fixed[0]
        key = repr(sorted(kept.items()))
        if not kept or key in seen:
            continue
        if per_algorithm:
            algorithm = kept.get("speculative_algorithm")
            if algorithm in algorithms:
                continue
            algorithms.add(algorithm)
        seen.add(key)
        src.notes += [n for n in notes if n not in src.notes]
        out.append((kept, t.number))
        if not per_algorithm and len(out) >= TOP_K:
            break
    for why, numbers in left_out.items():
        src.notes.append(f"trial{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))} not carried: {why}")
    if not out:
        return [], Decision("top configurations", False, "no completed trial of the earlier study fits this space")
    which = f"its best by {basis} for each speculative algorithm it measured ({len(out)}: another workload)" \
        if per_algorithm else f"its best {len(out)} by {basis}"
    return out, Decision("top configurations", True, f"related study: {which} (trials "
                                                     f"{', '.join(str(n) for _, n in out)}), enqueued before the search")


def _prior_decision(src: Source) -> Decision:
    r = src.relation
    if r.weight == 0:
        return Decision("sampler prior", False, "unrelated study" if not r.related else
                        "another workload: the landscape moves with the requests")
    how = "every earlier trial in this space" if r.weight >= 1 else \
        "every other earlier trial by rank (weight 1/2: another node size or checkpoint)"
    return Decision("sampler prior", True, f"{how}, values rescaled to this study's best")


def load_source(new: StudySpec, path: str) -> Source:
    full = new.resolve_path(path)
    if not Path(full).is_file():
        raise ConfigError(f"warm_start: no study file {shown(path, 200)} (looked at {shown(str(full), 200)})")
    old = load_study(full)  # as the commands load it: an earlier study of hardware: auto reads this node
    if old.name == new.name and same_storage(old.storage_url, new.storage_url):
        raise ConfigError(f"warm_start: {shown(path, 200)} is this study itself (resuming it needs no warm start)")
    study = OPEN[0](old, path)
    return Source(path=path, spec=old, study=study, relation=relation(new, old), new=new)


# ---- every earlier study -----------------------------------------------------------------------
class WarmStart:
    """What the earlier studies of ``spec.warm_start`` carry into this one."""

    def __init__(self, spec: StudySpec, sources: Sequence[Source] = ()) -> None:
        self.spec = spec
        self.sources = list(sources)
        self._decided = False
        for src in self.sources:  # what needs no search space: known before the space is widened by
            # the baseline's automatic values, which the carried calibration predicts
            src.calibration, d_cal = _calibration(src, spec)
            src.failures, d_fail = _failures(src, spec)
            src.decisions = [d_cal, d_fail]

    @classmethod
    def load(cls, spec: StudySpec) -> WarmStart:
        return cls(spec, [load_source(spec, p) for p in spec.warm_start])

    def __bool__(self) -> bool:
        return bool(self.sources)

    def decide(self, widened: StudySpec, outside: Outside | None = None) -> None:
        """Decide what each earlier study carries (``widened``: this study's space after pruning, with the
        baseline; ``outside``: why a configuration is not in it, said for a top one left out)."""
        if self._decided:
            return
        for src in self.sources:
            src.top, d_top = _top(src, self.spec, widened, outside)
            src.decisions = [*src.decisions[:2], d_top, _prior_decision(src)]
        self._decided = True

    def lines(self) -> list[str]:
        return [line for src in self.sources for line in src.lines()]

    # -- what the driver takes
    def calibration(self) -> dict[str, Any] | None:
        return next((s.calibration for s in self.sources if s.calibration), None)

    def failures(self) -> list[Failure]:
        return [f for s in self.sources for f in s.failures]

    def carries_prior(self) -> bool:
        return any(s.relation.weight > 0 for s in self.sources)

    def enqueue_top(self, study: optuna.Study) -> int:
        """Queue the earlier studies' top configurations (new studies only); returns how many."""
        n = 0
        seen: set[str] = set()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for src in self.sources:
                for params, number in src.top:
                    key = repr(sorted(params.items()))
                    if key in seen:
                        continue
                    seen.add(key)
                    study.enqueue_trial(params, user_attrs={WARM_FROM: f"{src.name} trial {number}",
                                                            attrs.STAGE: "warm"})
                    n += 1
        return n

    def lineage(self) -> list[dict[str, Any]]:
        out = []
        for s in self.sources:
            earlier = s.study.user_attrs.get(LINEAGE) or []
            out.append({**s.to_dict(), "built_on": [e.get("study") for e in earlier]})
        return out

    def prior_trials(self, widened: StudySpec) -> list[tuple[FrozenTrial, float, float]]:
        """The earlier trials that lie in this space, as optuna trials of it, each with the earlier
        study's best value (to rescale by)."""
        out: list[tuple[FrozenTrial, float, float]] = []
        for src in self.sources:
            w = src.relation.weight
            if w <= 0:
                continue
            trials = [t for t in src.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                      if t.value is not None and t.user_attrs.get(attrs.CONFIRM_OF) is None
                      and t.user_attrs.get(attrs.SLO_MET) is not False]
            if not trials:
                continue
            sign = 1.0 if src.study.direction == optuna.study.StudyDirection.MAXIMIZE else -1.0
            trials.sort(key=lambda t: -sign * float(t.value or 0.0))
            best = float(trials[0].value or 0.0)
            step = max(1, round(1 / w))
            for rank, t in enumerate(trials):
                if rank % step:
                    continue
                params, _ = translate(dict(t.params), src.spec, self.spec)
                params = _with_new_knobs(params, widened)
                fixed = _fixed(params, widened)
                if fixed is None or set(fixed[0]) != set(params):
                    continue
                ft = optuna.trial.create_trial(params=fixed[0], distributions=fixed[1], value=float(t.value or 0.0),
                                               user_attrs={PRIOR: f"{src.name} trial {t.number}"})
                out.append((ft, float(t.value or 0.0), best))
        for i, (ft, _, _) in enumerate(out):
            ft.number = -(len(out) - i)  # older than every trial of this study
            ft._trial_id = ft.number
        return out


# ---- the sampler's view --------------------------------------------------------------------------
class _WithPrior:
    """The study as the sampler sees it: its own trials after the earlier studies' (rescaled)."""

    def __init__(self, study: optuna.Study, prior: list[tuple[FrozenTrial, float, float]]) -> None:
        self._study = study
        self._prior = prior

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _scaled(self) -> list[FrozenTrial]:
        own = [t.value for t in self._study._get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
               if t.value is not None and t.user_attrs.get(attrs.CONFIRM_OF) is None]
        sign = 1.0 if self._study.direction == optuna.study.StudyDirection.MAXIMIZE else -1.0
        mine = max(own, key=lambda v: sign * v) if own else None
        out = []
        for ft, raw, best in self._prior:
            scale = mine / best if mine is not None and best and math.isfinite(best) and best * mine > 0 else 1.0
            ft.value = raw * scale
            out.append(ft)
        return out

    def _get_trials(self, deepcopy: bool = False, states: Any = None, use_cache: bool = False) -> list[FrozenTrial]:
        own = self._study._get_trials(deepcopy=deepcopy, states=states, use_cache=use_cache)
        if states is not None and TrialState.COMPLETE not in states:
            return own
        return [*self._scaled(), *own]

    def get_trials(self, deepcopy: bool = True, states: Any = None) -> list[FrozenTrial]:
        return self._get_trials(deepcopy=deepcopy, states=states)

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()


class PriorSampler(optuna.samplers.BaseSampler):
    """``inner`` with the earlier studies' trials in its history (:class:`_WithPrior`); trials are
    asked and told in this study as before, and nothing of the earlier studies is stored in it."""

    def __init__(self, inner: optuna.samplers.BaseSampler, prior: list[tuple[FrozenTrial, float, float]]) -> None:
        self.inner = inner
        self.prior = prior

    def _view(self, study: optuna.Study) -> Any:
        return _WithPrior(study, self.prior)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.inner.infer_relative_search_space(self._view(study), trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self.inner.sample_relative(self._view(study), trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self.inner.sample_independent(self._view(study), trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.inner.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()


__all__ = ["LINEAGE", "PRIOR", "WARM_FROM", "Decision", "PriorSampler", "Relation", "Source", "WarmStart",
           "relation", "translate"]
