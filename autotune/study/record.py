"""Recording a finished trial: what it carries (results), what it teaches the memory model
(calibration) and the sampler (constraints), and the failures later candidates are checked against.

Everything is set before ``tell`` (optuna refuses writes after); the driver calls it.
"""

from __future__ import annotations

import logging
import warnings

import optuna
from optuna.trial import TrialState

from autotune.outcome import FailureKind
from autotune.redact import redact_argv, redact_text
from autotune.sglang.flags.argv import shell_line
from autotune.sglang.hardware.gpus import get_gpu
from autotune.sglang.memory.predictor import Calibration, calibration_problem
from autotune.spec import StudySpec
from autotune.study import attrs
from autotune.study.candidates import Candidates
from autotune.study.infeasible import LEARNED_KINDS, Failure
from autotune.study.storage.opening import trial_dir
from autotune.trial.contract import TrialResult
from autotune.trial.contract import TrialState as BodyState

log = logging.getLogger(__name__)

# Flat copies of these metrics of the objective's load point go to user_attrs.
FLAT_METRICS = (
    "output_throughput", "total_throughput", "request_throughput",
    "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
    "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
    "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
    "mean_e2e_latency_ms", "p99_e2e_latency_ms", "concurrency", "completed", "failed",
    "accept_length",  # speculative decoding's tokens per verify (None, so not copied, without it)
)


class Recorder:
    def __init__(self, spec: StudySpec, study: optuna.Study, candidates: Candidates) -> None:
        self.spec = spec
        self.study = study
        self.candidates = candidates

    # ---- results -------------------------------------------------------------------------
    def record_result(self, trial: optuna.Trial, result: TrialResult) -> None:
        """Everything a finished trial carries (docs/ARCHITECTURE.md), then what it teaches."""
        t = trial
        # The launch's secrets (--api-key, a token in the argv) stay with the process: the study
        # records the command with them hidden (autotune.redact), the server log's tail too.
        command = redact_argv(result.command)
        evidence = redact_text(result.evidence)
        t.set_user_attr(attrs.COMMAND, command)
        t.set_user_attr(attrs.SHELL, shell_line(command) if command else "")
        t.set_user_attr(attrs.OBSERVED, result.observed)
        t.set_user_attr(attrs.TIMINGS, {k: round(v, 3) for k, v in result.timings.items()})
        t.set_user_attr(attrs.GPU_SECONDS, round(result.gpu_seconds, 2))
        t.set_user_attr(attrs.TRIAL_DIR, str(trial_dir(self.spec, t.number)))
        if result.metrics_by_point:
            t.set_user_attr(attrs.METRICS, result.metrics_by_point)
        if result.mix:
            t.set_user_attr(attrs.MIX, result.mix)
        if result.slo_violation is not None:
            t.set_user_attr(attrs.SLO_VIOLATION, round(result.slo_violation, 4))
            t.set_user_attr(attrs.SLO_MET, result.slo_violation <= 0)
        point = result.best_point or (next(iter(result.metrics_by_point), None))
        if point:
            t.set_user_attr(attrs.BEST_POINT, point)
            m = result.metrics_by_point[point]
            for key in FLAT_METRICS:
                if key in m and m[key] is not None:
                    t.set_user_attr(key, m[key])
        pred = t.user_attrs.get(attrs.PREDICTION, {})
        obs_tokens = result.observed.get("kv_tokens")
        if obs_tokens and pred.get("kv_tokens"):
            err = (pred["kv_tokens"] - obs_tokens) / obs_tokens * 100
            t.set_user_attr(attrs.KV_TOKENS_ERROR_PCT, round(err, 3))
        if result.state != BodyState.COMPLETE:
            t.set_user_attr(attrs.FAILURE_KIND, (result.failure_kind or FailureKind.CRASHED).value)
            t.set_user_attr(attrs.EVIDENCE, evidence[:2000])
            t.set_user_attr(attrs.REASON, evidence.splitlines()[0][:500] if evidence else "")
            t.set_user_attr(attrs.NOTE, f"{result.failure_kind}: {evidence[:300]}")
        else:
            obj = self.spec.objective.metric
            value = f"{result.value:.1f}" if result.value is not None else "none"
            t.set_user_attr(attrs.NOTE, f"{obj}={value} at {point}; KV tokens observed {obs_tokens}, "
                                        f"predicted {pred.get('kv_tokens')}")
        self.learn_calibration(t, result)

    # ---- calibration ---------------------------------------------------------------------
    def learn_calibration(self, trial: optuna.Trial, result: TrialResult) -> None:
        """The first launch that logged P and A calibrates every later prediction."""
        if self.spec.calibration is not None or self.study.user_attrs.get(attrs.CALIBRATION):
            return
        if self.spec.server.device == "cpu":
            # On CPU SGLang's "avail mem" is the whole machine's available RAM (psutil), shared with
            # every other process and moving with them: P and A say nothing about this launch's
            # budget, and the KV pool is set by --max-total-tokens. Nothing to learn; the observed
            # figures stay in the trial's "observed" attribute.
            return
        obs = result.observed
        if obs.get("p_gib") is None or obs.get("a_gib") is None:
            return
        baseline = bool(trial.user_attrs.get(attrs.BASELINE))
        cfg = self.candidates.config_of(dict(trial.params), baseline=baseline)
        if cfg.speculative.enabled or obs.get("draft_seen"):
            # The draft model runner logs the same unlabelled memory lines as the target; a P or A
            # read from its lines (seen with the simulator's 0.5.9 logs: P 12 GiB on an H200)
            # would condemn every later candidate. The first launch without a draft calibrates.
            return
        pred = trial.user_attrs.get(attrs.PREDICTION, {})
        cal = Calibration.at(obs, cfg, source=f"trial {trial.number}", resolved_f=pred.get("f")).to_dict()
        problem = calibration_problem(cal, get_gpu(self.spec.hardware.gpu).memory_gib)
        if problem:  # a log line that is not a measurement of this GPU: never stored (it would break every prediction)
            log.warning("trial %d's log not used to calibrate: %s", trial.number, problem)
            return
        self.study.set_user_attr(attrs.CALIBRATION, cal)
        log.info("calibrated from trial %d: P=%.2f GiB, A=%.2f GiB", trial.number, cal["p_gib"], cal["a_gib"])

    # ---- constraints ---------------------------------------------------------------------
    def mark_constraint(self, trial: optuna.Trial, *, violated: bool, slo_violation: float | None = None) -> None:
        """Feed memory failures and SLO misses back to the sampler as constraints (feasible <= 0).
        optuna-dashboard's legacy list is built at read time (:mod:`autotune.results.dashboard`)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trial.set_constraint("memory", 1.0 if violated else -1.0)
            if self.spec.has_slo:
                # A trial that never reached a load point cannot meet the SLO either.
                v = slo_violation if slo_violation is not None else (1.0 if violated else 0.0)
                trial.set_constraint("slo", float(v))

    def failures(self) -> list[Failure]:
        """Failed trials whose kind later candidates are checked against (infeasible.implied_by)."""
        out = []
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
            kind = t.user_attrs.get(attrs.FAILURE_KIND)
            if kind in LEARNED_KINDS:
                out.append(Failure(number=t.number, kind=kind, params=dict(t.params)))
        return out
