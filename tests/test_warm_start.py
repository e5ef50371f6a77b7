"""Warm start: what an earlier study carries into a new one, and what it must not."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from autotune.errors import ConfigError
from autotune.spec import StudySpec, load_study_spec
from autotune.study import attrs
from autotune.study.candidates import Candidates
from autotune.study.prediction import Predictor
from autotune.study.warm_start import WHAT, WarmStart, _fixed, translate

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "studies" / "models"
CAL = {"p_gib": 131.0, "a_gib": 62.0, "kv_tokens": 500000, "graph_gib": 1.2, "source": "trial 3", "tp_size": 1,
       "mem_fraction_static": 0.85, "f_is_auto": False, "cuda_graph_max_bs": 256}


def _write(tmp_path: Path, name: str, *, version: str = "0.5.22", gpu: str = "h200", num_gpus: int = 1,
           tp: int = 1, model: str = "qwen3-32b-class", input_len: int = 512, flags: dict | None = None,
           warm: list[str] | None = None, n_trials: int = 8, speculative: bool = False) -> Path:
    data: dict[str, Any] = {
        "name": name, "n_trials": n_trials, "executor": {"kind": "inline"},
        "server": {"backend": "sim", "sglang_version": version, "model_path": str(MODELS / model), "tp_size": tp,
                   "sim": {"time_scale": 20}},
        "hardware": {"gpu": gpu, "num_gpus": num_gpus, "interconnect": "nvlink"},
        "search_space": {"mem_fraction_static": {"low": 0.80, "high": 0.92, "step": 0.02},
                         "cuda_graph_max_bs": {"choices": [64, 128, 256]},
                         "max_running_requests": {"choices": [128, 256]},
                         **({"flags": flags} if flags else {}),
                         **({"speculative": {"algorithm": {"choices": ["none", "NGRAM"]}}} if speculative else {})},
        "workload": {"backend": "openai", "input_len": input_len, "output_len": 32, "num_prompts": 48,
                     "concurrency": [32], "warmup_requests": 0},
        "objective": {"metric": "output_throughput", "direction": "maximize"},
        "search": {"confirm_top": 0},
    }
    if warm is not None:
        data["warm_start"] = warm
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _earlier(tmp_path: Path, **kw: Any) -> StudySpec:
    """An earlier study in its own storage: a calibration, three completed trials, a graph-capture
    OOM and an out-of-memory under load."""
    spec = load_study_spec(_write(tmp_path, "earlier", **kw))
    study = optuna.create_study(study_name=spec.name, storage=spec.storage_url, direction="maximize")
    study.set_user_attr(attrs.CALIBRATION, {**CAL, "tp_size": spec.server.tp_size})
    flag = {k: v.choices[0] for k, v in spec.search_space.flags.items()}

    def add(f: float, bs: int, mrr: int, value: float | None, kind: str | None = None) -> None:
        params = {"mem_fraction_static": f, "cuda_graph_max_bs": bs, "max_running_requests": mrr, **flag}
        fixed = _fixed(params, spec)
        assert fixed is not None
        state = TrialState.COMPLETE if value is not None else TrialState.FAIL
        study.add_trial(optuna.trial.create_trial(params=fixed[0], distributions=fixed[1], value=value, state=state,
                                                  user_attrs={attrs.FAILURE_KIND: kind} if kind else {}))

    add(0.84, 128, 256, 1000.0)
    add(0.88, 256, 256, 1200.0)
    add(0.82, 64, 128, 800.0)
    add(0.90, 256, 128, None, "graph_capture_oom")
    add(0.86, 128, 128, None, "runtime_oom")
    return spec


def _warm(path: Path) -> tuple[WarmStart, StudySpec, dict[str, Any]]:
    spec = load_study_spec(path)
    warm = WarmStart.load(spec)
    cands = Candidates(spec, optuna.create_study(direction="maximize"), Predictor(spec, lambda: None))
    warm.decide(cands.widened_spec())
    return warm, cands.widened_spec(), {d.what: d for d in warm.sources[0].decisions}


def test_same_node_and_model_carries_everything(tmp_path: Path) -> None:
    _earlier(tmp_path)
    warm, widened, d = _warm(_write(tmp_path, "later", version="0.5.23", warm=["earlier.yaml"]))
    assert all(x.carried for x in d.values()), d
    cal = warm.calibration()
    assert cal is not None and cal["p_gib"] == CAL["p_gib"] and "earlier" in cal["source"]
    # failures come with the study they were learnt in, and prune what they imply
    kinds = {f.kind for f in warm.failures()}
    assert kinds == {"graph_capture_oom", "runtime_oom"}
    from autotune.study.infeasible import implied_by
    hit = implied_by({"mem_fraction_static": 0.92, "cuda_graph_max_bs": 256, "max_running_requests": 128},
                     warm.failures())
    assert hit is not None and "of study earlier" in hit[1]
    # the top configurations, best first, to be queued before the search
    assert [n for _, n in warm.sources[0].top] == [1, 0, 2]
    study = optuna.create_study(direction="maximize")
    assert warm.enqueue_top(study) == 3
    first = study.get_trials(states=(TrialState.WAITING,))[0]
    assert first.system_attrs["fixed_params"]["mem_fraction_static"] == 0.88 and first.user_attrs[attrs.WARM_FROM] == "earlier trial 1"
    # every completed earlier trial in the space is the sampler's prior, never a trial of this study
    prior = warm.prior_trials(widened)
    assert len(prior) == 3 and all(ft.number < 0 for ft, _, _ in prior)
    assert any("every earlier trial" in line for line in warm.lines())


def test_another_tp_re_derives_the_calibration_and_drops_the_failures(tmp_path: Path) -> None:
    _earlier(tmp_path, num_gpus=2, tp=1)
    warm, _, d = _warm(_write(tmp_path, "later", num_gpus=2, tp=2, warm=["earlier.yaml"]))
    assert d["calibration"].carried and "TP 1 -> 2" in d["calibration"].reason
    assert not d["infeasible regions"].carried and "TP" in d["infeasible regions"].reason
    assert warm.failures() == []
    # the memory model rescales it: learnt at TP 1, applied at TP 2
    from autotune import space

    spec = load_study_spec(tmp_path / "later.yaml")
    pred = Predictor(spec, warm.calibration).predict(space.to_config(spec, {"mem_fraction_static": 0.85}))
    assert any("calibration at TP 1 rescaled to TP 2" in n for n in pred.notes)


def test_another_memory_regime_re_derives_the_calibration(tmp_path: Path) -> None:
    _earlier(tmp_path, version="0.5.13")
    warm, _, d = _warm(_write(tmp_path, "later", version="0.5.23", warm=["earlier.yaml"]))
    assert d["calibration"].carried and "memory regime A -> B" in d["calibration"].reason
    assert warm.calibration()["draft_w_gib"] == 0.0  # regime A measured A before any draft weights
    assert warm.calibration()["f_is_auto"] is False  # the automatic f is the release's own
    assert not d["infeasible regions"].carried and warm.failures() == []
    assert d["top configurations"].carried and d["sampler prior"].carried


def test_another_workload_carries_no_runtime_oom_and_no_prior(tmp_path: Path) -> None:
    _earlier(tmp_path)
    warm, widened, d = _warm(_write(tmp_path, "later", input_len=2048, warm=["earlier.yaml"]))
    assert {f.kind for f in warm.failures()} == {"graph_capture_oom"}
    assert "another workload" in d["infeasible regions"].reason
    assert d["top configurations"].carried and [n for _, n in warm.sources[0].top] == [1]  # the best one only
    assert not d["sampler prior"].carried and warm.prior_trials(widened) == []


def test_another_node_size_carries_a_thinner_prior(tmp_path: Path) -> None:
    _earlier(tmp_path, num_gpus=2)
    warm, widened, d = _warm(_write(tmp_path, "later", num_gpus=1, warm=["earlier.yaml"]))
    assert not d["calibration"].carried and not d["infeasible regions"].carried
    assert len(warm.prior_trials(widened)) == 2  # every other trial by rank: weight 1/2


def _nothing_carried(tmp_path: Path, **later: Any) -> None:
    warm, widened, d = _warm(_write(tmp_path, "later", warm=["earlier.yaml"], **later))
    assert not any(x.carried for x in d.values()), d
    assert warm.calibration() is None and warm.failures() == [] and warm.prior_trials(widened) == []
    assert warm.enqueue_top(optuna.create_study()) == 0


def test_another_model_carries_nothing(tmp_path: Path) -> None:
    _earlier(tmp_path, model="llama-3.1-70b-class", num_gpus=2, tp=2)
    _nothing_carried(tmp_path, num_gpus=2, tp=2)


def test_another_node_carries_nothing(tmp_path: Path) -> None:
    _earlier(tmp_path, gpu="h100")
    _nothing_carried(tmp_path)


def test_a_renamed_flag_follows_its_new_name_and_a_removed_one_is_dropped(tmp_path: Path) -> None:
    old = load_study_spec(_write(tmp_path, "old", version="0.5.22", model="llama-3.1-70b-class", num_gpus=2, tp=2,
                                 flags={"--expert-parallel-size": {"choices": [1, 2]},
                                        "--speculative-skip-dp-mlp-sync": {"choices": [True, False]}}))
    new = load_study_spec(_write(tmp_path, "new", version="0.5.23", model="llama-3.1-70b-class", num_gpus=2, tp=2,
                                 flags={"--ep-size": {"choices": [1, 2]}}))
    params, notes = translate({"mem_fraction_static": 0.84, "--expert-parallel-size": 2,
                               "--speculative-skip-dp-mlp-sync": True}, old, new)
    assert params == {"mem_fraction_static": 0.84, "--ep-size": 2}
    assert "--expert-parallel-size renamed --ep-size in SGLang 0.5.23" in notes
    assert any(n.startswith("--speculative-skip-dp-mlp-sync dropped: SGLang 0.5.23 has no such flag") for n in notes)


def test_a_missing_earlier_study_is_one_line_naming_the_field(tmp_path: Path) -> None:
    spec = load_study_spec(_write(tmp_path, "later", warm=["nowhere.yaml"]))
    with pytest.raises(ConfigError, match=r"^warm_start: no study file 'nowhere.yaml'") as exc:
        WarmStart.load(spec)
    assert exc.value.exit_code == 2 and "\n" not in str(exc.value)
    from autotune.cli import main

    assert main(["plan", str(tmp_path / "later.yaml")]) == 2  # the CLI: one line, exit 2
    _write(tmp_path, "never-run")  # a study file whose study was never run
    spec = load_study_spec(_write(tmp_path, "later", warm=["never-run.yaml"]))
    with pytest.raises(ConfigError, match=r"^warm_start: no study 'never-run'"):
        WarmStart.load(spec)
    spec = load_study_spec(_write(tmp_path, "itself", warm=["itself.yaml"]))
    with pytest.raises(ConfigError, match=r"^warm_start: 'itself.yaml' is this study itself"):
        WarmStart.load(spec)


@pytest.mark.parametrize("spelling", ["sqlite:///{tmp}/./itself.db", "sqlite:///{tmp}/sub/../itself.db",
                                      "{tmp}/link.db"])
def test_this_study_spelled_another_way_is_still_itself(tmp_path: Path, spelling: str) -> None:
    """The storage URLs were compared as strings: sqlite:////x/./rt.db passed for another study."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "itself.db").touch()
    (tmp_path / "link.db").symlink_to(tmp_path / "itself.db")
    data = yaml.safe_load(_write(tmp_path, "itself").read_text())
    data["storage"] = spelling.format(tmp=tmp_path)
    (tmp_path / "alias.yaml").write_text(yaml.safe_dump(data))
    spec = load_study_spec(_write(tmp_path, "itself", warm=["alias.yaml"]))
    with pytest.raises(ConfigError, match=r"^warm_start: 'alias.yaml' is this study itself"):
        WarmStart.load(spec)


def _run(path: Path) -> optuna.Study:
    from autotune.study.driver import run_study
    from autotune.study.execution.offline import OfflineExecutor

    spec = load_study_spec(path)
    run_study(spec, executor=OfflineExecutor())
    return optuna.load_study(study_name=spec.name, storage=spec.storage_url)


def test_a_warm_run_starts_from_the_earlier_winners_and_shows_its_lineage(tmp_path: Path, capsys, caplog) -> None:
    earlier = _run(_write(tmp_path, "earlier", n_trials=6))
    before = [(t.number, t.state, dict(t.user_attrs)) for t in earlier.trials]
    path = _write(tmp_path, "later", version="0.5.23", n_trials=6, warm=["earlier.yaml"])
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="autotune"):
        later = _run(path)
    # sampler: auto says its choice once, for the study it runs (not for the earlier study it reads)
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("sampler:")] == \
        ["sampler: tpe: categorical or conditional knobs (multivariate, grouped; designed start-up)"]
    # the earlier study's storage is only read
    assert [(t.number, t.state, dict(t.user_attrs)) for t in optuna.load_study(
        study_name="earlier", storage=f"sqlite:///{tmp_path / 'earlier.db'}").trials] == before
    warm = [t for t in later.trials if t.user_attrs.get(attrs.WARM_FROM)]
    assert warm and warm[0].number == 0  # baseline last: the earlier winners run first
    assert len(later.trials) == 6 + 0  # no prior trial is stored in this study
    lin = later.user_attrs[attrs.WARM_START]
    assert lin[0]["study"] == "earlier" and "top configurations" in lin[0]["carried"]

    from autotune.cli import main

    assert main(["best", str(path)]) == 0
    out = capsys.readouterr().out
    assert "built on: earlier (SGLang 0.5.22" in out and "carried calibration" in out
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert "warm start from earlier: top configurations: carried (related study" in out
    # --json says the same: each earlier study's decisions with their reasons, and the calibration carried
    assert main(["plan", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"warm_start", "removed", "space", "candidates"} and doc["candidates"]
    (src,) = doc["warm_start"]["studies"]
    assert (src["study"], src["file"], src["sglang_version"]) == ("earlier", "earlier.yaml", "0.5.22")
    assert [d["what"] for d in src["decisions"]] == list(WHAT)
    for d in src["decisions"]:  # one line of the plain output per decision, from the same data
        verdict = "carried" if d["carried"] else "not carried"
        assert f"warm start from earlier: {d['what']}: {verdict} ({d['reason']})" in out
    assert f"warm start from earlier (earlier.yaml): {src['differences']}" in out
    assert "top configurations" in src["carried"]
    assert doc["warm_start"]["calibration"] is not None and "calibration" in src["carried"]
    assert main(["plan", str(ROOT / "studies" / "demo.yaml"), "--json", "--set", "mem_fraction_static=0.9"]) == 0
    assert json.loads(capsys.readouterr().out)["warm_start"] == {"studies": [], "calibration": None}

    from autotune.results.report import build_report

    html = build_report(load_study_spec(path))
    assert "Built on (warm start)" in html and "earlier trial" in html


def test_warm_from_an_unrelated_study_runs_like_a_cold_one(tmp_path: Path) -> None:
    _run(_write(tmp_path, "other-node", gpu="h100", n_trials=5))
    cold = _run(_write(tmp_path, "cold", n_trials=6))
    warm = _run(_write(tmp_path, "warm", n_trials=6, warm=["other-node.yaml"]))
    assert [t.params for t in warm.trials] == [t.params for t in cold.trials]
    assert not any(t.user_attrs.get(attrs.WARM_FROM) for t in warm.trials)
    assert warm.user_attrs[attrs.WARM_START][0]["carried"] == []


def test_the_prior_steers_the_sampler_and_never_enters_the_study() -> None:
    from optuna.distributions import CategoricalDistribution

    from autotune.study.warm_start import PriorSampler

    dist = {"bs": CategoricalDistribution([64, 128, 256, 512])}
    prior = []
    for i in range(16):
        bs = [64, 128, 256, 512][i % 4]
        value = 100.0 if bs == 256 else 10.0
        ft = optuna.trial.create_trial(params={"bs": bs}, distributions=dist, value=value)
        ft.number = ft._trial_id = -(16 - i)
        prior.append((ft, value, 100.0))

    def asks(sampler: optuna.samplers.BaseSampler) -> list[int]:
        study = optuna.create_study(direction="maximize", sampler=sampler)
        out = []
        for _ in range(6):
            trial = study.ask()
            bs = trial.suggest_categorical("bs", [64, 128, 256, 512])
            study.tell(trial, 50.0)
            out.append(bs)
        assert len(study.trials) == 6  # the prior is the sampler's view only
        return out

    def tpe() -> optuna.samplers.TPESampler:
        return optuna.samplers.TPESampler(seed=0, n_startup_trials=4)

    warm = asks(PriorSampler(tpe(), prior))
    cold = asks(tpe())
    assert warm.count(256) >= 5 and cold.count(256) < warm.count(256)


def test_another_workload_carries_the_best_of_each_speculative_algorithm(tmp_path: Path) -> None:
    """Another workload: the earlier best with speculative decoding off and the best with it on
    (not the top three, here all without it); the same workload keeps the top three."""
    spec = load_study_spec(_write(tmp_path, "earlier", speculative=True))
    study = optuna.create_study(study_name=spec.name, storage=spec.storage_url, direction="maximize")
    for f, algo, value in ((0.88, "none", 1200.0), (0.86, "none", 1150.0), (0.84, "none", 1100.0),
                           (0.86, "NGRAM", 900.0), (0.88, "NGRAM", 850.0)):
        fixed = _fixed({"mem_fraction_static": f, "cuda_graph_max_bs": 128, "max_running_requests": 256,
                        "speculative_algorithm": algo}, spec)
        assert fixed is not None
        study.add_trial(optuna.trial.create_trial(params=fixed[0], distributions=fixed[1], value=value))
    warm, _, d = _warm(_write(tmp_path, "later", input_len=2048, speculative=True, warm=["earlier.yaml"]))
    top = warm.sources[0].top
    assert [n for _, n in top] == [0, 3], top  # the best without, then the best with NGRAM
    assert top[1][0]["speculative_algorithm"] == "NGRAM" and top[1][0]["mem_fraction_static"] == 0.86
    assert "each speculative algorithm" in d["top configurations"].reason
    same, _, _ = _warm(_write(tmp_path, "again", version="0.5.23", speculative=True, warm=["earlier.yaml"]))
    assert [n for _, n in same.sources[0].top] == [0, 1, 2]
