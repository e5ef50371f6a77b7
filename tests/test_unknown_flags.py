"""A flag no SGLang release autotune knows has: a typo (refused in argparse's words) or a newer build's (accepted)."""

from __future__ import annotations

import contextlib
import io
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.cli import main
from autotune.errors import ConfigError
from autotune.sglang.flags.argv import effective_config, render_argv
from autotune.sglang.flags.unknown import verdict
from autotune.sglang.knobs.config import ServerConfig
from autotune.sim.args import parse_args
from autotune.spec import load_study_spec
from autotune.study.driver import run_study
from autotune.study.execution.offline import OfflineExecutor

ROOT = Path(__file__).resolve().parents[1]
KIMI = ROOT / "studies" / "models" / "kimi-k2-class"
STUDY = ROOT / "studies" / "unknown-flag.yaml"


def test_the_rule_tells_a_typo_from_a_newer_builds_flag() -> None:
    assert verdict("--some-new-flag", "0.5.23") == ("newer", "")
    assert verdict("--cuda-graph-max-bz", "0.5.23") == ("typo", "--cuda-graph-max-bs-decode")  # an abbreviation's
    assert verdict("--cuda-graph-max-bz", "0.5.9") == ("typo", "--cuda-graph-max-bs")
    assert verdict("--disable-overlapp-schedule", "0.5.23")[0] == "typo"
    assert verdict("--cuda-graph-bs-decode", "0.5.9") == ("other_release", "0.5.14..0.5.23")  # not 0.5.9's
    assert verdict("--cuda-graph-max-bs", "0.5.23")[0] == "prefix"  # argparse's ambiguity, not ours
    assert verdict("--cuda-graph-max-bs-decode", "0.5.23") == ("known", "")


def _refusal(argv: list[str]) -> str:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    return err.getvalue().strip().splitlines()[-1]


def test_the_simulated_server_takes_a_newer_flag_and_refuses_a_typo_in_argparses_words() -> None:
    base = ["--model-path", str(KIMI), "--tp-size", "8", "--sim-sglang-version", "0.5.23", "--sim-gpu", "rtx-pro-6000"]
    launch, _ = parse_args([*base, "--some-new-flag", "fast", "--another-new-switch", "--port", "31000"])
    assert launch.newer_flags == {"--some-new-flag": "fast", "--another-new-switch": True}
    assert launch.port == 31000 and "some_new_flag" not in str(launch.raw)
    assert _refusal([*base, "--cuda-graph-max-bz", "64"]).endswith("error: unrecognized arguments: --cuda-graph-max-bz 64")
    assert "ambiguous option: --cuda-graph-max-bs could match" in _refusal([*base, "--cuda-graph-max-bs", "64"])
    old = [*base[:-4], "--sim-sglang-version", "0.5.9", "--sim-gpu", "rtx-pro-6000"]
    assert "unrecognized arguments: --attn-dp-size 8" in _refusal([*old, "--attn-dp-size", "8"])  # 0.5.22's flag
    # the orchestrator's check before launch follows the same rule
    cfg = ServerConfig(model_path="m", tp_size=8, flags=(("--some-new-flag", "fast"),))
    assert render_argv(cfg, "0.5.23", python="p")[-2:] == ["--some-new-flag", "fast"]
    with pytest.raises(ConfigError, match="unrecognized arguments: --cuda-graph-max-bz 64"):
        render_argv(ServerConfig(model_path="m", tp_size=8, flags=(("--cuda-graph-max-bz", 64),)), "0.5.23")
    # and so does the memory model's reading of the final argv (extra_args too)
    assert effective_config(replace(cfg, extra_args=("--yet-another-knob", "1")), "0.5.23").tp_size == 8
    with pytest.raises(ConfigError, match="server.extra_args: .*unrecognized arguments: --cuda-graph-max-bz 64"):
        effective_config(ServerConfig(model_path="m", extra_args=("--cuda-graph-max-bz", "64")), "0.5.23")


def _study(tmp_path: Path) -> Path:
    data = yaml.safe_load(STUDY.read_text())
    data["server"]["model_path"] = str(KIMI)
    path = tmp_path / "unknown-flag.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_plan_says_what_becomes_of_each_unknown_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(_study(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "--some-new-flag: fast  (unknown flag: no memory effect assumed, not validated by a real parser" in out
    assert "--cuda-graph-max-bz: 64  (not a flag of SGLang 0.5.23 (near miss of --cuda-graph-max-bs-decode)" in out
    assert "SGLANG_SOME_NEW_VAR: 1  (unknown variable: no memory effect assumed" in out


def test_the_study_launches_the_newer_flag_and_variable_and_prunes_the_typo(tmp_path: Path) -> None:
    spec = load_study_spec(_study(tmp_path))
    run_study(spec, executor=OfflineExecutor())
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
    newer = next(t for t in study.trials if t.params.get("--some-new-flag") == "fast")
    assert newer.state.name == "COMPLETE"
    cmd = newer.user_attrs["command"]
    assert cmd[cmd.index("--some-new-flag") + 1] == "fast"
    typo = next(t for t in study.trials if t.params.get("--cuda-graph-max-bz") == 64)
    assert typo.state.name == "PRUNED" and typo.user_attrs["failure_kind"] == "invalid_args"
    assert "unrecognized arguments: --cuda-graph-max-bz 64" in typo.user_attrs["reason"]
    from autotune.results.summary import best

    top = best(spec)  # the point with the IPC allreduce wins; its newer flag and variable are in its launch line
    assert top["number"] == newer.number and top["env"]["SGLANG_SOME_NEW_VAR"] == "1"
    assert "SGLANG_SOME_NEW_VAR=1 " in top["shell"].split("python3")[0] and "--some-new-flag fast" in top["shell"]


def test_a_flags_verdict_is_judged_once_per_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """The verdict depends on the flag and the release's table only: a study's flags are judged again for every
    candidate, and difflib's near-miss search (~16 ms a flag) made 3,000 searched flags cost 48 s before the first
    launch. The second judgement of the same flags does no difflib search."""
    import difflib

    from autotune.sglang.flags.unknown import newer_flags

    calls = []
    real = difflib.get_close_matches
    monkeypatch.setattr(difflib, "get_close_matches", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    argv = [f"--cached-verdict-flag-{i}" for i in range(50)]
    assert newer_flags(argv, "0.5.23") == argv
    first = len(calls)
    assert first >= 50
    assert newer_flags(argv, "0.5.23") == argv and verdict(argv[0], "0.5.23") == ("newer", "")
    assert len(calls) == first
    assert newer_flags(["--cuda-graph-max-bz"], "0.5.9") == []  # still a typo for another release's table


def test_a_study_that_sets_more_flags_than_sglang_has_is_one_line(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.limits import MAX_STUDY_FLAGS

    data = yaml.safe_load(STUDY.read_text())
    data["server"]["extra_args"] = ["--extra-flag-a", "1", "--extra-flag-b=2", "--extra-flag-a"]  # two flags
    data["search_space"]["flags"] = {f"--many-flag-{i}": {"choices": [1, 2]} for i in range(MAX_STUDY_FLAGS - 3)}
    data["search_space"]["env"] = {"SOME_VAR": {"choices": ["1"]}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    load_study_spec(path)  # exactly the limit
    data["search_space"]["env"]["OTHER_VAR"] = {"choices": ["1"]}
    path.write_text(yaml.safe_dump(data))
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert (f"sets or searches {MAX_STUDY_FLAGS + 1} flags and environment variables (server.extra_args 2, "
            f"search_space.flags {MAX_STUDY_FLAGS - 3}, search_space.env 2), more than {MAX_STUDY_FLAGS}") in err
    assert not list(tmp_path.glob("*.db"))
