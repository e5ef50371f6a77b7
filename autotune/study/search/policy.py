"""How the search spends its trials: the sampler chosen by the space, a designed start,
and stages that end when they stop paying (``search.stages: auto``).

Priors are hypotheses the data can overturn:

* **Design** (:mod:`autotune.study.search.initial_design`): after the baseline, the memory
  model's boundary points, one speculative probe per algorithm and a space-filling
  set replace the sampler's random start-up trials.
* **Depth at a small batch**: where the workload's decode batch is small (``SMALL_DECODE_BATCH``,
  where every published speculative measurement gains), the designed probe that ran is followed by
  its chain one step deeper before the base's boundary (:meth:`SearchPolicy._spec_step`).
* **The SLO's boundary**: a designed launch that ran but broke an ITL or TPOT ceiling is followed
  by the same knobs at the largest ``max_running_requests`` the measured excess allows
  (:meth:`SearchPolicy._slo_step`), as a launch that ran out of memory is followed by the next f
  down: under a latency SLO the best feasible point sits at the largest batch that keeps it.
* **Order from the data.** "Speculative decoding after the base knobs" (SGLang's
  auto_benchmark order) is the default; when a speculative probe of the design beats
  every non-speculative point, the speculative stage runs first. Published evidence
  (``tests/data/published_speed``): what speculation is worth is set by the decode batch the
  base knobs produce, so it is judged on the best base: DeepSeek-V3 MTP gains 1.8x at batch 1
  and 1.5x at 32 on 8 x H200 (SGLang's docs, ``sglang-docs-deepseek-v3-mtp-h200-tp8``), 2.11x
  at concurrency 1 on MI300X falling with concurrency (``amd-blog-2025-09-deepseek-v3-mtp-*``),
  and loses under an unbounded load: DeepSeek-R1-0528 on 8 x H200, 1,000 ShareGPT prompts,
  3,415 -> 1,060 tok/s (``gpustack-dsr1-0528-h200-tp8-sharegpt-options``), DeepSeek-V3.2
  1,427 -> 695 (``gpustack-deepseek-v3.2-h200-dpattn-dp-ep-mtp``). Because the sign flips with
  load, the design probes each algorithm first (the prior that costs most when wrong); a
  probe that was not measured (out of memory at the baseline's layout) is taken again on the
  best base once the design's boundaries are measured.
* **A stage ends when it stops improving**: after ``patience`` launched trials of the
  stage without a gain of ``MIN_GAIN`` over the study's best (pruned-before-launch trials
  cost no GPU time and do not count there), or at its cap: ``stage1_fraction`` of the trial
  budget for the designed start and the base stage together (a pruned trial spends the
  budget, so it counts here), the speculative sub-space's size for the speculative stage.
* **Speculative settings get room for their draft**: the speculative stage walks the
  speculative settings on the best base configuration, each at the largest
  ``mem_fraction_static`` (up to the base's) at which the memory model says the draft fits.
* **Later stages revisit earlier knobs**: the last stage ("joint") fixes only the
  winning speculative algorithm (``none`` included) and lets the sampler move every
  other knob again, so base knobs are re-tuned under speculative decoding and a
  speculative winner can still lose to a better base configuration.

The stage of every trial is stored in its ``stage`` user attribute, so a resumed study
picks up where it was.
"""

from __future__ import annotations

import logging
import math
import random
import warnings
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import space
from autotune.errors import AutotuneError
from autotune.outcome import FailureKind
from autotune.spec import (
    IntRange,
    StudySpec,
)
from autotune.study.phases import SPEC_KEYS, is_extra, json_key, ranked
from autotune.study.search import initial_design

if TYPE_CHECKING:
    from autotune.study.candidates import Candidates

log = logging.getLogger(__name__)

#: A stage's trial counts as progress when it beats the study's best by this much (relative).
#: Run-to-run noise of a throughput measurement is about 1 % (benchmarks/search_efficiency.py):
#: smaller steps are not evidence.
MIN_GAIN = 0.005
#: A speculative probe that beats every other launch by this much (far beyond noise) ends the
#: design: the speculative stage runs at once.
BIG_GAIN = 0.10
#: A failed boundary point of the design is walked down at most this many steps of f.
MAX_BOUNDARY_STEPS = 2
#: A designed launch that ran but broke a decode-latency ceiling is followed by the same knobs at a
#: smaller running-request cap at most this many times in a row.
MAX_SLO_STEPS = 2
#: A decode batch (running requests per replica) at most this large counts as small: every published
#: speculative measurement in ``tests/data/published_speed`` at a bounded concurrency gains, up to 64
#: (DeepSeek-V3 MTP on 8 x MI300X, 1.25x at 64, ``amd-blog-2025-09-deepseek-v3-mtp-mi300x-random``;
#: 1.8x at 1 and 1.5x at 32 on 8 x H200, ``sglang-docs-deepseek-v3-mtp-h200-tp8``); the published losses
#: are 1,000 prompts sent at once (``gpustack-*``). There a designed probe that ran is followed by the
#: next depth of its chain before the base's boundary (:meth:`SearchPolicy._spec_step`).
SMALL_DECODE_BATCH = 64
#: SLO metrics set by the decode step (the running batch's forward), which a smaller cap shortens.
_DECODE_SLO = ("_itl_ms", "_tpot_ms")
#: Failures that say f left too little slack: every higher f (other knobs equal) fails too.
SLACK_KINDS = (FailureKind.GRAPH_CAPTURE_OOM.value, FailureKind.RUNTIME_OOM.value)


# ---- the stages ---------------------------------------------------------------------
def _launched(t: FrozenTrial) -> bool:
    return t.state in (TrialState.COMPLETE, TrialState.FAIL) and not is_extra(t) and not t.user_attrs.get("retried")


def _spends_budget(t: FrozenTrial) -> bool:
    """A trial of ``n_trials``: launched or pruned before launch (``driver.budget_used``)."""
    return t.state in (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED) and not is_extra(t) \
        and not t.user_attrs.get("retried")


def _needs_as_much_slack(point: dict[str, Any], failed: dict[str, Any]) -> bool:
    """``point`` differs from ``failed`` at most in f and a graph size at least as large (so it
    needs at least the slack after the KV pool that ``failed`` lacked)."""
    skip = ("mem_fraction_static", "cuda_graph_max_bs")
    if {k: v for k, v in point.items() if k not in skip} != {k: v for k, v in failed.items() if k not in skip}:
        return False
    bs, bs_failed = point.get("cuda_graph_max_bs"), failed.get("cuda_graph_max_bs")
    return bs is None or bs_failed is None or bs >= bs_failed


def _next_above(dom: Any, value: int) -> int | None:
    """The smallest value of an integer axis above ``value``, found without listing the axis."""
    if isinstance(dom, IntRange):
        nxt = dom.low + ((value - dom.low) // dom.step + 1) * dom.step if value >= dom.low else dom.low
        return nxt if nxt <= dom.high else None
    above = [int(c) for c in dom.choices if int(c) > value]
    return min(above) if above else None


def _designed_launches(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The designed start's launched trials, in launch order."""
    return [t for t in trials if t.user_attrs.get("stage") == "design" and _launched(t)]


def _in_a_row(design: list[FrozenTrial], why: str) -> int:
    """How many of the last designed launches were ``why`` points, back to the last other one."""
    n = 0
    for t in reversed(design):
        if t.user_attrs.get("design") != why:
            break
        n += 1
    return n


def _as_suggested(variant: dict[str, Any]) -> dict[str, Any]:
    """A speculative variant as optuna stores it: with top-k 1 the draft-token count follows
    from the steps (``space._suggest_spec``) and is not a parameter."""
    if variant.get("speculative_eagle_topk", 1) == 1 and "speculative_num_steps" in variant:
        return {k: v for k, v in variant.items() if k != "speculative_num_draft_tokens"}
    return dict(variant)


def _on_base(params: dict[str, Any], base: dict[str, Any]) -> bool:
    """``params`` is a speculative setting tried on ``base`` (the non-speculative knobs of the best
    configuration): the same knobs, f aside, at ``base``'s f or below it (where a draft model that did
    not fit at ``base``'s f was placed: :meth:`SearchPolicy._with_room_for_the_draft`)."""
    mine = {k: v for k, v in params.items() if k not in SPEC_KEYS}
    f, f_base = mine.pop("mem_fraction_static", None), base.get("mem_fraction_static")
    if mine != {k: v for k, v in base.items() if k != "mem_fraction_static"}:
        return False
    return f == f_base or (f is not None and f_base is not None and f <= f_base)


class SearchPolicy:
    """Fixes each stage's parameters before the sampler's ``ask`` (see module docstring)."""

    def __init__(self, spec: StudySpec, study: optuna.Study, candidates: Candidates) -> None:
        self.spec = spec
        self.study = study
        self.candidates = candidates
        sp = spec.search_space.speculative
        self.spec_algos = [a for a in sp.algorithm.choices if a != "none"] if sp else []
        self.n_design = initial_design.design_size(spec.n_trials, spec.search.initial_design)
        self.patience = spec.search.patience or max(3, round(spec.n_trials / 10))
        self.sign = 1.0 if spec.objective.resolved_direction == "maximize" else -1.0
        self._rr = 0

    @classmethod
    def for_study(cls, spec: StudySpec, study: optuna.Study, candidates: Candidates) -> SearchPolicy | None:
        from autotune.study.search.samplers import GridSampler

        # a grid tries every candidate anyway: nothing to design or stage
        if spec.search.stages != "auto" or isinstance(study.sampler, (GridSampler, optuna.samplers.BruteForceSampler)):
            return None
        return cls(spec, study, candidates)

    # -- what the study holds
    def _trials(self) -> list[FrozenTrial]:
        return self.study.get_trials(deepcopy=False)

    def _stage_of(self, t: FrozenTrial) -> str | None:
        return t.user_attrs.get("stage")

    def _enqueue(self, params: dict[str, Any], stage: str, **attrs: Any) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.study.enqueue_trial(params, user_attrs={"stage": stage, **attrs})

    def _stage_sequence(self, trials: list[FrozenTrial]) -> list[str]:
        if not self.spec_algos:
            return ["joint"]
        done = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None
                and not is_extra(t)]
        base = [float(t.value or 0.0) for t in done if t.params.get("speculative_algorithm", "none") == "none"]
        spec = [float(t.value or 0.0) for t in done if t.params.get("speculative_algorithm", "none") != "none"]
        best_spec = max(spec, key=lambda v: self.sign * v) if spec else None
        best_base = max(base, key=lambda v: self.sign * v) if base else None
        # Speculative first only when it beats a measured base configuration by more than
        # measurement noise (with SGLang's defaults launched last, the probe may be the only
        # measurement so far: that says nothing about the prior).
        if best_spec is not None and best_base is not None and \
                self.sign * (best_spec - best_base) > MIN_GAIN * abs(best_base):
            return ["speculative", "base", "joint"]
        return ["base", "speculative", "joint"]

    def _stalled(self, trials: list[FrozenTrial], stage: str, cap: int) -> bool:
        """The stage has had ``patience`` launches without a gain of MIN_GAIN, or reached ``cap``.

        The base stage's cap is a share of the trial budget (``stage1_fraction``), and a candidate
        pruned before launch spends a trial of the budget as a launch does: it is counted there with
        the designed start's trials (base knobs too). Counted in launches only, a base stage whose
        sampler keeps drawing predicted OOMs (a narrow feasible window: DP attention 8 on the seed
        node) took the whole budget, and no speculative setting was ever launched."""
        trials = [t for t in trials if not is_extra(t)]
        if stage == "base":
            spent = [t for t in trials if self._stage_of(t) in ("design", "base") and _spends_budget(t)]
            if len(spent) >= cap:
                return True
        mine = [t for t in trials if self._stage_of(t) == stage and _launched(t)]
        if len(mine) >= cap:
            return True
        best: float | None = None
        since = 0
        for t in sorted(trials, key=lambda t: t.number):
            if t.state != TrialState.COMPLETE or t.value is None or t.user_attrs.get("slo_met") is False:
                if self._stage_of(t) == stage and _launched(t):
                    since += 1
                continue
            gain = best is None or self.sign * (t.value - best) > MIN_GAIN * abs(best)
            if gain:
                best = t.value
            if self._stage_of(t) == stage:
                since = 0 if gain else since + 1
        return since >= self.patience

    def _spec_cap(self) -> int:
        sp = self.spec.search_space.speculative
        n = space.spec_variant_count(sp) if sp else 0  # counted: a range of 10^9 draft tokens is never listed
        return max(1, min(n, math.ceil(self.spec.n_trials * 0.3)))

    # -- the hook
    def before_ask(self, used: int) -> str | None:
        """Enqueue what the next ``ask`` must hold; returns the stage name (None: nothing fixed)."""
        if self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return None
        if self.n_design > 0 and self.study.user_attrs.get("design_points") is None:
            if self.candidates.predictor.awaits_calibration():
                return None  # an unknown profile: the design's boundaries wait for the first launch's log
            self._plan_design()
        trials = self._trials()
        if self._enqueue_next_design(trials):
            return "design"
        stage = self._current_stage(trials)
        best = ranked(self.study)
        if stage == "base":
            self._enqueue({"speculative_algorithm": "none"}, "base")
        elif stage == "speculative" and best:
            # the small speculative sub-space on the best base is walked, not sampled: no repeats
            base = {k: v for k, v in best[0].params.items() if k not in SPEC_KEYS}
            nxt = self._next_spec_variant(trials, base, best[0].params)
            params = {**base, **(nxt or {"speculative_algorithm": self.spec_algos[0]})}
            self._enqueue(self._with_room_for_the_draft(params, trials), "speculative", stage_base=best[0].number)
        elif stage == "joint" and self.spec_algos and best:
            self._enqueue({"speculative_algorithm": best[0].params.get("speculative_algorithm", "none")}, "joint")
        elif stage == "joint":
            self._enqueue({}, "joint")
        return stage

    def _next_spec_variant(self, trials: list[FrozenTrial], base: dict[str, Any],
                           best: dict[str, Any]) -> dict[str, Any] | None:
        """The untried speculative setting on ``base`` nearest the best one so far (ordinal
        distance over steps, top-k and draft tokens; ties broken by the sampler's seed). While the
        best configuration is not speculative, the nearest to the best speculative setting measured on
        ``base``, and before any, the settings SGLang itself picks for the architecture (the designed
        start's probe: :func:`initial_design._spec_probe`): the walk starts from the maintainers' tuned
        default and climbs from the best it measured, instead of starting anywhere (at random, the
        setting that wins could come after two out-of-memory launches had spent the stage's patience:
        4 of 20 cold seeds on ``benchmarks/warm_start/2-workload-after.yaml``)."""
        sp = self.spec.search_space.speculative
        if sp is None:
            return None
        tried = {json_key({k: v for k, v in t.params.items() if k in SPEC_KEYS}) for t in trials
                 if _on_base(t.params, base)}
        variants = [_as_suggested(v) for v in space.spec_variants(sp) if v.get("speculative_algorithm") != "none"]
        variants = [v for v in variants if json_key(v) not in tried]
        if not variants:
            return None
        ref_algo = best.get("speculative_algorithm", "none")
        if ref_algo == "none":
            measured = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None
                        and t.params.get("speculative_algorithm", "none") != "none" and _on_base(t.params, base)]
            if measured:
                best = max(measured, key=lambda t: self.sign * float(t.value or 0.0)).params
                ref_algo = best["speculative_algorithm"]
            else:
                arch = self.candidates.predictor.profiles()[0].architecture
                best = initial_design._spec_probe(self.spec, self.spec_algos[0], arch)
                ref_algo = best["speculative_algorithm"]

        def distance(v: dict[str, Any]) -> float:
            d = 0.0 if v["speculative_algorithm"] == ref_algo or ref_algo == "none" else 100.0
            for k in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"):
                if k in v and k in best:
                    d += abs(float(v[k]) - float(best[k]))
            return d

        rng = random.Random(f"{self.spec.sampler.seed}-{len(trials)}")
        return min(variants, key=lambda v: (distance(v), rng.random()))

    def _current_stage(self, trials: list[FrozenTrial]) -> str:
        seq = self._stage_sequence(trials)
        caps = {"base": max(1, math.ceil(self.spec.n_trials * self.spec.search.stage1_fraction)),
                "speculative": self._spec_cap(), "joint": 1 << 30}
        # A stage once left is not re-entered: the first of the sequence not yet stalled.
        best = ranked(self.study)
        for stage in seq:
            if stage == "speculative" and best:
                base = {k: v for k, v in best[0].params.items() if k not in SPEC_KEYS}
                if self._next_spec_variant(trials, base, best[0].params) is None:
                    continue  # every speculative setting was tried on the best base
            if not self._stalled(trials, stage, caps[stage]):
                return stage
        return "joint"

    def _predict(self, params: dict[str, Any]) -> dict[str, Any]:
        """The memory model's verdict on ``params`` (a Prediction as a dict); one it cannot judge is
        treated as pruned (never designed or placed)."""
        try:
            return self.candidates.predictor.predict(space.to_config(self.candidates.widened_spec(), params)).to_dict()
        except AutotuneError as exc:
            log.debug("no prediction for %s: %s", params, exc)
            return {"should_prune": True, "verdict": "unknown"}

    def _with_room_for_the_draft(self, params: dict[str, Any], trials: list[FrozenTrial]) -> dict[str, Any]:
        """A speculative setting on the best base configuration, at the largest f (up to the base's own)
        at which the memory model says it fits, and below any f at which the same setting ran out of slack.

        The base's f was tuned without a draft model: the draft's weights, its KV cache and its CUDA
        graphs come out of the same memory, so the feasible f window moves down (the designed start
        places its speculative probe the same way: :func:`initial_design.build`). Taken at the base's
        f as is, every speculative setting of a base at its memory edge is pruned before launch, and
        the speculative stage ends without a single launch: on the seed node at concurrency 16, where
        EAGLE3 gains 70 % over the best base, 7 of 20 seeds never launched it
        (``benchmarks/scenarios/7-seed-c16-spec.yaml``)."""
        f = params.get("mem_fraction_static")
        dom = self.spec.search_space.mem_fraction_static
        if f is None or dom is None or not self._predict(params).get("should_prune"):
            return self._below_slack_failures(params, trials)
        fs = [v for v in initial_design._axis_values(dom) if v <= f + 1e-9]
        others = {k: v for k, v in params.items() if k != "mem_fraction_static"}
        for strict in (True, False):  # a verdict of "fits" first, as the designed start's intervals
            def fits(x: float, strict: bool = strict) -> bool:
                return initial_design._feasible(self._predict({**others, "mem_fraction_static": x}), strict)

            got = initial_design.f_interval(fs, fits)
            if got is not None:
                return self._below_slack_failures({**others, "mem_fraction_static": fs[got[1]]}, trials)
        return params  # nowhere below the base's f: pruned, and counted as tried

    def _below_slack_failures(self, params: dict[str, Any], trials: list[FrozenTrial]) -> dict[str, Any]:
        """``params`` one step of f below the lowest f at which a launch needing as much slack (the same
        knobs, a graph size at least as large) ran out of it; as it is when none did."""
        f = params.get("mem_fraction_static")
        slack_fails = [t.params["mem_fraction_static"] for t in trials
                       if t.user_attrs.get("failure_kind") in SLACK_KINDS and "mem_fraction_static" in t.params
                       and _needs_as_much_slack(params, t.params)]
        if f is None or not slack_fails or f < min(slack_fails):
            return params
        dom = self.spec.search_space.mem_fraction_static
        step = (dom.step if dom is not None and dom.step else 0.01)
        return {**params, "mem_fraction_static": round(min(slack_fails) - step, 6)}

    def _plan_design(self) -> None:
        cands = self.candidates
        base = next((t for t in self._trials() if t.user_attrs.get("baseline")), None)
        # SGLang's defaults are known without launching them (search.baseline: last)
        baseline = dict(base.params) if base is not None else cands.baseline_params()
        points = initial_design.build(self.spec, baseline, self._predict, self.n_design, seed=self.spec.sampler.seed,
                                      architecture=cands.predictor.profiles()[0].architecture)
        self.study.set_user_attr("design_points", [{"params": p.params, "why": p.why} for p in points])
        log.info("designed start: %d point(s) (%s)", len(points), ", ".join(p.why for p in points))

    def _enqueue_next_design(self, trials: list[FrozenTrial]) -> bool:
        """One designed point per ask, so each learns from the launches before it: a boundary
        point above an f that already ran out of slack moves below it (monotone feasibility);
        after a speculative probe won, the rest carry its speculative settings; a point that
        became a repeat of a launched one is skipped."""
        points = self.study.user_attrs.get("design_points") or []
        used = int(self.study.user_attrs.get("design_used") or 0)
        if used < len(points) and self._probe_won_big(trials):
            # the "speculative last" prior is overturned by far more than noise: the
            # speculative stage runs now, the rest of the design is dropped
            self.study.set_user_attr("design_used", len(points))
            log.info("a speculative probe beat every other launch by > %.0f %%: speculative stage first",
                     BIG_GAIN * 100)
            return False
        seen = {json_key(t.params) for t in trials}
        step = self._boundary_step(trials, points)
        if step is not None and json_key(step) not in seen:
            # the next point of the design walks the failed boundary down one step of f
            points = [*points[:used], {"params": step, "why": "boundary step"}, *points[used:]]
            self.study.set_user_attr("design_points", points)
        step = self._spec_step(trials)
        if step is not None and json_key(step) not in seen:
            # at a small decode batch the probe's chain one step deeper comes before the base's boundary
            points = [*points[:used], {"params": step, "why": "speculative step"}, *points[used:]]
            self.study.set_user_attr("design_points", points)
        step = self._slo_step(trials)
        if step is not None and json_key(step) not in seen:
            # the next point of the design cuts the running batch to what the measured latency allows
            points = [*points[:used], {"params": step, "why": "slo step"}, *points[used:]]
            self.study.set_user_attr("design_points", points)
        retake = self._probe_retake(trials, points[used:])
        if retake is not None and json_key(retake) not in seen:
            self.study.set_user_attr("probe_retaken", True)
            self._enqueue(retake, "design", design="speculative probe")
            log.info("the speculative probe was not measured: taken again on the best base")
            return True
        while used < len(points):
            params = self._adapt(points[used], trials)
            used += 1
            if json_key(params) not in seen:
                self.study.set_user_attr("design_used", used)
                self._enqueue(params, "design", design=points[used - 1]["why"])
                return True
        self.study.set_user_attr("design_used", used)
        return False

    def _probe_retake(self, trials: list[FrozenTrial], left: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The designed speculative probe once more, on the best base measured, when no probe was measured
        (each failed or was pruned): once, after the design's boundary points, before its space-filling ones.

        The probe is there so that the data says at once whether "speculative decoding last" holds; a
        probe that ran out of memory at the baseline's layout says nothing about it, and the speculative
        stage would then wait for the base stage to stall. On the seed node at concurrency 16
        (``benchmarks/scenarios/7-seed-c16-spec.yaml``, where EAGLE3 on DP attention 8 gains 60 % over the
        best base) the probe at DP attention 1 ran out of memory in every seed and the first speculative
        launch came after the base stage, at about 17,600 of the 20,158 GPU-seconds to target."""
        if self.study.user_attrs.get("probe_retaken") or any(p["why"] in ("boundary", "boundary step") for p in left):
            return None
        probes = [t for t in trials if t.user_attrs.get("design") == "speculative probe" and t.state.is_finished()]
        if not probes or any(t.state == TrialState.COMPLETE and t.params.get("speculative_algorithm", "none") != "none"
                             for t in trials):  # a probe, or any speculative launch, was measured
            return None
        best = [t for t in ranked(self.study) if t.params.get("speculative_algorithm", "none") == "none"]
        if not best:
            return None
        base = {k: v for k, v in best[0].params.items() if k not in SPEC_KEYS}
        settings = {k: v for k, v in probes[0].params.items() if k in SPEC_KEYS}
        return self._with_room_for_the_draft({**base, **settings}, trials)

    def _boundary_step(self, trials: list[FrozenTrial], points: list[dict[str, Any]]) -> dict[str, Any] | None:
        """After a designed boundary point ran out of slack (graph capture or runtime OOM): the same
        knobs one step of f lower. Feasibility is monotone in f for fixed other knobs, so the largest
        KV pool that really fits is the next step down, and the memory model's edge is least certain
        right there; a failed launch costs its startup, far less than a completed one. At most
        MAX_BOUNDARY_STEPS in a row."""
        design = _designed_launches(trials)
        if not design:
            return None
        last = design[-1]
        if last.state != TrialState.FAIL or last.user_attrs.get("failure_kind") not in SLACK_KINDS \
                or last.user_attrs.get("design") not in ("boundary", "boundary step"):
            return None
        dom = self.spec.search_space.mem_fraction_static
        f = last.params.get("mem_fraction_static")
        if _in_a_row(design, "boundary step") >= MAX_BOUNDARY_STEPS or dom is None or f is None:
            return None
        step = dom.step or 0.01
        if f - step < dom.low - 1e-9:
            return None
        return {**last.params, "mem_fraction_static": round(f - step, 6)}

    def _spec_step(self, trials: list[FrozenTrial]) -> dict[str, Any] | None:
        """After the designed speculative probe ran, when the workload's decode batch is small
        (``SMALL_DECODE_BATCH``): the probe's chain (top-k 1) one step deeper, next in the design.

        Where every published measurement says speculation gains, the base's boundary is not what the
        next launch should learn: the depth is. The probe sits at SGLang's own settings for the
        architecture (3 steps, top-k 1 on DeepSeek-V3 class), which SGLang's maintainers chose for a
        broad range of loads; at batch 1 a longer draft pays more: gpt-oss-120b with EAGLE3 on 4 x H200
        gains 1.39x at 3 steps, top-k 1, 4 draft tokens and 1.52x at 5 steps, top-k 4, 8 draft tokens
        (``lmsys-blog-2025-08-gpt-oss-120b-eagle3-h200-tp4``): at a small batch the verify step reads
        the weights once whatever the few extra tokens, so one more accepted token costs one draft step.
        A prior, tested at once: the base's boundary follows, and the speculative stage walks every
        depth from the best measured. Once per probe; none after a probe that failed or was pruned, for
        a tree (top-k > 1), or when the space has no deeper step."""
        design = _designed_launches(trials)
        if not design:
            return None
        last = design[-1]
        sp = self.spec.search_space.speculative
        layout = last.params.get("layout")  # per replica: DP attention's ranks still run the MoE on its whole batch
        batch = initial_design.decode_batch(self.spec, last.params.get("max_running_requests"),
                                            layout if isinstance(layout, str) else None)
        if last.user_attrs.get("design") != "speculative probe" or last.state != TrialState.COMPLETE \
                or sp is None or sp.num_steps is None or batch > SMALL_DECODE_BATCH:
            return None
        steps = last.params.get("speculative_num_steps")
        if not isinstance(steps, int) or last.params.get("speculative_eagle_topk", 1) != 1:
            return None
        deeper = _next_above(sp.num_steps, steps)
        if deeper is None:
            return None
        step = {**last.params, "speculative_num_steps": deeper}
        if "speculative_num_draft_tokens" in step:
            step["speculative_num_draft_tokens"] = deeper + 1
        return self._with_room_for_the_draft(step, trials)

    def _slo_step(self, trials: list[FrozenTrial]) -> dict[str, Any] | None:
        """After a designed launch that ran but broke a decode-latency ceiling (ITL or TPOT): the same
        knobs at the largest ``max_running_requests`` of the space not above ``B / (1 + v)``, where ``B``
        is the launch's running batch (its cap, or the workload's concurrency when that is lower) and
        ``v`` its relative excess over the ceiling. A decode step reads the weights once for the whole
        batch, so its time grows less than in proportion to the batch: every cap above ``B / (1 + v)``
        breaks the ceiling too, and that one is the largest not ruled out (the SLO's boundary, as the
        memory boundaries are f's). On Llama-3.1-70B at TP 4 under a 25 ms p99 ITL
        (``benchmarks/scenarios/3-slo-itl-70b.yaml``) the design's boundaries, at the middle cap 144,
        measure 27 ms; the cut lands on 96, the feasible optimum. At most MAX_SLO_STEPS in a row; none
        when the SLO bounds TTFT or end-to-end latency (a smaller cap queues requests longer), under a
        rate search (it finds the rate that meets the SLO itself) or a workload mix."""
        slo = self.spec.objective.slo
        sp = self.spec.search_space.max_running_requests
        wl = self.spec.workload
        if not slo or sp is None or self.spec.workloads or wl.rate_search is not None \
                or not all(k.endswith(_DECODE_SLO) for k in slo):
            return None
        design = _designed_launches(trials)
        if not design:
            return None
        last = design[-1]
        excess = last.user_attrs.get("slo_violation")
        cap = last.params.get("max_running_requests")
        if last.state != TrialState.COMPLETE or last.user_attrs.get("slo_met") is not False or cap is None \
                or not isinstance(excess, (int, float)) or excess <= 0 \
                or last.params.get("speculative_algorithm", "none") != "none":
            return None
        if _in_a_row(design, "slo step") >= MAX_SLO_STEPS:
            return None
        batch = min(cap, min(wl.concurrency))  # in flight at most (a Poisson rate may keep fewer: a weaker bound)
        allowed = batch / (1.0 + float(excess))
        below = [c for c in sorted(sp.choices) if c <= allowed]
        new = below[-1] if below else min(sp.choices)
        if new >= cap:
            return None
        return {**last.params, "max_running_requests": new}

    def _probe_won_big(self, trials: list[FrozenTrial]) -> bool:
        done = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None and not is_extra(t)
                and t.user_attrs.get("slo_met") is not False]
        spec = [float(t.value or 0.0) for t in done if t.params.get("speculative_algorithm", "none") != "none"]
        base = [float(t.value or 0.0) for t in done if t.params.get("speculative_algorithm", "none") == "none"]
        if not spec or not base:
            return False
        s, b = max(spec, key=lambda v: self.sign * v), max(base, key=lambda v: self.sign * v)
        return self.sign * (s - b) > BIG_GAIN * abs(b)

    def _adapt(self, point: dict[str, Any], trials: list[FrozenTrial]) -> dict[str, Any]:
        params = dict(point["params"])
        best = ranked(self.study)
        won = best[0].params if best else {}
        measured_base = any(t.params.get("speculative_algorithm", "none") == "none" for t in best)
        if point["why"] != "speculative probe" and won.get("speculative_algorithm", "none") != "none" \
                and measured_base and params.get("speculative_algorithm", "none") == "none":
            # a speculative probe beat everything: the rest of the design carries its settings
            params = {**{k: v for k, v in params.items() if k not in SPEC_KEYS},
                      **{k: v for k, v in won.items() if k in SPEC_KEYS}}
        for key in ("kv_cache_dtype", "layout"):
            mine = params.get(key)
            if point["why"] == "boundary" and best and mine is not None \
                    and best[0].params.get(key, mine) != mine \
                    and any(t.params.get(key) == mine for t in best):
                # this KV cache dtype (node layout) was measured at its boundary and another one
                # leads: the remaining boundaries (graph sizes) are taken with the leader
                params[key] = best[0].params[key]
        # A slack failure at f condemns higher f only where at least as much slack is needed:
        # the same knobs (f aside) with a graph size at least as large as the failed launch's.
        return params if point["why"] == "space-filling" else self._below_slack_failures(params, trials)


__all__ = ["MAX_SLO_STEPS", "MIN_GAIN", "SearchPolicy"]
