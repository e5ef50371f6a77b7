"""Launch artifacts: the exact command, argv and env, with secrets never written."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from autotune.launch import redact_argv, redact_env, write_launch_artifacts

ARGV = ["/usr/bin/python3", "-m", "sglang.launch_server", "--model-path", "/m/Llama 3", "--api-key", "sk-live-1", "--max-total-tokens", "4096", "--hf-token=hf_abc"]
ENV = {"HF_TOKEN": "hf_secret", "OPENAI_API_KEY": "sk-x", "MY_SECRET_THING": "s", "DB_PASSWORD": "p", "CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "INFO"}
SECRETS = ("hf_secret", "sk-x", "sk-live-1", "hf_abc", '"s"', '"p"')


def test_artifacts_written_and_redacted(tmp_path: Path) -> None:
    paths = write_launch_artifacts(tmp_path / "t3", ARGV, ENV, sglang_version="0.5.9", gpu="H100-80G", driver="550.54")
    assert set(paths) == {"command.sh", "argv.json", "env.json", "launch.json"}
    for p in paths.values():
        text = Path(p).read_text()
        for secret in SECRETS:
            assert secret not in text, (p, secret)
    env = json.loads(Path(paths["env.json"]).read_text())
    assert env["HF_TOKEN"] == env["OPENAI_API_KEY"] == env["MY_SECRET_THING"] == env["DB_PASSWORD"] == "***"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["NCCL_DEBUG"] == "INFO"
    meta = json.loads(Path(paths["launch.json"]).read_text())
    assert (meta["sglang_version"], meta["gpu"], meta["driver"]) == ("0.5.9", "H100-80G", "550.54")


def test_command_sh_is_one_copy_pasteable_line(tmp_path: Path) -> None:
    paths = write_launch_artifacts(tmp_path, ARGV, ENV, sglang_version="0.5.23", gpu="H200", driver=None)
    lines = [ln for ln in Path(paths["command.sh"]).read_text().splitlines() if not ln.startswith("#")]
    assert len(lines) == 1
    words = shlex.split(lines[0])
    assert "CUDA_VISIBLE_DEVICES=0,1" in words
    assert "HF_TOKEN=$HF_TOKEN" in words  # taken from the user's environment when pasted
    assert "/m/Llama 3" in words  # quoted: the space survives
    tail = words[words.index("/usr/bin/python3"):]
    assert tail == redact_argv(ARGV)
    assert Path(paths["command.sh"]).stat().st_mode & 0o100


def test_redact_argv_keeps_non_secret_flags() -> None:
    out = redact_argv(["--api-key", "k", "--max-total-tokens", "9", "--tokenizer-path", "t", "--admin-api-key=z"])
    assert out == ["--api-key", "***", "--max-total-tokens", "9", "--tokenizer-path", "t", "--admin-api-key=***"]


def test_redact_env_patterns() -> None:
    out = redact_env({"HF_TOKEN": "a", "X_API_KEY": "b", "GITHUB_TOKEN_FILE": "c", "AWS_SECRET_ACCESS_KEY": "d", "PGPASSWORD": "e", "PATH": "/bin"})
    assert out == {"HF_TOKEN": "***", "X_API_KEY": "***", "GITHUB_TOKEN_FILE": "***", "AWS_SECRET_ACCESS_KEY": "***", "PGPASSWORD": "***", "PATH": "/bin"}


def test_a_secret_in_a_variable_whose_name_is_not_secret_is_taken_from_the_environment(tmp_path: Path) -> None:
    """command.sh holds no secret a variable's value carries (a URL's password, a token shape, a key in
    a JSON text, a literal '$...' value of a secret name): such a variable is written NAME="$NAME"."""
    env = {"SOME_URL": "https://bob:URLPWSECRET777@example.com", "PLAIN_VAR": "hf_" + "Plain7" * 5,
           "OTHER": "ghp_" + "Other7" * 5, "SGLANG_CFG": '{"api_key": "JSONENVSECRET6"}', "DB_PASSWORD": "$DOLLARPW2xyz",
           "HF_TOKEN": "$HF_TOKEN", "NCCL_DEBUG": "INFO"}
    argv = ["python3", "-m", "sglang.launch_server", "--model-loader-extra-config", '{"hf_token": "JSONFLAGSECRET7"}',
            "--api-ke", "SECRETABBR"]
    paths = write_launch_artifacts(tmp_path, argv, env, sglang_version="0.5.9", gpu="H100-80G", driver=None)
    for p in paths.values():
        text = Path(p).read_text()
        for secret in ("URLPWSECRET777", "Plain7", "Other7", "JSONENVSECRET6", "DOLLARPW2xyz", "JSONFLAGSECRET7",
                       "SECRETABBR"):
            assert secret not in text, (p, secret)
    script = Path(paths["command.sh"]).read_text()
    words = shlex.split(script.splitlines()[-1])
    for name in ("SOME_URL", "PLAIN_VAR", "OTHER", "SGLANG_CFG", "DB_PASSWORD", "HF_TOKEN"):
        assert f"{name}=${name}" in words, name
    assert "NCCL_DEBUG=INFO" in words
    assert "# Secrets are read from your environment: DB_PASSWORD, HF_TOKEN, OTHER, PLAIN_VAR, SGLANG_CFG, SOME_URL" in script
