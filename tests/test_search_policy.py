"""The designed start and the adaptive stages (autotune.study.search.initial_design, policy)."""

from __future__ import annotations

from pathlib import Path

import optuna
from support.demo import demo_data, demo_spec

from autotune import space
from autotune.study.driver import run_study
from autotune.study.execution.offline import OfflineExecutor
from autotune.study.observer import budget_used
from autotune.study.search import initial_design
from autotune.study.search.samplers import choose_sampler


def _spec(tmp_path: Path, **over):
    data = demo_data()
    data["workload"].update({"num_prompts": 64, "output_len": 32})
    data.pop("sampler")
    data.update({"n_trials": 16, "search": {"confirm_top": 0}, **over})
    return demo_spec(tmp_path, data)


def test_f_interval_bisects_both_edges_of_a_feasible_run():
    fs = [round(0.5 + 0.01 * i, 2) for i in range(46)]
    calls: list[float] = []

    def feasible(f: float) -> bool:
        calls.append(f)
        return 0.78 <= f <= 0.93

    lo, hi = initial_design.f_interval(fs, feasible)
    assert (fs[lo], fs[hi]) == (0.78, 0.93)
    assert len(calls) <= 20  # coarse-to-fine anchor and bisection, not a scan of 46 values
    assert initial_design.f_interval(fs, lambda f: False) is None
    # a narrow window away from the middle is still found
    lo, hi = initial_design.f_interval(fs, lambda f: 0.90 <= f <= 0.91)
    assert (fs[lo], fs[hi]) == (0.90, 0.91)


def test_design_stays_inside_the_predicted_feasible_interval(tmp_path: Path):
    spec = _spec(tmp_path)

    def predict(params):  # a stand-in memory model: feasible for 0.80 <= f <= 0.92, less with a draft model
        top = 0.90 if params.get("speculative_algorithm", "none") != "none" else 0.92
        ok = 0.80 <= params["mem_fraction_static"] <= top
        return {"verdict": "fits" if ok else "kv_oom", "should_prune": not ok}

    baseline = {"mem_fraction_static": 0.85, "cuda_graph_max_bs": 512, "custom_allreduce": True,
                "speculative_algorithm": "none"}
    points = initial_design.build(spec, baseline, predict, 6, seed=0)
    assert len(points) == 6
    whys = [p.why for p in points]
    assert whys[:2] == ["speculative probe", "boundary"] and "space-filling" in whys  # the prior tested first
    assert points[1].params["mem_fraction_static"] == 0.92  # the largest KV pool that fits
    probe = next(p for p in points if p.why == "speculative probe")
    assert probe.params["speculative_algorithm"] == "EAGLE3" and probe.params["mem_fraction_static"] <= 0.90
    assert all(predict(p.params)["verdict"] == "fits" for p in points)
    assert len({str(sorted(p.params.items())) for p in points}) == len(points)


def test_designed_points_set_the_flags_and_env_the_space_searches(tmp_path: Path):
    # The memory model judges a designed point as launched: a searched flag left for the sampler to
    # fill in (DP attention, say) would change what fits after the verdict.
    spec = _spec(tmp_path)
    seen: list[dict] = []

    def predict(params):
        seen.append(params)
        ok = 0.80 <= params["mem_fraction_static"] <= 0.92
        return {"verdict": "fits" if ok else "kv_oom", "should_prune": not ok}

    baseline = {"mem_fraction_static": 0.83, "cuda_graph_max_bs": 512, "--attn-dp-size": 1,
                "--moe-runner-backend": "auto", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "0", "speculative_algorithm": "none"}
    points = initial_design.build(spec, baseline, predict, 8, seed=0)
    names = {"--attn-dp-size", "--moe-runner-backend", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"}
    assert all(names <= set(p.params) for p in points) and all(names <= set(p) for p in seen)
    for p in points:
        if p.why == "boundary" and p.params["--attn-dp-size"] == 1:  # (DP attention 8 has its own boundary)
            assert {k: p.params[k] for k in names} == {k: baseline[k] for k in names}


def test_a_memory_moving_flag_gets_a_boundary_per_value_at_its_own_graph_size(tmp_path: Path):
    """DP attention 8 moves the feasible window (weights whole per attention-TP group, a KV pool per
    rank, SGLang's padding reserve) and its graphs are per rank: its boundary is designed at the
    graph size covering 256 / 8 streams, inside its own window. A variable whose window is the
    baseline's own (the PCIe-IPC buffer) gets none; the demo's optimum sat in such a DP-8 window
    (f 0.91-0.93, graph bs 64) that sampling alone reached in 6 of 10 seeds."""
    spec = _spec(tmp_path)
    spec = spec.model_copy(update={"workload": spec.workload.model_copy(update={"concurrency": [256]})})

    def predict(params):
        dp8 = params["--attn-dp-size"] == 8
        if dp8:  # a narrow window, and none above graph bs 128
            ok = params["cuda_graph_max_bs"] <= 128 and 0.90 <= params["mem_fraction_static"] <= 0.92
        else:
            ok = 0.80 <= params["mem_fraction_static"] <= 0.90
        return {"verdict": "fits" if ok else "kv_oom", "should_prune": not ok}

    baseline = {"mem_fraction_static": 0.83, "cuda_graph_max_bs": 512, "--attn-dp-size": 1,
                "--moe-runner-backend": "auto", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "0", "speculative_algorithm": "none"}
    points = initial_design.build(spec, baseline, predict, 8, seed=0)
    bounds = [p.params for p in points if p.why == "boundary"]
    dp8 = [b for b in bounds if b["--attn-dp-size"] == 8]
    assert len(dp8) == 1 and (dp8[0]["cuda_graph_max_bs"], dp8[0]["mem_fraction_static"]) == (64, 0.92)
    assert all(b["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "0" and b["--moe-runner-backend"] == "auto" for b in bounds)
    assert all(predict(p.params)["verdict"] == "fits" for p in points)


def test_auto_sampler_is_chosen_by_the_space(tmp_path: Path):
    spec = _spec(tmp_path)
    sampler, why = choose_sampler(spec)
    assert isinstance(sampler, optuna.samplers.TPESampler) and why.startswith("tpe")
    small = _spec(tmp_path, search_space={"mem_fraction_static": {"low": 0.8, "high": 0.9, "step": 0.05},
                                          "cuda_graph_max_bs": {"choices": [64, 128]}})
    sampler, why = choose_sampler(small)
    assert why.startswith("grid")


def test_adaptive_stages_on_the_driver(tmp_path: Path):
    spec = _spec(tmp_path)
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    trials = study.trials
    assert budget_used(study) == 16
    design = [t for t in trials if t.user_attrs.get("stage") == "design"]
    steps = [t for t in design if t.user_attrs.get("design") == "boundary step"]
    # repeats of launched points are skipped; a boundary step is added after a boundary ran out of slack
    assert 0 < len(design) - len(steps) <= initial_design.design_size(16, None)
    for t in steps:
        before = max(t2 for t2 in design if t2.number < t.number)
        assert before.state == optuna.trial.TrialState.FAIL
        assert t.params["mem_fraction_static"] < before.params["mem_fraction_static"]
    assert any(t.params.get("speculative_algorithm") == "EAGLE3" for t in design)  # the prior is tested early
    stages = [t.user_attrs.get("stage") for t in trials if t.user_attrs.get("stage") not in (None, "design")]
    assert stages and set(stages) <= {"base", "speculative", "joint"}
    # stages are never re-entered once left
    order = [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s]
    assert len(order) == len(set(order))
    assert all(t.params.get("speculative_algorithm") == "none" for t in trials if t.user_attrs.get("stage") == "base")
    # a designed point never repeats an f that already ran out of slack with the same knobs and a
    # graph size no larger (the point needs at least that slack): it moves below it
    slack_kinds = ("runtime_oom", "graph_capture_oom")

    def others(params):
        return {k: v for k, v in params.items() if k not in ("mem_fraction_static", "cuda_graph_max_bs")}

    for t in design:
        earlier = [t2.params["mem_fraction_static"] for t2 in trials
                   if t2.number < t.number and t2.user_attrs.get("failure_kind") in slack_kinds
                   and others(t2.params) == others(t.params)
                   and t.params.get("cuda_graph_max_bs", 0) >= t2.params.get("cuda_graph_max_bs", 0)]
        if earlier and t.user_attrs.get("design") != "space-filling":
            assert t.params["mem_fraction_static"] < min(earlier)


def test_the_baseline_runs_last_beside_the_confirmation_unless_asked_first(tmp_path: Path):
    (tmp_path / "last").mkdir()
    spec = _spec(tmp_path / "last", n_trials=5, search={"confirm_top": 1, "repeats": 1})
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    search = [t for t in study.trials if t.user_attrs.get("confirm_of") is None]
    assert budget_used(study) == 5 and len(search) == 5
    base = [t for t in search if t.user_attrs.get("baseline")]
    assert [t.number for t in base] == [search[-1].number]  # the search's last trial, not its first
    assert search[0].user_attrs.get("stage") == "design"  # the first launch is one that can win
    assert any(t.user_attrs.get("confirm_of") == base[0].number for t in study.trials)  # re-run with the winner
    (tmp_path / "first").mkdir()
    spec = _spec(tmp_path / "first", n_trials=3, search={"confirm_top": 0, "baseline": "first"})
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    assert study.trials[0].user_attrs.get("baseline") and len(study.trials) == 3


def test_the_speculative_probe_starts_from_sglangs_own_settings_for_the_architecture(tmp_path: Path):
    spec = _spec(tmp_path)  # EAGLE3, steps 1-4, top-k 1
    # SGLang's auto_choose_speculative_params: (3, 1, 4) for DeepSeek-V3-class, (5, 4, 8) for Llama
    probe = initial_design._spec_probe(spec, "EAGLE3", "DeepseekV3ForCausalLM")
    assert probe == {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
                     "speculative_num_draft_tokens": 4}
    probe = initial_design._spec_probe(spec, "EAGLE3", "LlamaForCausalLM")  # snapped: 4 steps, top-k 1 only
    assert probe["speculative_num_steps"] == 4 and probe["speculative_eagle_topk"] == 1
    assert probe["speculative_num_draft_tokens"] == 5


def test_a_speculative_launch_does_not_calibrate_the_memory_model(tmp_path: Path):
    spec = _spec(tmp_path, n_trials=4)
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    first = study.trials[0]
    assert first.params.get("speculative_algorithm") == "EAGLE3"  # the design's probe launches first
    cal = study.user_attrs["calibration"]
    source = study.trials[int(cal["source"].split()[-1])]
    assert source.params.get("speculative_algorithm") == "none" and source.number > first.number
    # calibrated from the target's lines, the next candidates are not all condemned
    assert sum(t.state.name == "COMPLETE" for t in study.trials) >= 3


def test_boundaries_put_the_largest_kv_pool_first_and_slack_failures_condemn_only_larger_graphs(tmp_path: Path):
    from autotune.study.search.policy import _needs_as_much_slack

    spec = _spec(tmp_path)  # demo workload: 256 x (512 + 32) live tokens

    def predict(params):  # a smaller graph leaves more of f to the KV pool; feasible up to 0.92
        ok = 0.80 <= params["mem_fraction_static"] <= 0.92
        tokens = int(params["mem_fraction_static"] * 100_000) - params.get("cuda_graph_max_bs", 0) * 100
        return {"verdict": "fits" if ok else "kv_oom", "should_prune": not ok, "kv_tokens": tokens}

    baseline = {"mem_fraction_static": 0.85, "cuda_graph_max_bs": 512, "custom_allreduce": True,
                "speculative_algorithm": "none"}
    points = initial_design.build(spec, baseline, predict, 4, seed=0)
    bounds = [p.params["cuda_graph_max_bs"] for p in points if p.why == "boundary"]
    # demand not met by any pool: the smallest graph (largest pool) first, then by pool
    assert bounds[0] == 64 and bounds == sorted(bounds) and len(bounds) >= 2
    failed = {"mem_fraction_static": 0.9, "cuda_graph_max_bs": 128, "speculative_algorithm": "none"}
    assert _needs_as_much_slack({**failed, "cuda_graph_max_bs": 256}, failed)
    assert not _needs_as_much_slack({**failed, "cuda_graph_max_bs": 64}, failed)
    assert not _needs_as_much_slack({**failed, "speculative_algorithm": "EAGLE3"}, failed)


def test_a_calibration_learnt_before_the_baseline_does_not_move_it(tmp_path: Path):
    from autotune.study.candidates import Candidates
    from autotune.study.prediction import Predictor

    spec = _spec(tmp_path)
    study = optuna.create_study(direction="maximize")

    def fresh() -> Candidates:
        return Candidates(spec, study, Predictor(spec, lambda: study.user_attrs.get("calibration")))

    before = fresh().baseline_params()
    stored = dict(study.user_attrs["baseline_resolved"])
    # a launch calibrated the model since: SGLang's automatic values come out otherwise now
    later = fresh()
    later._resolved_baseline = lambda: {**stored, "max_running_requests": 4096}  # type: ignore[method-assign]
    assert later.baseline_params() == before  # the space is widened once, by the values at the start
    assert later.widened_spec().search_space == fresh().widened_spec().search_space


def test_the_designed_graph_size_covers_the_decode_batch(tmp_path: Path):
    spec = _spec(tmp_path)  # concurrency 256, one replica
    assert initial_design.graph_size_for(spec, [64, 128, 256, 512]) == 256
    assert initial_design.graph_size_for(spec, [64, 128, 256, 512], 144) == 256
    assert initial_design.graph_size_for(spec, [64, 128, 256, 512], 100) == 128
    assert initial_design.graph_size_for(spec, [16, 32, 64]) == 64  # none covers it: the largest
    dp = _spec(tmp_path, server={**spec.server.model_dump(mode="json", exclude_none=True), "dp_size": 8,
                                 "tp_size": 1})
    assert initial_design.graph_size_for(dp, [16, 32, 64, 128]) == 32  # 256 / 8 replicas


def test_the_baseline_and_references_are_never_stopped_early():
    """Run last, SGLang's defaults are usually worse than what the search found: the pruner would
    cut them short and `best` would have no baseline to measure the gain against."""
    from types import SimpleNamespace

    from autotune.study.driver import StudyDriver

    def trial(**attrs):
        return SimpleNamespace(user_attrs=attrs, report=lambda v, s: None, should_prune=lambda: True)

    live = {1: trial(baseline=True), 2: trial(reference="seed-0.88"), 3: trial()}
    fake = SimpleNamespace(_live=live, spec=SimpleNamespace(has_slo=False))
    assert StudyDriver._reporter(fake, 1) is None and StudyDriver._reporter(fake, 2) is None
    report = StudyDriver._reporter(fake, 3)
    assert report is not None and report(1, 10.0) is False  # a search trial can still be stopped


def test_a_searched_layout_gets_a_boundary_per_layout_with_its_replicas_graph_size(tmp_path: Path):
    """The layout moves the whole memory picture and the replica's decode batch: each layout of
    the space is launched at its own largest KV pool, with the graph size that covers its
    replica's batch (256 streams / dp), pools compared server-wide; for throughput the most
    replicas first; a layout whose pool cannot hold the live tokens is left to the sampler."""
    spec = _spec(tmp_path, search_space={"layout": {"choices": ["tp8", "tp4-dp2", "tp2-dp4", "tp1-dp8"]},
                                         "mem_fraction_static": {"low": 0.80, "high": 0.94, "step": 0.02},
                                         "cuda_graph_max_bs": {"choices": [32, 64, 128, 256]}})
    tops = {"tp8": 0.92, "tp4-dp2": 0.90, "tp2-dp4": 0.86, "tp1-dp8": 0.80}

    def predict(params):  # fewer GPUs per replica: more weights per GPU, a lower highest-fitting f
        ok = params["mem_fraction_static"] <= tops[params["layout"]]
        dp = int(params["layout"].split("dp")[1]) if "dp" in params["layout"] else 1
        server = 100_000 if dp == 8 else 400_000  # the demo's 256 x 544 live tokens: 139,264
        return {"verdict": "fits" if ok else "kv_oom", "should_prune": not ok,
                "kv_tokens": server // dp, "server_kv_tokens": server}

    baseline = {"layout": "tp8", "mem_fraction_static": 0.85, "cuda_graph_max_bs": 256, "custom_allreduce": True}
    points = initial_design.build(spec, baseline, predict, 5, seed=0)
    bounds = [(p.params["layout"], p.params["cuda_graph_max_bs"], p.params["mem_fraction_static"])
              for p in points if p.why == "boundary"]
    assert bounds[:3] == [("tp2-dp4", 64, 0.86), ("tp4-dp2", 128, 0.9), ("tp8", 256, 0.92)]
    assert all(lay != "tp1-dp8" for lay, _, _ in bounds)
    assert all(predict(p.params)["verdict"] == "fits" for p in points)


def _policy(spec, predict):
    """A SearchPolicy on an in-memory study, past its designed start, judged by the stand-in ``predict``."""
    from types import SimpleNamespace

    from autotune.study.search.policy import SearchPolicy

    study = optuna.create_study(direction="maximize")
    study.set_user_attr("design_points", [])  # the designed start is done (or was empty)
    profile = SimpleNamespace(architecture="DeepseekV3ForCausalLM")  # SGLang's own choice: 3 steps, top-k 1
    cands = SimpleNamespace(widened_spec=lambda: spec, predictor=SimpleNamespace(profiles=lambda: [profile]))
    policy = SearchPolicy(spec, study, cands)  # type: ignore[arg-type]
    policy._predict = predict  # type: ignore[method-assign]
    return policy, study


def _told(study, spec, params, state, value=None, **attrs):
    """One finished trial of ``params`` (enqueued, asked and told as the driver does)."""
    study.enqueue_trial(params, user_attrs=attrs)
    trial = study.ask()
    space.suggest(trial, spec)
    study.tell(trial, value if state == optuna.trial.TrialState.COMPLETE else None, state=state)


BASE = {"mem_fraction_static": 0.93, "cuda_graph_max_bs": 64, "custom_allreduce": False, "--attn-dp-size": 8,
        "--moe-runner-backend": "auto", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "0", "speculative_algorithm": "none"}


def _fits_up_to(top_base: float, top_draft: float):
    """A stand-in memory model: feasible up to ``top_base`` without a draft model, ``top_draft`` with one."""
    def predict(params):
        speculative = params.get("speculative_algorithm", "none") != "none"
        ok = params["mem_fraction_static"] <= (top_draft if speculative else top_base) + 1e-9
        return {"verdict": "fits" if ok else "kv_oom", "should_prune": not ok}
    return predict


def test_a_speculative_setting_on_a_base_at_its_memory_edge_gets_room_for_its_draft(tmp_path: Path):
    """The best base sits at the largest f that fits without a draft model (0.93); with one, the
    model says 0.90 at most. Each speculative setting is placed at 0.90, launches, and counts as
    tried on that base. Taken at 0.93, every one was pruned before launch and the speculative stage
    ended without a launch (the seed node at concurrency 16: 7 of 20 seeds never launched EAGLE3)."""
    spec = _spec(tmp_path)  # EAGLE3, steps 1-4, top-k 1: four speculative settings
    predict = _fits_up_to(0.93, 0.90)
    policy, study = _policy(spec, predict)
    C = optuna.trial.TrialState.COMPLETE
    _told(study, spec, BASE, C, 100.0, stage="design", design="boundary")
    for f in (0.91, 0.92, 0.90):  # the base stage stops improving: the speculative stage is next
        _told(study, spec, {**BASE, "mem_fraction_static": f}, C, 95.0, stage="base")
    placed = []
    for i in range(4):
        assert policy.before_ask(budget_used(study)) == "speculative"
        trial = study.ask()  # the enqueued configuration
        params = space.suggest(trial, spec)
        assert params["speculative_algorithm"] == "EAGLE3" and not predict(params)["should_prune"]
        assert params["mem_fraction_static"] == 0.90  # the largest f at which the draft fits
        assert {k: v for k, v in params.items() if k != "mem_fraction_static" and not k.startswith("speculative")} \
            == {k: v for k, v in BASE.items() if k not in ("mem_fraction_static", "speculative_algorithm")}
        placed.append(params["speculative_num_steps"])
        study.tell(trial, 101.0 + i)  # each a gain: the stage goes on
    assert sorted(placed) == [1, 2, 3, 4]  # each setting once: a lowered f still counts as this base's
    assert policy.before_ask(budget_used(study)) == "joint"


def test_a_speculative_setting_stays_below_an_f_that_ran_out_of_slack(tmp_path: Path):
    """The memory model lets the draft in at 0.92, but a launch of the same setting ran out of
    memory there: the next one of that setting goes a step below it."""
    from autotune.study.search.policy import SearchPolicy

    spec = _spec(tmp_path)
    policy, study = _policy(spec, _fits_up_to(0.93, 0.92))
    spec_params = {**BASE, "speculative_algorithm": "EAGLE3", "speculative_num_steps": 2, "speculative_eagle_topk": 1}
    _told(study, spec, {**spec_params, "mem_fraction_static": 0.92}, optuna.trial.TrialState.FAIL,
          failure_kind="runtime_oom")
    placed = SearchPolicy._with_room_for_the_draft(policy, spec_params, study.trials)
    assert placed["mem_fraction_static"] == 0.91


def test_pruned_trials_count_towards_the_base_stages_share_of_the_budget(tmp_path: Path):
    """``stage1_fraction`` (0.6 of 16 trials: 10) caps the designed start and the base stage together,
    and a trial pruned before launch spends the budget as a launch does. Counted in launches only, a
    base stage whose sampler kept drawing predicted OOMs (DP attention 8's narrow window on the seed
    node) took the whole budget before any speculative setting ran (3 of 20 seeds at concurrency 16)."""
    spec = _spec(tmp_path)
    policy, study = _policy(spec, _fits_up_to(0.93, 0.90))
    _told(study, spec, BASE, optuna.trial.TrialState.COMPLETE, 100.0, stage="design", design="boundary")
    for f in (0.60, 0.62, 0.64, 0.66, 0.68, 0.70, 0.72, 0.74):
        _told(study, spec, {**BASE, "mem_fraction_static": f}, optuna.trial.TrialState.PRUNED, stage="base")
    assert budget_used(study) == 9 and policy.before_ask(9) == "base"  # 9 of 10: the base stage goes on
    trial = study.ask()
    space.suggest(trial, spec)
    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    assert budget_used(study) == 10 and policy.before_ask(10) == "speculative"


def test_the_speculative_walk_starts_from_sglangs_own_settings_and_climbs_from_the_best_measured(tmp_path: Path):
    """On a base where no speculative setting ran yet, the first is the one SGLang picks for the
    architecture (3 steps, top-k 1 on DeepSeek-V3 class); then the nearest untried one to the best
    speculative setting measured there, even while the base configuration itself stays the best."""
    spec = _spec(tmp_path)
    policy, study = _policy(spec, _fits_up_to(0.93, 0.93))
    C = optuna.trial.TrialState.COMPLETE
    _told(study, spec, BASE, C, 100.0, stage="design", design="boundary")
    for f in (0.91, 0.92, 0.90):
        _told(study, spec, {**BASE, "mem_fraction_static": f}, C, 95.0, stage="base")

    def next_steps() -> int:
        assert policy.before_ask(budget_used(study)) == "speculative"
        trial = study.ask()
        steps = space.suggest(trial, spec)["speculative_num_steps"]
        study.tell(trial, {1: 90.0, 2: 97.0, 3: 95.0, 4: 93.0}[steps])  # all below the base's 100
        return int(steps)

    assert next_steps() == 3
    second = next_steps()
    assert second in (2, 4)
    assert next_steps() == (1 if second == 2 else 2)  # next to 2 steps (97), or to 3 (95) when 4 did worse


def test_a_speculative_probe_that_was_not_measured_is_taken_again_on_the_best_base(tmp_path: Path):
    """The designed probe ran out of memory at the baseline's layout (DP attention 1): once the design's
    boundaries are measured it is taken again, with the same speculative settings, on the best base
    (DP attention 8) at an f where its draft fits, before the space-filling points; only once."""
    spec = _spec(tmp_path)
    predict = _fits_up_to(0.93, 0.90)
    policy, study = _policy(spec, predict)
    F, C = optuna.trial.TrialState.FAIL, optuna.trial.TrialState.COMPLETE
    probe = {**BASE, "--attn-dp-size": 1, "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
             "speculative_eagle_topk": 1}
    filling = {**BASE, "mem_fraction_static": 0.80, "cuda_graph_max_bs": 128}
    study.set_user_attr("design_points", [{"params": probe, "why": "speculative probe"},
                                          {"params": {**BASE, "--attn-dp-size": 1}, "why": "boundary"},
                                          {"params": BASE, "why": "boundary"},
                                          {"params": filling, "why": "space-filling"}])
    _told(study, spec, probe, F, stage="design", design="speculative probe", failure_kind="runtime_oom")
    _told(study, spec, {**BASE, "--attn-dp-size": 1}, C, 115.0, stage="design", design="boundary")
    study.set_user_attr("design_used", 2)
    assert policy.before_ask(budget_used(study)) == "design"  # the last boundary first: no retake yet
    trial = study.ask()
    assert space.suggest(trial, spec)["--attn-dp-size"] == 8 and trial.user_attrs["design"] == "boundary"
    study.tell(trial, 184.0)
    assert policy.before_ask(budget_used(study)) == "design"
    trial = study.ask()
    params = space.suggest(trial, spec)
    assert trial.user_attrs["design"] == "speculative probe"
    assert {k: params[k] for k in ("speculative_algorithm", "speculative_num_steps", "--attn-dp-size")} \
        == {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "--attn-dp-size": 8}
    assert params["mem_fraction_static"] == 0.90 and not predict(params)["should_prune"]
    study.tell(trial, state=F)  # failed again: not a third time
    assert policy.before_ask(budget_used(study)) == "design"
    trial = study.ask()
    assert trial.user_attrs["design"] == "space-filling"


def test_a_measured_speculative_probe_is_not_taken_again(tmp_path: Path):
    spec = _spec(tmp_path)
    policy, study = _policy(spec, _fits_up_to(0.93, 0.90))
    C = optuna.trial.TrialState.COMPLETE
    probe = {**BASE, "--attn-dp-size": 1, "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
             "speculative_eagle_topk": 1}
    _told(study, spec, probe, C, 90.0, stage="design", design="speculative probe")
    _told(study, spec, BASE, C, 184.0, stage="design", design="boundary")
    assert policy._probe_retake(study.trials, []) is None


def _probe_then_boundary(tmp_path: Path, concurrency: int, steps: int = 3):
    """A policy whose design is a speculative probe then the base's boundary, the probe launched."""
    data = demo_data()
    data["workload"].update({"num_prompts": 64, "output_len": 32, "concurrency": [concurrency]})
    data.pop("sampler")
    data.update({"n_trials": 16, "search": {"confirm_top": 0}})
    spec = demo_spec(tmp_path, data)
    predict = _fits_up_to(0.93, 0.90)
    policy, study = _policy(spec, predict)
    probe = {**BASE, "mem_fraction_static": 0.90, "speculative_algorithm": "EAGLE3", "speculative_num_steps": steps,
             "speculative_eagle_topk": 1}
    study.set_user_attr("design_points", [{"params": probe, "why": "speculative probe"},
                                          {"params": BASE, "why": "boundary"}])
    study.set_user_attr("design_used", 1)
    return spec, policy, study, probe, predict


def test_at_a_small_decode_batch_a_measured_probe_is_followed_by_its_chain_one_step_deeper(tmp_path: Path):
    """Concurrency 16 (every published speculative measurement at a bounded concurrency up to 64
    gains): after the probe at SGLang's 3 steps, the next designed launch is 4 steps, top-k 1, on the
    same base knobs where its draft fits; then the base's boundary, and no second step."""
    spec, policy, study, probe, predict = _probe_then_boundary(tmp_path, 16)
    C = optuna.trial.TrialState.COMPLETE
    _told(study, spec, probe, C, 150.0, stage="design", design="speculative probe")
    assert policy.before_ask(budget_used(study)) == "design"
    trial = study.ask()
    params = space.suggest(trial, spec)
    assert trial.user_attrs["design"] == "speculative step"
    assert params["speculative_num_steps"] == 4 and params["speculative_eagle_topk"] == 1
    assert params.get("speculative_num_draft_tokens", 5) == 5  # a chain: steps + 1
    same = ("speculative_num_steps", "speculative_num_draft_tokens")
    assert {k: v for k, v in params.items() if k not in same} == {k: v for k, v in probe.items() if k not in same}
    assert not predict(params)["should_prune"]
    study.tell(trial, 160.0)
    assert policy.before_ask(budget_used(study)) == "design"
    trial = study.ask()
    assert trial.user_attrs["design"] == "boundary"
    assert space.suggest(trial, spec)["speculative_algorithm"] == "none"


def test_no_speculative_step_at_a_large_batch_after_a_failed_probe_or_at_the_deepest_chain(tmp_path: Path):
    """Concurrency 256 (published losses are unbounded loads): the boundary follows the probe, as
    before. At 16, a probe that failed says nothing about depth, and a probe at the space's deepest
    chain (4 steps) has no step; the boundary follows both."""
    C, F = optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL
    for concurrency, state, steps in ((256, C, 3), (16, F, 3), (16, C, 4)):
        sub = tmp_path / f"c{concurrency}-{state.name}-{steps}"
        sub.mkdir()
        spec, policy, study, probe, _ = _probe_then_boundary(sub, concurrency, steps)
        _told(study, spec, probe, state, 150.0, stage="design", design="speculative probe",
              **({"failure_kind": "runtime_oom"} if state == F else {}))
        assert policy.before_ask(budget_used(study)) == "design"
        assert study.ask().user_attrs["design"] == "boundary", (concurrency, state, steps)


def _slo_spec(tmp_path: Path, slo: dict[str, float], concurrency: int = 256):
    data = demo_data()
    data["search_space"].pop("speculative")
    data["search_space"]["max_running_requests"] = {"choices": [48, 96, 144, 192, 256]}
    data["workload"]["concurrency"] = [concurrency]
    data.update({"n_trials": 16, "search": {"confirm_top": 0}, "objective": {"metric": "output_throughput", "slo": slo}})
    data.pop("sampler")
    return demo_spec(tmp_path, data)


SLO_BASE = {k: v for k, v in BASE.items() if k != "speculative_algorithm"}


def test_a_designed_launch_that_broke_a_decode_latency_slo_is_followed_by_the_cap_it_allows(tmp_path: Path):
    """The boundary at cap 144 measured p99 ITL 27.1 ms against a 25 ms ceiling (8.4 % over): every cap
    above 144 / 1.084 = 133 breaks it too (a decode step grows less than in proportion to the batch), so
    the next launch is the same knobs at 96, before the design's next point; at 48 after a second miss,
    then no more in a row."""
    spec = _slo_spec(tmp_path, {"p99_itl_ms": 25})
    policy, study = _policy(spec, _fits_up_to(0.95, 0.95))
    nxt = {**SLO_BASE, "cuda_graph_max_bs": 128, "max_running_requests": 144}
    study.set_user_attr("design_points", [{"params": {**SLO_BASE, "max_running_requests": 144}, "why": "boundary"},
                                          {"params": nxt, "why": "boundary"}])
    study.set_user_attr("design_used", 1)
    C = optuna.trial.TrialState.COMPLETE
    _told(study, spec, {**SLO_BASE, "max_running_requests": 144}, C, 1680.0, stage="design", design="boundary",
          slo_violation=0.084, slo_met=False)
    caps = []
    for excess in (0.2, 0.3):
        assert policy.before_ask(budget_used(study)) == "design"
        trial = study.ask()
        params = space.suggest(trial, spec)
        assert trial.user_attrs["design"] == "slo step"
        assert {k: v for k, v in params.items() if k != "max_running_requests"} == SLO_BASE
        caps.append(params["max_running_requests"])
        trial.set_user_attr("slo_violation", excess)
        trial.set_user_attr("slo_met", False)
        study.tell(trial, 1500.0)
    assert caps == [96, 48]
    assert policy.before_ask(budget_used(study)) == "design"  # MAX_SLO_STEPS in a row: the design goes on
    trial = study.ask()
    assert trial.user_attrs["design"] == "boundary" and space.suggest(trial, spec)["cuda_graph_max_bs"] == 128


def test_no_slo_step_where_a_smaller_cap_cannot_help_or_the_slo_was_met(tmp_path: Path):
    """A TTFT ceiling (a smaller cap queues requests longer), a met SLO, or a concurrency already below
    every cap the space holds: the design goes on as planned."""
    C = optuna.trial.TrialState.COMPLETE
    for slo, conc, attrs in (({"p99_ttft_ms": 500}, 256, {"slo_violation": 0.5, "slo_met": False}),
                             ({"p99_itl_ms": 25}, 256, {"slo_violation": -0.1, "slo_met": True}),
                             ({"median_tpot_ms": 25}, 40, {"slo_violation": 0.1, "slo_met": False})):
        spec = _slo_spec(tmp_path, slo, concurrency=conc)
        policy, study = _policy(spec, _fits_up_to(0.95, 0.95))
        _told(study, spec, {**SLO_BASE, "max_running_requests": 48}, C, 1000.0, stage="design", design="boundary",
              **attrs)
        assert policy._slo_step(study.trials) is None, slo
