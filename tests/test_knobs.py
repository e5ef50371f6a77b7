"""The knob catalogue, dead knobs, SGLang's conflict rules, and any flag or env var searched by name."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from support.demo import demo_data, demo_spec

from autotune.cli import main
from autotune.errors import ConfigError
from autotune.sglang.flags.argv import render_argv
from autotune.sglang.hardware.gpus import get_gpu
from autotune.sglang.knobs.catalogue import CATALOGUE, describe, lookup, releases
from autotune.sglang.knobs.config import ServerConfig, SpeculativeConfig
from autotune.sglang.knobs.rules import resolve
from autotune.sglang.models.profile import load_model_profile
from autotune.space_prune import prune_space
from autotune.spec import parse_study
from autotune.study.driver import run_study
from autotune.study.execution.offline import OfflineExecutor

ROOT = Path(__file__).resolve().parents[1]
KIMI = ROOT / "studies" / "models" / "kimi-k2-class"
QWEN = ROOT / "studies" / "models" / "qwen3-32b-class"

ISSUE_KNOBS = (
    "mem_fraction_static", "cuda_graph_max_bs", "custom_allreduce", "speculative", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE",
    "--attn-dp-size", "--ep-size", "--moe-a2a-backend", "--moe-runner-backend", "--fp8-gemm-backend",
    "attention_backend", "--disable-overlap-schedule", "--num-continuous-decode-steps", "--schedule-conservativeness",
    "--enable-mixed-chunk", "--schedule-policy", "chunked_prefill_size", "max_running_requests",
    "--enable-torch-compile", "--torch-compile-max-bs", "NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE",
)


def _spec(data: dict) -> object:
    base = {"name": "k", "server": {"model_path": str(KIMI), "tp_size": 8, "sglang_version": "0.5.23"},
            "hardware": {"gpu": "rtx-pro-6000", "num_gpus": 8, "interconnect": "pcie"}}
    for key, value in data.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return parse_study(base)


def test_every_knob_of_the_issue_has_an_entry_with_its_effects() -> None:
    for name in ISSUE_KNOBS:
        knob = lookup(name)
        assert knob is not None, name
        assert knob.speed, f"{name}: the simulator's effect is not described"
    # releases come from the wheels' flag tables, not from the entry
    assert releases(CATALOGUE["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"]) == ("0.5.23",)
    assert releases(lookup("--moe-runner-backend"))[0] == "0.5.9"
    assert lookup("--enable-dp-attention") is lookup("--attn-dp-size")  # one knob, two spellings
    assert describe("--some-new-flag") == {"name": "--some-new-flag", "known": False, "memory": "",
                                            "note": "unknown to autotune: no memory effect assumed"}
    assert CATALOGUE["--attn-dp-size"].reads_memory and not CATALOGUE["--schedule-policy"].reads_memory


def test_dp_attention_renders_per_release() -> None:
    cfg = ServerConfig(model_path="m", tp_size=8, attn_dp_size=8, flags=(("--enable-mixed-chunk", True),
                                                                          ("--schedule-conservativeness", 0.5)))
    old = render_argv(cfg, "0.5.9", python="p")
    new = render_argv(cfg, "0.5.23", python="p")
    assert old[old.index("--enable-dp-attention"):][:3] == ["--enable-dp-attention", "--dp-size", "8"]
    assert new[new.index("--attn-dp-size") + 1] == "8" and "--enable-dp-attention" not in new
    assert "--enable-mixed-chunk" in new and new[new.index("--schedule-conservativeness") + 1] == "0.5"


def test_dead_knobs_leave_the_space_with_sglangs_reason() -> None:
    model = load_model_profile(KIMI)
    spec = _spec({"search_space": {
        "custom_allreduce": {"choices": [True, False]},
        "flashinfer_allreduce_fusion": {"choices": [True, False]},
        "flags": {"--attn-dp-size": {"choices": [1, 3, 8]}, "--moe-a2a-backend": {"choices": ["none", "deepep"]},
                  "--moe-runner-backend": {"choices": ["auto", "deep_gemm", "triton"]}},
        "env": {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": {"choices": ["0", "1"]}}}})
    pruned, removed = prune_space(spec, model, get_gpu("rtx-pro-6000"))
    lines = {r.line() for r in removed}
    assert any(line.startswith("removed custom_allreduce: TP 8 on PCIe") and "more than two PCIe-only GPUs" in line
               for line in lines)
    assert any(line.startswith("removed flashinfer_allreduce_fusion: SM120") for line in lines)
    assert any("--attn-dp-size=3" in line and "tp_size % dp_size == 0" in line for line in lines)
    assert any("--moe-a2a-backend=deepep" in line for line in lines)
    assert any("--moe-runner-backend=deep_gemm" in line and "#18870" in line for line in lines)
    sp = pruned.search_space
    assert sp.custom_allreduce is None and sp.flashinfer_allreduce_fusion is None
    assert sp.flags["--attn-dp-size"].choices == [1, 8] and "--moe-a2a-backend" in sp.flags
    assert sp.env["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"].choices == ["0", "1"]  # live on 0.5.23 PCIe TP 8

    # the same space on 0.5.9 loses the IPC allreduce; at TP 2 custom allreduce stays
    old = _spec({"server": {"sglang_version": "0.5.9", "tp_size": 2},
                 "search_space": {"custom_allreduce": {"choices": [True, False]},
                                  "env": {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": {"choices": ["0", "1"]}}}})
    pruned, removed = prune_space(old, model, get_gpu("rtx-pro-6000"))
    assert [r.name for r in removed] == ["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"]
    assert "SGLang 0.5.9 has no SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" in removed[0].reason
    assert pruned.search_space.custom_allreduce is not None


def test_sglang_overrides_are_applied_up_front_and_refusals_are_invalid() -> None:
    spec_cfg = ServerConfig(model_path="m", tp_size=8, speculative=SpeculativeConfig("EAGLE3", "d", 3, 1, 4),
                            flags=(("--enable-mixed-chunk", True),))
    cfg, notes, invalid = resolve(spec_cfg, "0.5.23")
    assert invalid is None and dict(cfg.flags)["--enable-mixed-chunk"] is False
    assert any("Mixed chunked prefill is disabled because of using eagle speculative decoding" in n for n in notes)
    assert "--enable-mixed-chunk" not in render_argv(cfg, "0.5.23")
    _, _, invalid = resolve(ServerConfig(model_path="m", tp_size=8, attn_dp_size=3), "0.5.23")
    assert invalid is not None and "tp_size % dp_size == 0" in invalid
    cfg, notes, _ = resolve(ServerConfig(model_path="m", tp_size=8, flags=(("--moe-a2a-backend", "deepep"),)),
                            "0.5.23")
    assert cfg.ep_size == 8 and "expert parallel size is adjusted" in notes[0]


def test_plan_lists_removed_knobs_and_the_space_that_remains(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(ROOT / "studies" / "demo.yaml"), "--set", "mem_fraction_static=0.9"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("removed custom_allreduce: TP 8 on PCIe: SGLang turns custom allreduce off itself")
    assert "space that remains:" in out
    assert "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE: 0, 1" in out and "--attn-dp-size: 1, 8" in out
    assert "custom_allreduce: " not in out.split("space that remains:")[1]


def _study(tmp_path: Path, flags: dict, env: dict, n: int) -> object:
    data = demo_data()
    data["search_space"] = {"flags": flags, "env": env}
    data["workload"].update({"num_prompts": 32, "output_len": 16, "concurrency": [16]})
    data.update({"n_trials": n, "sampler": {"kind": "grid"}, "search": {"confirm_top": 0}, "executor": {"kind": "inline"}})
    return demo_spec(tmp_path, data)


def test_an_unknown_flag_and_env_var_run_on_the_simulator(tmp_path: Path) -> None:
    flags = {"--enable-two-batch-overlap": {"choices": [True]}, "--stream-interval": {"choices": [2]}}
    spec = _study(tmp_path, flags, {"MY_TUNING_VAR": {"choices": ["a"]}, "NCCL_ALGO": {"choices": ["Tree"]}}, 16)
    run_study(spec, executor=OfflineExecutor())  # the grid: each knob's value and its default (trial 0's)
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    assert all(t.state.name == "COMPLETE" for t in study.trials)
    t = next(t for t in study.trials if t.params["--enable-two-batch-overlap"] and t.params["--stream-interval"] == 2
             and t.params["MY_TUNING_VAR"] == "a")
    assert "--enable-two-batch-overlap" in t.user_attrs["command"]
    assert t.user_attrs["command"][t.user_attrs["command"].index("--stream-interval") + 1] == "2"
    from autotune.results.summary import best

    top = best(spec)  # the winner's searched variables prefix its launch line
    assert all(f"{k}={v} " in top["shell"] for k, v in top["env"].items())
    assert set(top["env"]) <= {"MY_TUNING_VAR", "NCCL_ALGO"}
    tree = [u.value for u in study.trials if u.params["NCCL_ALGO"] == "Tree"]
    ring = [u.value for u in study.trials if u.params["NCCL_ALGO"] is None]
    assert tree and ring and sorted(tree) != sorted(ring)  # the variable reached the simulated server


def test_a_misspelled_flag_is_pruned_with_the_parsers_message(tmp_path: Path) -> None:
    spec = _study(tmp_path, {"--disable-overlapp-schedule": {"choices": [True]}}, {}, 2)
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    bad = [t for t in study.trials if t.params.get("--disable-overlapp-schedule")]
    assert bad and all(t.state.name == "PRUNED" for t in bad)
    assert bad[0].user_attrs["failure_kind"] == "invalid_args"
    assert "unrecognized arguments: --disable-overlapp-schedule" in bad[0].user_attrs["reason"]


def test_layout_sets_tp_and_dp_per_trial() -> None:
    from autotune import space

    spec = _spec({"server": {"model_path": str(QWEN), "tp_size": 8},
                  "search_space": {"layout": {"choices": ["tp8", "tp4-dp2", "tp2-dp4"]}}})
    cfgs = [space.to_config(spec, {"layout": lay}) for lay in ("tp8", "tp4-dp2", "tp2-dp4")]
    assert [(c.tp_size, c.dp_size, c.num_gpus) for c in cfgs] == [(8, 1, 8), (4, 2, 8), (2, 4, 8)]
    assert render_argv(cfgs[1], "0.5.23")[3:7] == ["--model-path", str(QWEN), "--tp-size", "4"]
    with pytest.raises(ConfigError, match=r"search_space.layout 'tp8-dp2' needs 16 GPUs"):
        _spec({"search_space": {"layout": {"choices": ["tp8-dp2"]}}})
