"""benchmarks/search_efficiency.py on a tiny study: it runs, caches the exhaustive pass, and ends in JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support.benchmarks import load_harness, load_script

from autotune import space
from autotune.spec import load_study_spec
from autotune.trial import offline

ROOT = Path(__file__).resolve().parents[1]


def _tiny_study(tmp_path: Path) -> Path:
    data = {
        "name": "tiny",
        "n_trials": 10,
        "sampler": {"kind": "tpe", "seed": 0, "n_startup_trials": 3},
        "executor": {"kind": "inline"},
        "server": {"backend": "sim", "sglang_version": "0.5.9",
                   "model_path": str(ROOT / "studies" / "models" / "kimi-k2-class"), "tp_size": 8,
                   "sim": {"time_scale": 20, "seed": 0}},
        "hardware": {"gpu": "rtx-pro-6000", "num_gpus": 8, "interconnect": "pcie"},
        "search_space": {"mem_fraction_static": {"low": 0.70, "high": 0.90, "step": 0.1},
                         "cuda_graph_max_bs": {"choices": [64, 256]}},
        "workload": {"backend": "openai", "input_len": 128, "output_len": 16, "num_prompts": 16,
                     "concurrency": [8], "warmup_requests": 1},
        "objective": {"metric": "output_throughput", "direction": "maximize"},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_benchmark_prints_medians_and_reuses_its_cache(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load_script("search_efficiency", monkeypatch)
    study = _tiny_study(tmp_path)
    out = tmp_path / "out"
    argv = ["--study", str(study), "--seeds", "2", "--budget", "6", "--out", str(out)]
    assert mod.main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(lines[-1])
    assert lines[0].startswith("versions: python ")  # what the figures were taken with
    assert lines[1].startswith("tiny: ratio vs best other")
    assert summary["versions"]["optuna"] == mod.versions()["optuna"] and "versions_as_pinned" in summary
    r = summary["scenarios"]["tiny"]
    assert r["grid_size"] == 6 and summary["seeds"] == 2 and summary["n_scenarios"] == 1
    assert set(r["median_gpu_s"]) == set(mod.STRATEGIES)
    assert all(0 <= n <= 2 for n in r["found"].values())
    # a strategy that never reached the target counts with its spend (a lower bound)
    others = {k: (v if v is not None else r["median_spent_gpu_s"][k]) for k, v in r["median_gpu_s"].items()
              if k != "autotune"}
    if r["median_gpu_s"]["autotune"] is not None:
        best = min(others.values())
        assert r["best_other_found"] == (r["median_gpu_s"][r["best_other"]] is not None)
        assert r["ratio_vs_best_other"] == pytest.approx(r["median_gpu_s"]["autotune"] / best, rel=1e-2, abs=1e-3)
        assert summary["worst_ratio_vs_best_other"] == r["ratio_vs_best_other"]
    assert all(v >= 0 for v in r["median_final_regret_pct"].values())
    cache = json.loads((out / "search_efficiency_tiny.json").read_text())
    assert len(cache["results"]) >= 6

    # a second run reads every grid result from the cache: nothing is evaluated again, same figures
    def refuse(_request):
        raise AssertionError("evaluated again despite the cache")

    monkeypatch.setattr(offline, "evaluate", refuse)
    assert mod.main(argv) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    again.pop("elapsed_s"), summary.pop("elapsed_s")
    again["scenarios"]["tiny"].pop("eval_s"), r.pop("eval_s")
    assert again == summary


def test_noise_is_repeatable_per_seed_and_differs_between_repeats(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    h = load_harness("search", monkeypatch)
    path = _tiny_study(tmp_path)
    spec = load_study_spec(path)
    table = h.Table.load(spec, path, tmp_path / "out")
    cfg = space.to_config(spec, {"mem_fraction_static": 0.8, "cuda_graph_max_bs": 64}).to_dict()
    truth = table.result(cfg).value
    a, b = h.Noise(0.04, 0), h.Noise(0.04, 0)
    first = [a.measure(table, cfg).value for _ in range(3)]
    assert first == [b.measure(table, cfg).value for _ in range(3)]  # keyed: same seed, same draws
    assert len(set(first)) == 3 and all(abs(v / truth - 1) < 0.25 for v in first)
    assert h.Noise(0.0, 0).measure(table, cfg).value == truth


def test_time_to_target_needs_the_pick_to_stay_on_target(monkeypatch: pytest.MonkeyPatch) -> None:
    run = load_harness("search", monkeypatch).Run(events=[(10.0, 90.0), (20.0, 99.0), (30.0, 97.0), (40.0, 99.5)])
    assert run.to_target(98.0, 1.0) == 40.0  # on target at 20, off at 30: only the last launch counts
    assert run.to_target(96.0, 1.0) == 20.0
    run.events.append((50.0, None))
    assert run.to_target(96.0, 1.0) == float("inf")


def test_the_drivers_pick_is_what_best_would_hand_over_after_each_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lucky single run leads; its re-run during the search (a race) measures the noise, and
    from that launch on the pick is the noise-aware ranking's (``best_trial`` on the trials so
    far), not the best single run: the configuration measured twice holds the lead at first (its
    pessimistic bound is the tighter), and the truly best one takes it once its own race gives
    it a second run."""
    import optuna
    from optuna.distributions import CategoricalDistribution

    h = load_harness("search", monkeypatch)
    dist = {"a": CategoricalDistribution(["a1", "a2"]), "b": CategoricalDistribution(["b1", "b2", "b3"])}
    # truth: value = 100 x A x B, A: a1 1.00, a2 0.97; B: b1 1.00, b2 0.98, b3 0.90
    truth = {("a1", "b1"): 100.0, ("a1", "b2"): 98.0, ("a1", "b3"): 90.0,
             ("a2", "b1"): 97.0, ("a2", "b2"): 95.06, ("a2", "b3"): 87.3}
    runs = [(("a1", "b1"), 99.0, None), (("a1", "b2"), 98.5, None), (("a1", "b3"), 90.5, None),
            (("a2", "b2"), 94.0, None), (("a2", "b3"), 87.0, None), (("a2", "b1"), 104.0, None),  # lucky
            (("a2", "b1"), 93.0, 5), (("a1", "b1"), 100.0, 0)]  # the races
    study = optuna.create_study(direction="maximize")
    truth_of = {}
    for n, ((a, b), value, of) in enumerate(runs):
        attrs = {"gpu_seconds": 10.0, **({"confirm_of": of, "race": True} if of is not None else {})}
        study.add_trial(optuna.trial.create_trial(params={"a": a, "b": b}, distributions=dist, value=value,
                                                  user_attrs=attrs))
        truth_of[n] = truth[(a, b)]
    events = h.pick_timeline(study, truth_of)
    assert [s for s, _ in events] == [10.0 * i for i in range(1, 9)]
    picks = [v for _, v in events]
    assert picks[:5] == [100.0] * 5
    assert picks[5] == 97.0  # the lucky single run leads: no noise measured yet, the best run is the pick
    assert picks[6] == 97.0  # noise measured; only the lucky configuration has two runs: its bound leads
    assert picks[7] == 100.0  # (a1, b1) run twice: the estimate hands it over, not the best single run (104)



def test_study_whose_node_removes_a_searched_value_draws_every_strategy_from_the_pruned_space(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``--study`` with ``--attn-dp-size: [1, 8]`` at TP 2 (issue 35): the grid, the sweeps and the driver
    all search the space ``autotune plan`` keeps (the old code's exhaustive pass raised on DP 8, its
    driver on the designed start's DP-8 point), and the scenario says what pruning took out."""
    from autotune.spec import load_study_spec

    mod = load_script("search_efficiency", monkeypatch)
    path = _tiny_study(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["server"].update(model_path=str(ROOT / "studies" / "models" / "qwen3-32b-class"), tp_size=2)
    data["search_space"].update(mem_fraction_static={"low": 0.80, "high": 0.90, "step": 0.05},
                                flags={"--attn-dp-size": {"choices": [1, 8]}})
    path.write_text(yaml.safe_dump(data))
    assert len(list(mod.space.iter_grid(load_study_spec(path)))) == 12  # the study file's lists: DP 8 doubles it
    assert mod.main(["--study", str(path), "--seeds", "1", "--budget", "4", "--out", str(tmp_path / "out")]) == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["scenarios"]["tiny"]
    assert r["grid_size"] == 6 and len(r["removed"]) == 1
    assert r["removed"][0].startswith("removed --attn-dp-size=8: 8 divides no TP size of the space (2)")
    assert all(t.params["--attn-dp-size"] == 1 for t in load_harness("search", monkeypatch).LAST_STUDY[0].trials)  # grid+prune's, the last driver run
