"""Between optuna trials and autotune's candidates: suggestion, memory prediction,
calibration, the trial request, and what a finished trial carries."""

from __future__ import annotations

import logging
import warnings
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune import space
from autotune.outcome import FailureKind
from autotune.sglang.config import ServerConfig
from autotune.spec import StudySpec
from autotune.study.infeasible import LEARNED_KINDS, Failure
from autotune.study.storage import trial_dir
from autotune.study.trial import TrialRequest, TrialResult

log = logging.getLogger(__name__)

# Flat copies of these metrics of the objective's load point go to user_attrs.
FLAT_METRICS = (
    "output_throughput", "total_throughput", "request_throughput",
    "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
    "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
    "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
    "mean_e2e_latency_ms", "p99_e2e_latency_ms", "concurrency", "completed", "failed",
)


@dataclass
class Candidate:
    params: dict[str, Any]
    config: ServerConfig
    prediction: dict[str, Any]
    baseline: bool
    invalid: str | None = None  # what SGLang would refuse at startup, found before launch
    notes: list[str] | None = None  # adjustments SGLang would make, applied up front


def _as_dict(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {}
    if hasattr(obj, "to_dict"):
        return dict(obj.to_dict())
    if is_dataclass(obj):
        return asdict(obj)
    return dict(obj)


def _prunable(spec: StudySpec) -> bool:
    sp = spec.search_space
    return bool(sp.flags or sp.env or sp.custom_allreduce or sp.flashinfer_allreduce_fusion
                or sp.enable_torch_symm_mem)


class SpaceBridge:
    def __init__(self, spec: StudySpec, study: optuna.Study | None) -> None:
        """``study`` None: predictions only (``plan``), calibrated from the study file or storage.

        Knobs that cannot matter on this node and release leave the space here
        (:mod:`autotune.space_prune`); ``removed`` says which and why."""
        self.study = study
        self.spec = spec
        self._model = None
        self._draft = None
        self._gpu = None
        self._widened: StudySpec | None = None
        self.installed: Any = None  # the real SGLang's parser, when the launching python has one
        self.removed: list[Any] = []
        if _prunable(spec):
            from autotune.space_prune import prune_space

            model, gpu, _ = self._profiles()
            self.spec, self.removed = prune_space(spec, model, gpu)
            for r in self.removed:
                log.debug("%s", r.line())

    def preflight(self) -> None:
        """Before any launch of real SGLang: the installed version must speak the study's dialect,
        and every candidate's argv is fed to its real parser (see autotune.sglang.installed)."""
        import os
        import sys

        from autotune.errors import ConfigError
        from autotune.sglang.installed import check_version, probe

        spec = self.spec
        if spec.server.backend != "sglang":
            return
        python = spec.server.python or sys.executable
        remote = spec.executor.kind == "ray" and bool(spec.executor.address or os.environ.get("RAY_ADDRESS"))
        installed = probe(python)
        if installed is None:
            if remote:
                log.info("SGLang is not importable here; the cluster's GPU nodes must have it (flags unchecked)")
                return
            raise ConfigError(f"server.backend: 'sglang' but {python} cannot import SGLang "
                              "(pip install -e '.[sglang]', or point server.python at the interpreter that has it)")
        check_version(installed, spec.server.sglang_version)
        self.installed = installed
        log.info("SGLang %s found at %s: every candidate is checked by its own parser", installed.version, python)

    # ---- knowledge -----------------------------------------------------
    def _profiles(self) -> tuple[Any, Any, Any]:
        from autotune.sglang.gpus import get_gpu
        from autotune.sglang.models import load_model_profile

        if self._model is None:
            spec = self.spec
            self._model = load_model_profile(spec.resolve_path(spec.server.model_path))
            self._gpu = get_gpu(spec.hardware.gpu)
            sp = spec.search_space.speculative
            if sp is not None and sp.draft_model_path:
                self._draft = load_model_profile(spec.resolve_path(sp.draft_model_path))
        return self._model, self._gpu, self._draft

    def calibration(self) -> dict[str, Any] | None:
        if self.spec.calibration is not None:
            return {**self.spec.calibration.model_dump(exclude_none=True), "source": "study file"}
        if self.study is None:
            from autotune.study.plan import stored_calibration

            return stored_calibration(self.spec)
        return self.study.user_attrs.get("calibration")

    def predict(self, cfg: ServerConfig) -> dict[str, Any]:
        from autotune.sglang.memory import Calibration, predict

        model, gpu, draft = self._profiles()
        cal = self.calibration()
        calibration = Calibration.from_dict(cal) if cal else None
        pred = predict(
            model, gpu, cfg,
            version=self.spec.server.sglang_version,
            num_gpus=self.spec.hardware.num_gpus,
            interconnect=self.spec.hardware.interconnect,
            calibration=calibration,
            draft=draft if cfg.speculative.enabled else None,
        )
        return _as_dict(pred)

    # ---- trials --------------------------------------------------------
    def widened_spec(self) -> StudySpec:
        """The space with the baseline as one of its points (see space.widen_for_baseline)."""
        if self._widened is None:
            self._widened, _ = space.widen_for_baseline(self.spec, self._resolved_baseline())
        return self._widened

    def _resolved_baseline(self) -> dict[str, Any]:
        base_cfg = space.to_config(self.spec, {}, baseline=True)
        pred = self.predict(base_cfg)
        resolved = {
            "mem_fraction_static": pred.get("f"),
            "cuda_graph_max_bs": pred.get("cuda_graph_max_bs"),
            "chunked_prefill_size": pred.get("chunked_prefill_size"),
            "max_running_requests": pred.get("max_running_requests"),
        }
        return space.baseline_params(self.spec, resolved)

    def ensure_baseline(self) -> None:
        """Trial 0 is SGLang's defaults; enqueue it when the study is new."""
        if self.study.get_trials(deepcopy=False):
            return
        resolved = self._resolved_baseline()
        self._widened, params = space.widen_for_baseline(self.spec, resolved)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.study.enqueue_trial(params, user_attrs={"baseline": True, "resolved": resolved})
            for name, ref in self.spec.search.references.items():  # e.g. the seed's hand-passed 0.88
                self.study.enqueue_trial({**params, **ref}, user_attrs={"reference": name})
        self.study.set_user_attr("spec", self.spec.model_dump(mode="json", exclude={"source_path"}))

    def candidate(self, trial: optuna.Trial) -> Candidate:
        spec = self.widened_spec()
        params = space.suggest(trial, spec)
        baseline = bool(trial.user_attrs.get("baseline"))
        cfg = space.to_config(spec, params, baseline=baseline)
        cfg, notes, invalid = self.vet(cfg)
        prediction = self.predict(cfg) if invalid is None else {"verdict": "invalid_args", "reason": invalid}
        return Candidate(params=params, config=cfg, prediction=prediction, baseline=baseline,
                         invalid=invalid, notes=notes)

    def vet(self, cfg: ServerConfig) -> tuple[ServerConfig, list[str], str | None]:
        """Before launch: SGLang's overrides applied up front (notes) and what it would refuse
        (``invalid``, quoting its rule or its parser): knob rules, speculative rules, then the
        parser (the installed SGLang's when there is one, else the release's flag table)."""
        from dataclasses import replace

        from autotune.errors import ConfigError
        from autotune.sglang.flags import render_argv
        from autotune.sglang.knob_rules import resolve
        from autotune.sglang.speculative import validate_speculative

        version = self.spec.server.sglang_version
        cfg, notes, invalid = resolve(cfg, version)
        if invalid is None and cfg.speculative.enabled:
            model, _, _ = self._profiles()
            try:
                resolved, spec_notes = validate_speculative(cfg.speculative, model.architecture, version,
                                                            attention_backend=cfg.attention_backend)
                cfg = replace(cfg, speculative=resolved)
                notes += spec_notes
            except ConfigError as exc:
                invalid = str(exc)
        if invalid is None:
            try:  # the release's own parser (its flag table), as the simulated server parses
                argv = render_argv(cfg, version, python="python", module="sglang.launch_server",
                                   check=self.installed is None)[3:]
            except ConfigError as exc:
                invalid = f"SGLang {version} refuses this launch: {exc}"
        if invalid is None and self.installed is not None:
            refusal = self.installed.refusals([argv])[0]
            if refusal:
                invalid = f"SGLang {self.installed.version} refuses this launch: {refusal}"
        return cfg, notes, invalid

    def request(self, trial: optuna.Trial, cand: Candidate) -> TrialRequest:
        spec = self.spec
        tdir = trial_dir(spec, trial.number)
        wl = spec.workload.model_dump()
        if wl.get("dataset_path"):
            wl["dataset_path"] = spec.resolve_path(wl["dataset_path"])
        return TrialRequest(
            study_name=spec.name,
            trial_number=trial.number,
            config=cand.config.to_dict(),
            backend=spec.server.backend,
            sglang_version=spec.server.sglang_version,
            gpu=spec.hardware.gpu,
            num_gpus=spec.hardware.num_gpus,
            interconnect=spec.hardware.interconnect,
            workload=wl,
            objective_metric=spec.objective.metric,
            objective_direction=spec.objective.resolved_direction,
            artifact_dir=str(tdir),
            run_dir=str(spec.run_path),
            startup_timeout_s=spec.server.startup_timeout_s,
            env={**spec.server.env, **dict(cand.config.env)},
            python=spec.server.python,
            sim=spec.server.sim.model_dump(),
            prediction=cand.prediction,
            slo=dict(spec.objective.slo),
        )

    def record_result(self, trial: optuna.Trial, result: TrialResult) -> None:
        """Everything a finished trial carries, set before tell (optuna refuses writes after)."""
        from autotune.sglang.flags import shell_line

        t = trial
        t.set_user_attr("command", result.command)
        t.set_user_attr("shell", shell_line(result.command) if result.command else "")
        t.set_user_attr("observed", result.observed)
        t.set_user_attr("timings", {k: round(v, 3) for k, v in result.timings.items()})
        t.set_user_attr("gpu_seconds", round(result.gpu_seconds, 2))
        t.set_user_attr("trial_dir", str(trial_dir(self.spec, t.number)))
        if result.metrics_by_point:
            t.set_user_attr("metrics", result.metrics_by_point)
        if result.slo_violation is not None:
            t.set_user_attr("slo_violation", round(result.slo_violation, 4))
            t.set_user_attr("slo_met", result.slo_violation <= 0)
        point = result.best_point or (next(iter(result.metrics_by_point), None))
        if point:
            t.set_user_attr("best_point", point)
            m = result.metrics_by_point[point]
            for key in FLAT_METRICS:
                if key in m and m[key] is not None:
                    t.set_user_attr(key, m[key])
        pred = t.user_attrs.get("prediction", {})
        obs_tokens = result.observed.get("kv_tokens")
        if obs_tokens and pred.get("kv_tokens"):
            err = (pred["kv_tokens"] - obs_tokens) / obs_tokens * 100
            t.set_user_attr("kv_tokens_error_pct", round(err, 3))
        if result.state != "complete":
            t.set_user_attr("failure_kind", result.failure_kind or FailureKind.CRASHED.value)
            t.set_user_attr("evidence", result.evidence[:2000])
            t.set_user_attr("reason", result.evidence.splitlines()[0][:500] if result.evidence else "")
            t.set_user_attr("note", f"{result.failure_kind}: {result.evidence[:300]}")
        else:
            obj = self.spec.objective.metric
            t.set_user_attr("note", f"{obj}={result.value:.1f} at {point}; KV tokens observed {obs_tokens}, "
                                    f"predicted {pred.get('kv_tokens')}")
        self._learn_calibration(t, result)

    def _learn_calibration(self, trial: optuna.Trial, result: TrialResult) -> None:
        """The first launch that logged P and A calibrates every later prediction."""
        if self.spec.calibration is not None or self.study.user_attrs.get("calibration"):
            return
        obs = result.observed
        if obs.get("p_gib") is None or obs.get("a_gib") is None:
            return
        from autotune.sglang.memory import Calibration

        baseline = bool(trial.user_attrs.get("baseline"))
        cfg = space.to_config(self.widened_spec(), dict(trial.params), baseline=baseline)
        pred = trial.user_attrs.get("prediction", {})
        cal = Calibration.at(obs, cfg, source=f"trial {trial.number}", resolved_f=pred.get("f")).to_dict()
        self.study.set_user_attr("calibration", cal)
        log.info("calibrated from trial %d: P=%.2f GiB, A=%.2f GiB", trial.number, cal["p_gib"], cal["a_gib"])

    def mark_constraint(self, trial: optuna.Trial, *, violated: bool, slo_violation: float | None = None) -> None:
        """Feed memory failures and SLO misses back to the sampler as constraints (feasible <= 0)."""
        values = [1.0 if violated else -1.0]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trial.set_constraint("memory", values[0])
                if self.spec.objective.slo:
                    # A trial that never reached a load point cannot meet the SLO either.
                    v = slo_violation if slo_violation is not None else (1.0 if violated else 0.0)
                    trial.set_constraint("slo", float(v))
                    values.append(float(v))
            # optuna-dashboard 0.21 shows only the legacy list that constraints_func wrote.
            trial.storage.set_trial_system_attr(trial._trial_id, "constraints", values)
        except (AttributeError, ValueError):  # optuna < 5 has no set_constraint
            pass

    def failures(self) -> list[Failure]:
        out = []
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
            kind = t.user_attrs.get("failure_kind")
            if kind in LEARNED_KINDS:
                out.append(Failure(number=t.number, kind=kind, params=dict(t.params)))
        return out
