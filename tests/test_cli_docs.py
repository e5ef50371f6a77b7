"""Every command has help and is documented in the README; the README's quick start is what CI runs;
the README's minimal study for one's own model plans and runs; CONTRIBUTING.md names both test tiers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotune.cli import COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text()


@pytest.mark.parametrize("command", COMMANDS)
def test_command_has_help_and_is_documented(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert f"autotune {command}" in out and len(out.splitlines()) > 3
    assert f"autotune {command}" in README, f"README does not document `autotune {command}`"


def test_every_registered_command_is_in_the_list():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == set(COMMANDS)


def test_quick_start_is_two_commands_and_ci_runs_the_test_one():
    block = README.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.strip().splitlines() if line.strip()]
    assert len(commands) == 2
    assert "studies/demo.yaml" in commands[0] and "pytest" in commands[1]
    ci = (ROOT / ".ci" / "run").read_text()
    test_cmd = commands[1].split("&&", 1)[1].strip()
    assert test_cmd in ci, f"{test_cmd!r} not in .ci/run"


def test_contributing_names_both_tiers_and_ci_runs_the_fast_one_first():
    import tomllib

    from support.ci import SLOW_TIER_MARKERS

    block = CONTRIBUTING.split("## Development", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    fast = next(line for line in block.splitlines() if "pytest" in line).split("&&", 1)[1].split("#")[0].strip()
    slow = [line.split("#")[0].strip() for line in block.splitlines() if "-m slow_tier" in line]
    assert fast == "python3 -m pytest -q" and slow == ["python3 -m pytest -q -m slow_tier"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"\n{fast} ||" in ci and ci.index(f"\n{fast} ||") < ci.index(slow[0])
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "-m 'not slow_tier'" in config["addopts"]  # the fast tier deselects the slow one
    declared = {m.split(":", 1)[0] for m in config["markers"]}
    assert {"slow_tier", *SLOW_TIER_MARKERS} <= declared
    assert all(f"`{m}`" in CONTRIBUTING for m in SLOW_TIER_MARKERS)


def test_unknown_command_and_no_command_exit_2(capsys):
    assert main(["frobnicate"]) == 2
    assert "frobnicate" in capsys.readouterr().err
    assert main([]) == 2


def test_version(capsys):
    assert main(["--version"]) == 0
    assert re.match(r"autotune \d+\.\d+", capsys.readouterr().out)


def _readme_minimal_study() -> dict:
    """The README's study for one's own model, as a user copies it."""
    import yaml

    section = README.split("## Your own model on a GPU node", 1)[1]
    return yaml.safe_load(section.split("```yaml", 1)[1].split("```", 1)[0])


def test_the_readme_minimal_study_is_short_and_aims_at_real_sglang():
    text = README.split("## Your own model on a GPU node", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    assert len(text.strip().splitlines()) <= 8
    study = _readme_minimal_study()
    assert study["server"]["backend"] == "sglang" and study["hardware"] == {"gpu": "auto"}
    assert len((ROOT / "README.md").read_bytes()) <= 16 * 1024


def test_the_readme_minimal_study_plans_and_runs(tmp_path, capsys, cli_signal_handlers):
    """The README's study, its model pointed at a config-only stand-in and its hardware named (NVML is
    not here): `plan` gives verdicts; on the simulator a short run finishes and `best` hands over a command."""
    import json

    import yaml

    study = _readme_minimal_study()
    study["server"]["model_path"] = str(ROOT / "studies" / "models" / "qwen3-32b-class")
    study["hardware"] = {"gpu": "h100", "num_gpus": 2}
    path = tmp_path / "my-model.yaml"
    path.write_text(yaml.safe_dump(study))
    assert main(["plan", str(path), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert any(c["verdict"] == "fits" for c in plan["candidates"])

    study["server"].update(backend="sim", sim={"time_scale": 50})  # the default 10: 2.5 s of load per trial
    study.update(n_trials=2, executor={"kind": "inline"}, search={"confirm_top": 0})
    study["workload"].update(num_prompts=32, concurrency=[8])
    path.write_text(yaml.safe_dump(study))
    assert main(["run", str(path)]) == 0
    capsys.readouterr()
    assert main(["best", str(path), "--json"]) == 0
    best = json.loads(capsys.readouterr().out)
    assert "sglang.launch_server" in " ".join(best["command"])


def test_the_study_file_reference_is_a_valid_study_naming_every_field_and_its_true_default(tmp_path):
    """docs/study-file.md's block: it loads as a study, names every field of the spec's main sections,
    and a ``# default X`` comment on a scalar field states the spec's real default."""
    import yaml
    from pydantic import BaseModel

    from autotune.spec import StudySpec, load_study_spec

    text = (ROOT / "docs" / "study-file.md").read_text()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    data = yaml.safe_load(block)
    data["server"]["model_path"] = str(ROOT / "studies" / data["server"]["model_path"])
    data["search_space"]["speculative"]["draft_model_path"] = str(
        ROOT / "studies" / data["search_space"]["speculative"]["draft_model_path"])
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    load_study_spec(tmp_path / "s.yaml")
    sections: list[tuple[str, type[BaseModel]]] = [("", StudySpec)]
    for name in ("server", "workload", "search", "hardware", "executor"):
        sections.append((name + ".", StudySpec.model_fields[name].annotation))  # type: ignore[arg-type]
    for prefix, model in sections:
        for field in model.model_fields:
            if field != "source_path":
                assert re.search(rf"\b{field}\b", block), f"{prefix}{field} missing from docs/study-file.md"
    checked = 0
    for prefix, model in sections:
        if prefix:  # the section's own lines: from "server:" to the next top-level key
            part = re.search(rf"^{prefix[:-1]}:.*?\n(?=\S)", block, re.M | re.S)
            assert part is not None, prefix
            text_of = part.group()
        else:
            text_of = "\n".join(line for line in block.splitlines() if not line.startswith(" "))
        lines = {m.group(1): m.group(2) for m in re.finditer(r"^\s*(\w+): .*# default (-?[\w.\"]+)", text_of, re.M)}
        for field, info in model.model_fields.items():
            if field in lines and info.default_factory is None and isinstance(info.default, (int, float, str)):
                assert yaml.safe_load(lines[field]) == info.default, (prefix + field, lines[field])
                checked += 1
    assert checked >= 10
