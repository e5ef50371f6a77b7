"""A secret given to the server reaches the server and nothing else (issue 34, "secrets leak").

One study on the simulated server whose launch carries an ``--api-key`` in ``server.extra_args``
and tokens in ``server.env`` (``HF_TOKEN``; ``WANDB_KEY`` and ``HUGGINGFACE_HUB_CREDS``, names
only the pattern catches; a value that only its shape gives away). The run must complete,
which it can only do if the server got the key and the load generator sent it: the simulator
refuses every request without it, as SGLang does. Then no byte of any secret may be in the
study's database, the artifacts the dashboard serves, ``best`` (text and ``--json``),
``status``, the CSV and parquet exports, the HTML report or ``plan --json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from autotune.cli import main

MODELS = Path(__file__).resolve().parents[1] / "studies" / "models"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("cli_signal_handlers")]

API_KEY = "sk-hostileApiKey0000000000001"
SECRETS = {
    "api_key": API_KEY,
    "HF_TOKEN": "hf_hostileHfTokenValue000000000001",
    "WANDB_KEY": "wandbHostileValue0001",
    "HUGGINGFACE_HUB_CREDS": "hubCredsHostile0001",
    "SETTING": "ghp_hostileShapedTokenValue0000000000001",  # an innocent name: only its shape says "token"
}


def _study(tmp_path: Path) -> Path:
    data = {
        "name": "secrets", "n_trials": 2,
        "sampler": {"kind": "grid", "seed": 0},
        "executor": {"kind": "inline"},
        "server": {
            "backend": "sim", "sglang_version": "0.5.9", "model_path": str(MODELS / "kimi-k2-class"), "tp_size": 8,
            "startup_timeout_s": 60, "sim": {"time_scale": 50, "seed": 0},
            "extra_args": ["--api-key", API_KEY],
            "env": {k: v for k, v in SECRETS.items() if k != "api_key"},
        },
        "hardware": {"gpu": "rtx-pro-6000", "num_gpus": 8, "interconnect": "pcie"},
        "search_space": {"mem_fraction_static": {"low": 0.55, "high": 0.90, "step": 0.35}},
        "workload": {"input_len": 64, "output_len": 16, "num_prompts": 16, "concurrency": [8], "warmup_requests": 1},
        "objective": {"metric": "output_throughput"},
        "search": {"confirm_top": 0, "repeats": 1},
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _leaks(data: bytes | str) -> list[str]:
    raw = data.encode() if isinstance(data, str) else data
    return [name for name, secret in SECRETS.items() if secret.encode() in raw]


def _out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 0, argv
    cap = capsys.readouterr()
    return cap.out + cap.err


def test_secrets_reach_the_server_and_no_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = _study(tmp_path)
    run_log = _out(capsys, ["run", str(study), "--no-progress"])
    status = json.loads(_out(capsys, ["status", str(study), "--json"]))
    # The server got the key: the simulator, like SGLang, answers 401 to a request without
    # "Authorization: Bearer <key>", so a completed trial is one the load generator measured with it.
    assert status["states"]["COMPLETE"] >= 1, status

    files = sorted(p for p in tmp_path.rglob("*") if p.is_file() and p.name.startswith("secrets.db"))
    assert files, "no study database written"
    for f in files:
        assert _leaks(f.read_bytes()) == [], f
    artifacts = [p for p in (tmp_path / "runs" / "secrets" / "artifacts").rglob("*") if p.is_file()]
    assert artifacts, "no artifact stored for the dashboard"
    for f in artifacts:
        assert _leaks(f.read_bytes()) == [], f

    best_json = _out(capsys, ["best", str(study), "--json"])
    best = json.loads(best_json)
    # The winning launch line still works when pasted: the variables come from the user's shell,
    # the key is shown hidden (the study file holds it).
    assert 'HF_TOKEN="$HF_TOKEN"' in best["shell"] and "WANDB_KEY=\"$WANDB_KEY\"" in best["shell"]
    assert "--api-key" in best["command"] and best["command"][best["command"].index("--api-key") + 1] == "***"
    shown = {
        "run": run_log, "best --json": best_json, "best": _out(capsys, ["best", str(study)]),
        "status": _out(capsys, ["status", str(study)]), "status --json": json.dumps(status),
        "plan --json": _out(capsys, ["plan", str(study), "--json"]),
    }
    for name in ("trials.csv", "report.html"):
        cmd = "report" if name.endswith(".html") else "export"
        _out(capsys, [cmd, str(study), "-o", str(tmp_path / name)])
        shown[name] = (tmp_path / name).read_text()
    _out(capsys, ["export", str(study), "-o", str(tmp_path / "trials.parquet")])
    import pyarrow.parquet as pq  # its bytes are compressed: the cells are read back

    shown["trials.parquet"] = json.dumps(pq.read_table(tmp_path / "trials.parquet").to_pylist(), default=str)
    assert {where: _leaks(text) for where, text in shown.items() if _leaks(text)} == {}
    assert "***" in shown["trials.csv"]  # the launch line is exported, hidden where it held the key
