"""Candidates: what the next trial launches, checked before any GPU time is spent.

From an optuna trial to a launch: the suggested parameters (on a space widened so
SGLang's defaults are one of its points), the server config, the arguments SGLang
would refuse (speculative settings, the installed SGLang's own parser), the memory
prediction, and the verdict that prunes it before launch. The baseline (SGLang's
defaults) is the last search trial (``search.baseline: last``) or trial 0 ("first").
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import optuna

from autotune import space
from autotune.errors import ConfigError
from autotune.outcome import FailureKind
from autotune.sglang.flags.argv import render_argv
from autotune.sglang.flags.installed import InstalledSglang, check_version, probe
from autotune.sglang.knobs.config import ServerConfig
from autotune.sglang.knobs.rules import resolve
from autotune.sglang.knobs.speculative import validate_speculative
from autotune.sglang.memory.predictor import Prediction
from autotune.sglang_env.resolve import install_hint, launch_env, launch_python
from autotune.space_prune import Removed, prune_space
from autotune.spec import StudySpec, resolve_workload
from autotune.study import attrs
from autotune.study.infeasible import Failure, implied_by, inert_knobs
from autotune.study.prediction import Predictor
from autotune.study.storage.identity import stored_form
from autotune.study.storage.opening import trial_dir
from autotune.trial.contract import TrialRequest

log = logging.getLogger(__name__)


@dataclass
class Candidate:
    params: dict[str, Any]
    config: ServerConfig
    prediction: Prediction
    baseline: bool
    invalid: str | None = None  # what SGLang would refuse at startup, found before launch
    notes: list[str] = field(default_factory=list)  # adjustments SGLang would make, applied up front


@dataclass(frozen=True)
class Refusal:
    """Why a candidate is pruned before launch."""

    kind: FailureKind
    reason: str


def without_dead_knobs(spec: StudySpec, predictor: Predictor | None = None) -> tuple[StudySpec, list[Removed]]:
    """The space without the knobs and values that cannot matter or run on this node and release
    (autotune.space_prune), and what went: the one space after pruning. The driver (its sampler,
    designed start, warm start, references), ``autotune plan`` and the benchmarks all draw from it."""
    sp = spec.search_space
    if not (sp.flags or sp.env or sp.custom_allreduce or sp.flashinfer_allreduce_fusion or sp.enable_torch_symm_mem):
        return spec, []
    model, gpu, _ = (predictor or Predictor(spec, lambda: None)).profiles()
    return prune_space(spec, model, gpu)


def vet(cfg: ServerConfig, spec: StudySpec, predictor: Predictor,
        installed: InstalledSglang | None = None) -> tuple[ServerConfig, list[str], str | None]:
    """Before launch: SGLang's overrides applied up front (notes) and what it would refuse (``invalid``,
    quoting its rule or its parser): knob rules, speculative rules, then the parser (the installed
    SGLang's when there is one, else the release's flag table, as the simulated server parses)."""
    version = spec.server.sglang_version
    cfg, notes, invalid = resolve(cfg, version)
    if invalid is None and cfg.speculative.enabled:
        model, _, _ = predictor.profiles()
        try:
            resolved, spec_notes = validate_speculative(cfg.speculative, model.architecture, version,
                                                        attention_backend=cfg.attention_backend)
            cfg = replace(cfg, speculative=resolved)
            notes += spec_notes
        except ConfigError as exc:
            invalid = str(exc)
    argv: list[str] = []
    if invalid is None:
        try:
            argv = render_argv(cfg, version, python="python", module="sglang.launch_server",
                               check=installed is None)[3:]
        except ConfigError as exc:
            invalid = f"SGLang {version} refuses this launch: {exc}"
    if invalid is None and installed is not None:
        refusal = installed.refusals([argv])[0]
        if refusal:
            invalid = f"SGLang {installed.version} refuses this launch: {refusal}"
    return cfg, notes, invalid


@dataclass(frozen=True)
class SglangCheck:
    """What :func:`check_sglang` found: the SGLang whose parser checks every candidate, or None
    (the simulated backend; a Ray cluster whose GPU nodes must have it)."""

    installed: InstalledSglang | None


def check_sglang(spec: StudySpec) -> SglangCheck:
    """The SGLang that launches the study's servers (``launch_python``), asked before anything
    starts (``run_study``: no Ray, no storage, no run directory yet): ConfigError when it cannot
    import SGLang or speaks another release's dialect. The simulated backend is not asked (it
    starts as fast as before)."""
    if spec.server.backend != "sglang":
        return SglangCheck(None)
    python = launch_python(spec)
    remote = spec.executor.kind == "ray" and bool(spec.executor.address or os.environ.get("RAY_ADDRESS"))
    installed = probe(python)
    if installed is None:
        if remote:
            log.info("SGLang is not importable here; the cluster's GPU nodes must have it (flags unchecked)")
            return SglangCheck(None)
        if spec.server.device == "cpu" and not spec.server.python:
            raise ConfigError(f"server.python: no SGLang {spec.server.sglang_version} CPU venv at {python}; "
                              f"build it with: {install_hint(spec)}")
        raise ConfigError(f"server.backend: 'sglang' but {python} cannot import SGLang "
                          "(pip install -e '.[sglang]', or point server.python at the interpreter that has it)")
    check_version(installed, spec.server.sglang_version)
    log.info("SGLang %s found at %s: every candidate is checked by its own parser", installed.version, python)
    return SglangCheck(installed)


class Candidates:
    """Builds and checks the study's candidates (the study is only read here).

    Knobs that cannot matter on this node and release leave the space here
    (:func:`without_dead_knobs`), unless ``removed`` says the spec was pruned already (the
    driver prunes once, before its sampler is chosen); ``removed`` says which and why."""

    def __init__(self, spec: StudySpec, study: optuna.Study, predictor: Predictor,
                 removed: Sequence[Removed] | None = None) -> None:
        if removed is None:
            spec, removed = without_dead_knobs(spec, predictor)
        self.spec, self.removed = spec, list(removed)
        for r in self.removed:
            log.debug("%s", r.line())
        self.study = study
        self.predictor = predictor
        self._widened: StudySpec | None = None
        self.installed: InstalledSglang | None = None  # the real SGLang's parser, when the launching python has one

    # ---- preflight -----------------------------------------------------------------------
    def preflight(self, checked: SglangCheck | None = None) -> None:
        """Before any launch of real SGLang: the installed version must speak the study's dialect,
        and every candidate's argv is fed to its real parser (see autotune.sglang.flags.installed).
        ``checked``: what :func:`check_sglang` found already (``run_study`` asks before anything
        starts); asked here when None."""
        self.installed = (checked if checked is not None else check_sglang(self.spec)).installed

    # ---- baseline ------------------------------------------------------------------------
    def widened_spec(self) -> StudySpec:
        """The space with the baseline as one of its points (see space.widen_for_baseline)."""
        if self._widened is None:
            self._widened, _ = space.widen_for_baseline(self.spec, self._baseline_resolved())
        return self._widened

    def _baseline_resolved(self) -> dict[str, Any]:
        """SGLang's automatic values as predicted when the study started, stored with it: the space
        is widened by them once, and a prediction calibrated later (before a baseline launched
        last) must not widen it again (optuna refuses a categorical whose choices changed)."""
        stored = self.study.user_attrs.get(attrs.BASELINE_RESOLVED)
        if stored is None:
            stored = self._resolved_baseline()
            self.study.set_user_attr(attrs.BASELINE_RESOLVED, stored)
        return dict(stored)

    def _resolved_baseline(self) -> dict[str, Any]:
        base_cfg = space.to_config(self.spec, {}, baseline=True)
        pred = self.predictor.predict(base_cfg)
        resolved: dict[str, Any] = {
            "mem_fraction_static": pred.f,
            "cuda_graph_max_bs": pred.cuda_graph_max_bs,
            "chunked_prefill_size": pred.chunked_prefill_size,
            "max_running_requests": pred.max_running_requests,
            "max_total_tokens": base_cfg.max_total_tokens,
        }
        if self.spec.server.device == "cpu":
            # SGLang's automatic values on CPU follow other rules than the GPU ones the memory
            # model knows: the baseline passes nothing, and its params say so (None).
            resolved.update(mem_fraction_static=None, cuda_graph_max_bs=None, chunked_prefill_size=None,
                            max_running_requests=None)
        return space.baseline_params(self.spec, resolved)

    def ensure_baseline(self) -> None:
        """When the study is new: record its spec, and enqueue SGLang's defaults (and the
        references) now when :meth:`baseline_first`; else the driver enqueues them when the
        search is down to its last trials (:meth:`enqueue_baseline`)."""
        if self.study.get_trials(deepcopy=False):
            return
        if self.baseline_first():
            self.enqueue_baseline()
        # Secrets of server.env / extra_args stay in the study file, not in its records.
        self.study.set_user_attr(attrs.SPEC, stored_form(self.spec))  # compared on resume (study.storage.identity)

    def baseline_first(self) -> bool:
        """``search.baseline: first``, and where "last" does not apply: a grid launches every point,
        the baseline's among them, and marks the ones it has seen from the study's trials (launched
        last, that point would run twice); fixed stages build the speculative stage on the best base
        found, which is the baseline when the base stage found nothing feasible; a model whose profile
        is unknown is calibrated by the baseline's launch before anything is judged by the formula."""
        s = self.spec.search
        return s.baseline == "first" or s.stages == "fixed" \
            or isinstance(self.study.sampler, optuna.samplers.BruteForceSampler) \
            or self.predictor.awaits_calibration()

    def baseline_params(self) -> dict[str, Any]:
        """SGLang's defaults as params of the widened space (no launch needed)."""
        return space.widen_for_baseline(self.widened_spec(), self._baseline_resolved())[1]

    def baseline_launches(self) -> int:
        """Launches of the baseline and its references (the search trials they take)."""
        return 1 + len(self.spec.search.references)

    def baseline_enqueued(self) -> bool:
        return any(t.user_attrs.get(attrs.BASELINE) for t in self.study.get_trials(deepcopy=False))

    def enqueue_baseline(self) -> None:
        """Queue SGLang's defaults, then the ``search.references`` points."""
        resolved = self._baseline_resolved()
        params = self.baseline_params()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.study.enqueue_trial(params, user_attrs={attrs.BASELINE: True, attrs.RESOLVED: resolved})
            for name, ref in self.spec.search.references.items():  # e.g. the seed's hand-passed 0.88
                self.study.enqueue_trial({**params, **ref}, user_attrs={attrs.REFERENCE: name})

    def outside(self, params: dict[str, Any]) -> str | None:
        """Why an enqueued configuration does not lie in the space after pruning (None: it does):
        the first value the space does not hold, with the reason it left (``removed``)."""
        hit = space.refused(self.widened_spec(), params)
        if hit is None:
            return None
        name, value = hit
        gone = next((r for r in self.removed if r.name == name and r.value == value), None)
        if gone is None:
            return f"{name}={value} is not one of the space's values"
        return f"{name}={value} left the space before the study started: {gone.reason}"

    def into_space(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` with a value only the baseline widened the space with (SGLang's automatic one:
        held by :meth:`widened_spec`, not by the study file's space after pruning) replaced by the
        space's nearest one (a choice that is not a number: the first): what a search trial may
        launch. A value neither holds is left for :meth:`outside` (the configuration is dropped)."""
        wide = self.widened_spec()
        only_baseline = {k: v for k, v in params.items()
                         if (dom := space.domain_of(wide, k)) is not None and space.in_domain(dom, v)}
        return {**params, **space.into_space(self.spec, only_baseline, lambda choices: choices[0])}

    # ---- validation and prediction --------------------------------------------------------
    def config_of(self, params: dict[str, Any], *, baseline: bool) -> ServerConfig:
        return space.to_config(self.widened_spec(), params, baseline=baseline)

    def candidate(self, trial: optuna.Trial) -> Candidate:
        spec = self.widened_spec()
        params = space.suggest(trial, spec)
        baseline = bool(trial.user_attrs.get(attrs.BASELINE))
        cfg = space.to_config(spec, params, baseline=baseline)
        cfg, notes, invalid = vet(cfg, self.spec, self.predictor, self.installed)
        try:
            prediction = self.predictor.predict(cfg)
        except ConfigError:  # a refused flag (invalid already says so): predict the rest of the launch
            prediction = self.predictor.predict(replace(cfg, flags=()))
        return Candidate(params=params, config=cfg, prediction=prediction, baseline=baseline,
                         invalid=invalid, notes=list(notes))

    def refusal(self, cand: Candidate, failures: Sequence[Failure]) -> Refusal | None:
        """The one rule that prunes before launch: SGLang would refuse the arguments, the memory
        model condemns it (:attr:`Prediction.should_prune`), or an earlier failure implies it."""
        if cand.invalid:
            return Refusal(FailureKind.INVALID_ARGS, cand.invalid)
        if cand.prediction.should_prune:
            return Refusal(FailureKind.PREDICTED_OOM, cand.prediction.reason)
        hit = implied_by(cand.params, list(failures),
                         inert_knobs(self.spec.server.tp_size, self.spec.hardware.interconnect))
        return Refusal(FailureKind.INFEASIBLE, hit[1]) if hit is not None else None

    # ---- the request ----------------------------------------------------------------------
    def request(self, number: int, cand: Candidate) -> TrialRequest:
        spec = self.spec
        wl = resolve_workload(spec, spec.workload)
        mix = [resolve_workload(spec, w) for w in spec.workloads] if spec.workloads else None
        return TrialRequest(
            study_name=spec.name,
            trial_number=number,
            config=cand.config,
            backend=spec.server.backend,
            sglang_version=spec.server.sglang_version,
            gpu=spec.hardware.gpu,
            num_gpus=spec.hardware.num_gpus,
            interconnect=spec.hardware.interconnect,
            workload=wl,
            objective=spec.objective.as_objective(),
            artifact_dir=str(trial_dir(spec, number)),
            run_dir=str(spec.run_path),
            startup_timeout_s=spec.server.startup_timeout_s,
            env={**launch_env(spec), **dict(cand.config.env)},
            python=launch_python(spec) if spec.server.backend == "sglang" else spec.server.python,
            sim=spec.server.sim,
            prediction=cand.prediction,
            workloads=mix,
        )
