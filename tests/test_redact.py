"""The one redaction rule (autotune.redact) and where it holds: what the study stores, the launch
key that finds a launch already measured, and the simulated server that wants the key it was given."""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.redact import (
    REDACTED,
    SECRET_FLAGS,
    RedactingFilter,
    abbreviated_secret_flags,
    is_secret_name,
    redact_argv,
    redact_env,
    redact_text,
    redact_url,
    redact_value,
)

# ---- the rule ------------------------------------------------------------------------------------

SECRET_NAMES = ("HF_TOKEN", "OPENAI_API_KEY", "WANDB_KEY", "HUGGINGFACE_HUB_CREDS", "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY", "GOOGLE_APPLICATION_CREDENTIALS", "DATABASE_URL", "DB_PASSWORD",
                "REDIS_PASS", "PGPASSWORD", "GITHUB_TOKEN", "api_key", "apiKey", "accessToken",
                # plurals, a number after the name, camelCase, an auth
                "OPENAI_API_KEYS", "HF_TOKENS", "--api-keys", "DB_PASSWORDS", "MY_SECRETS", "HF_TOKEN_2", "HF_TOKEN2",
                "openaiApiKey", "HFToken", "X_AUTH", "PROXY_AUTH")
PLAIN_NAMES = ("PATH", "CUDA_VISIBLE_DEVICES", "NCCL_DEBUG", "SGLANG_USE_CPU_ENGINE", "HF_HOME",
               "TOKENIZERS_PARALLELISM", "max_total_tokens", "launch_key", "first_token_s", "token_id_range",
               "kv_tokens", "per_token",
               # counts and lists of names stay plain: a plural is secret only after a credential's word
               "max_new_tokens", "prompt_tokens", "cached_tokens", "maxTotalTokens", "sort_keys", "GOODPUT_KEYS",
               "tokens", "ENABLE_AUTH", "launchKey", "AUTH_MODE")


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_names_that_are_not_secret(name: str) -> None:
    assert not is_secret_name(name)


def test_of_every_sglang_flag_only_the_keys_and_the_ssl_password_are_secret() -> None:
    tables = Path(__file__).resolve().parents[1] / "autotune" / "sglang" / "flags" / "release_tables"
    flags = {n for f in tables.glob("*.json") for flag in json.loads(f.read_text())["flags"] for n in flag["names"]}
    assert len(flags) > 300
    assert {f for f in flags if is_secret_name(f)} == {"--api-key", "--admin-api-key", "--ssl-keyfile-password"}
    assert set(SECRET_FLAGS) == {"--api-key", "--admin-api-key", "--ssl-keyfile-password"}
    # A flag written out is never taken for an abbreviation of a secret one (--ssl-keyfile is a flag
    # of its own; argparse takes an exact name first).
    assert not [f for f in flags if abbreviated_secret_flags(f)]


# A secret: long enough and from an alphabet that cannot be read back out of the rest of a launch line.
secrets_ = st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZabcdefghjkmnpqrstuvwxyz23456789", min_size=12, max_size=40)
knob_flags = st.sampled_from(["--mem-fraction-static", "--max-total-tokens", "--tokenizer-path", "--chunked-prefill-size",
                              "--bucket-time-to-first-token", "--cuda-graph-max-bs"])
knob_values = st.sampled_from(["0.85", "4096", "/models/m", "8192", "0.1", "256"])
knobs = st.lists(st.tuples(knob_flags, knob_values), max_size=6).map(lambda kv: [a for pair in kv for a in pair])
secret_flags = st.sampled_from(["--api-key", "--admin-api-key", "--hf-token", "--ssl-keyfile-password"])


@settings(max_examples=150, deadline=None)
@given(before=knobs, after=knobs, flag=secret_flags, secret=secrets_, joined=st.booleans())
def test_a_secret_flag_value_never_survives(before: list[str], after: list[str], flag: str, secret: str,
                                            joined: bool) -> None:
    given_ = [flag + "=" + secret] if joined else [flag, secret]
    argv = ["python3", "-m", "sglang.launch_server", *before, *given_, *after]
    shown = redact_argv(argv)
    assert secret not in " ".join(shown)
    assert secret not in redact_text(shlex.join(argv))  # the same launch as one shell line (a log line)
    assert secret not in json.dumps(redact_value({"command": argv, "note": shlex.join(argv)}))
    # Everything else is kept as it was, and hiding twice changes nothing (equal launches stay equal).
    assert [a for a in shown if REDACTED not in a] == [a for a in argv if secret not in a]
    assert redact_argv(shown) == shown


@settings(max_examples=100, deadline=None)
@given(flags=knobs)
def test_a_launch_without_secrets_is_shown_as_it_is(flags: list[str]) -> None:
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "/m", *flags]
    assert redact_argv(argv) == argv
    assert redact_text(shlex.join(argv)) == shlex.join(argv)


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(SECRET_NAMES), secret=secrets_, plain=st.sampled_from(PLAIN_NAMES))
def test_a_secret_variable_never_survives(name: str, secret: str, plain: str) -> None:
    env = {name: secret, plain: "1"}
    assert redact_env(env) == {name: REDACTED, plain: "1"}
    assert secret not in json.dumps(redact_value({"server": {"env": env}}))
    for line in (f"{name}={secret} python3 x", f"{name}='{secret}'", f'"{name}": "{secret}"', f"ServerArgs({name}='{secret}', port=1)"):
        assert secret not in redact_text(line), line


@settings(max_examples=100, deadline=None)
@given(user=st.text(alphabet="abcdefgh", min_size=1, max_size=8), secret=secrets_,
       scheme=st.sampled_from(["postgresql", "postgresql+psycopg", "mysql+pymysql", "https", "redis"]))
def test_a_url_password_never_survives(user: str, secret: str, scheme: str) -> None:
    url = f"{scheme}://{user}:{secret}@db.example:5432/study"
    assert redact_url(url) == f"{scheme}://{user}:{REDACTED}@db.example:5432/study"
    assert secret not in redact_text(f"error: no study 'x' in {url} (run first)")


@pytest.mark.parametrize("token", [
    "hf_" + "a1B2" * 9, "sk-proj-" + "x9" * 12, "ghp_" + "Z8" * 18, "github_pat_" + "a_" * 12, "xoxb-1234567890-abcdef",
    "AKIAIOSFODNN7EXAMPLE", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
])
def test_values_shaped_like_tokens_are_hidden_wherever_they_sit(token: str) -> None:
    assert token not in redact_text(f"--some-url https://hub/{token}/x SETTING={token}")
    assert redact_env({"SETTING": token}) == {"SETTING": REDACTED}
    assert token not in " ".join(redact_argv(["python3", "--model-path", token]))


@pytest.mark.parametrize("url", [
    "postgresql+psycopg://u:SEC/RETPG@127.0.0.1:1/db",  # a '/' in the password
    "postgresql://u:SEC'RETPG@127.0.0.1:1/db",  # a quote
    "mysql://u:SEC@RETPG@db.example/x",  # an '@': the password runs to the last one
    "https://h.example/x?token=SECRETPG&n=1", "https://h.example/x?a=1&api_key=SECRETPG", "redis://h/0?password=SECRETPG",
])
def test_a_url_password_with_any_character_and_a_secret_query_value_never_survive(url: str) -> None:
    for line in (url, f"error: storage unreachable ({url!r})", f"error: {url}, retrying"):
        assert "RETPG" not in redact_text(line), line
    assert "127.0.0.1:1/db" in redact_text("postgresql+psycopg://u:SEC/RETPG@127.0.0.1:1/db")  # the host stays
    assert redact_url("https://h/x?token=t0k&n=1&api_key=k3y") == "https://h/x?token=***&n=1&api_key=***"


@pytest.mark.parametrize(("line", "secret"), [
    ("error: unrecognized arguments: --api-keys SECRETPLURAL", "SECRETPLURAL"),  # a plural's value
    ("--enable-metrics --api-key SECRETAFTERSWITCH --port 1", "SECRETAFTERSWITCH"),  # after a flag with no value
    ("(got ['--api-key', 'SECRETPORT', '--port'])", "SECRETPORT"),  # an argv's repr in an error line
    ('(got ["--admin-api-key", "SEC\'RETQ", "--port"])', "RETQ"),
    ("(got ['--port', '1', '--api-key', 'SECRETCUTOF...", "SECRETCUTOF"),  # a repr cut short
    ("launching on x: SGLANG_CFG='{\"api_key\": \"JSONENVSECRET6\"}' python3 -m s", "JSONENVSECRET6"),
    ("best: env SGLANG_CFG={\"hf_token\": \"JSONENVSECRET7\"}", "JSONENVSECRET7"),
    ("DB_PASSWORD=$DOLLARPW2xyz python3", "DOLLARPW2xyz"),  # autotune does not expand '$': the literal secret
    ('HF_TOKEN="$OTHER_SECRET_VALUE"', "OTHER_SECRET_VALUE"),
])
def test_a_secret_in_a_line_never_survives(line: str, secret: str) -> None:
    assert secret not in redact_text(line)
    assert redact_text(redact_text(line)) == redact_text(line)


def test_a_list_repr_keeps_what_is_not_secret() -> None:
    assert redact_text("(got ['--api-key', 'K', '--port'])") == "(got ['--api-key', '***', '--port'])"
    assert redact_text("['--api-key', '--port', '1']") == "['--api-key', '--port', '1']"  # a flag is no value
    assert redact_text("['--max-total-tokens', '4096']") == "['--max-total-tokens', '4096']"


def test_only_a_reference_to_the_variable_itself_is_kept() -> None:
    stored = redact_value({"HF_TOKEN": "$HF_TOKEN", "OPENAI_API_KEY": "${OPENAI_API_KEY}", "DB_PASSWORD": "$DOLLARPW2xyz",
                           "WANDB_KEY": "$HF_TOKEN", "HF_TOKENS": ["SECRETINLIST"]})
    assert stored == {"HF_TOKEN": "$HF_TOKEN", "OPENAI_API_KEY": "${OPENAI_API_KEY}", "DB_PASSWORD": REDACTED,
                      "WANDB_KEY": REDACTED, "HF_TOKENS": REDACTED}
    assert redact_env({"DB_PASSWORD": "$DOLLARPW2xyz", "HF_TOKEN": "$HF_TOKEN"}) == {"DB_PASSWORD": REDACTED,
                                                                                     "HF_TOKEN": "$HF_TOKEN"}


def test_a_secret_inside_the_value_of_a_plain_name_or_flag_is_hidden() -> None:
    argv = ["python3", "--model-loader-extra-config", '{"hf_token": "JSONFLAGSECRET7", "revision": "main"}',
            "--api-ke", "SECRETABBR", "--ssl-keyfile", "/k.pem"]
    assert redact_argv(argv) == ["python3", "--model-loader-extra-config", '{"hf_token": "***", "revision": "main"}',
                                 "--api-ke", REDACTED, "--ssl-keyfile", "/k.pem"]
    assert redact_env({"SGLANG_CFG": '{"api_key": "JSONENVSECRET6"}', "SOME_URL": "https://bob:URLPW777@h.example"}) \
        == {"SGLANG_CFG": '{"api_key": "***"}', "SOME_URL": "https://bob:***@h.example"}
    assert "JSONENVSECRET6" not in json.dumps(redact_value({"env": {"SGLANG_CFG": '{"api_key": "JSONENVSECRET6"}'}}))


def test_references_and_empty_values_are_kept() -> None:
    line = 'HF_TOKEN="$HF_TOKEN" python3 -m sglang.launch_server --api-key \'***\''
    assert redact_text(line) == line  # command.sh / best's line: the variable is the user's own
    assert redact_text("ServerArgs(api_key=None, admin_api_key='')") == "ServerArgs(api_key=None, admin_api_key='')"


def test_the_log_filter_hides_what_a_library_logged(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    logger = logging.getLogger("autotune.test.redact")
    f = RedactingFilter()
    logger.addFilter(f)
    try:
        with caplog.at_level(logging.INFO, logger="autotune.test.redact"):
            logger.info("connecting to %s", "postgresql://bob:hunter2pw@db/x")
    finally:
        logger.removeFilter(f)
    assert "hunter2pw" not in caplog.text and "bob:***@db" in caplog.text


# ---- the launch key: equal launches stay equal, a study recorded in clear still matches ---------

def _config(f: float, extra: tuple[str, ...] = ()) -> object:
    from autotune.sglang.knobs.config import ServerConfig

    return ServerConfig(model_path="/m", tp_size=1, mem_fraction_static=f, extra_args=extra)


def test_launch_key_hides_the_key_and_keeps_launches_apart() -> None:
    from autotune.study.reuse import launch_key

    key_a = launch_key(_config(0.8, ("--api-key", "sk-launchKeySecret000001")), "0.5.9")  # type: ignore[arg-type]
    assert "sk-launchKeySecret000001" not in key_a and "--api-key '***'" in key_a
    assert key_a == launch_key(_config(0.8, ("--api-key", "sk-launchKeySecret000001")), "0.5.9")  # type: ignore[arg-type]
    assert key_a != launch_key(_config(0.85, ("--api-key", "sk-launchKeySecret000001")), "0.5.9")  # type: ignore[arg-type]
    assert launch_key(_config(0.8), "0.5.9") == launch_key(_config(0.8), "0.5.9")  # type: ignore[arg-type]


def _told(study: optuna.Study, key: str, value: float) -> None:
    trial = study.ask()
    trial.set_user_attr("launch_key", key)
    trial.set_user_attr("command", shlex.split(key))
    study.tell(trial, value)


def test_a_measured_launch_is_found_again_in_a_study_recorded_before_redaction() -> None:
    """Resume and reuse key on the launch key: a study whose keys were stored in clear (autotune
    before this rule) must still answer a new trial of the same launch, and only of that launch."""
    from autotune.sglang.flags.argv import render_argv
    from autotune.study.reuse import launch_key, stored_result

    secret = ("--api-key", "sk-launchKeySecret000001")
    clear = [shlex.join(render_argv(_config(f, secret).with_port(0), "0.5.9", python="python",  # type: ignore[attr-defined]
                                    module="sglang.launch_server")) for f in (0.8, 0.85)]
    assert "sk-launchKeySecret000001" in clear[0]
    study = optuna.create_study(direction="maximize")
    _told(study, clear[0], 10.0)
    _told(study, clear[1], 20.0)
    found = stored_result(study, launch_key(_config(0.8, secret), "0.5.9"))  # type: ignore[arg-type]
    assert found is not None and found.value == 10.0
    found = stored_result(study, launch_key(_config(0.85, secret), "0.5.9"))  # type: ignore[arg-type]
    assert found is not None and found.value == 20.0
    assert stored_result(study, launch_key(_config(0.9, secret), "0.5.9")) is None  # type: ignore[arg-type]


# ---- the study's storage: whoever writes, no secret lands -----------------------------------

def test_the_storage_hides_secrets_whichever_writer_hands_them(tmp_path: Path) -> None:
    from autotune.spec import parse_study
    from autotune.study.storage.opening import open_storage

    models = Path(__file__).resolve().parents[1] / "studies" / "models"
    spec = parse_study({"name": "s", "storage": str(tmp_path / "s.db"),
                        "server": {"backend": "sim", "model_path": str(models / "kimi-k2-class"), "tp_size": 8},
                        "hardware": {"gpu": "rtx-pro-6000", "num_gpus": 8}})
    study = optuna.create_study(study_name="s", storage=open_storage(spec))
    secret = "sk-storageLayerSecret0001"
    study.set_user_attr("spec", {"server": {"env": {"HF_TOKEN": "hf_x"}, "extra_args": ["--api-key", secret]}})
    trial = study.ask()
    trial.set_user_attr("evidence", f"server_args=ServerArgs(model_path='/m', api_key='{secret}')")
    study.tell(trial, 1.0)
    study.enqueue_trial({}, user_attrs={"note": f"retry of --api-key {secret}"})
    del study
    data = b"".join(p.read_bytes() for p in tmp_path.glob("s.db*"))
    assert secret.encode() not in data and b"hf_x" not in data
    reread = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 's.db'}")
    assert reread.user_attrs["spec"]["server"]["env"]["HF_TOKEN"] == REDACTED
    assert reread.trials[0].user_attrs["evidence"] == "server_args=ServerArgs(model_path='/m', api_key='***')"


# ---- the simulated server wants the key it was given, as SGLang does ---------------------------

def test_the_simulated_server_refuses_a_request_without_its_key() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from autotune.sim.http import ServerState, build_app

    async def statuses() -> dict[str, int]:
        state = ServerState(served_model_name="m", context_len=4096, ready=True, api_key="k-1", admin_api_key="adm")
        async with TestClient(TestServer(build_app(state))) as client:
            async def code(method: str, path: str, key: str | None) -> int:
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                async with client.request(method, path, headers=headers) as resp:
                    return resp.status
            return {
                "models, no key": await code("GET", "/v1/models", None),
                "models, wrong key": await code("GET", "/v1/models", "k-2"),
                "models, key": await code("GET", "/v1/models", "k-1"),
                "health, no key": await code("GET", "/health", None),
                "flush, api key": await code("POST", "/flush_cache", "k-1"),  # admin-optional: the admin key
                "flush, admin key": await code("POST", "/flush_cache", "adm"),
            }

    assert asyncio.run(statuses()) == {"models, no key": 401, "models, wrong key": 401, "models, key": 200,
                                       "health, no key": 200, "flush, api key": 401, "flush, admin key": 200}


def test_an_error_about_a_secret_field_does_not_show_its_value() -> None:
    from autotune.errors import ConfigError
    from autotune.spec import parse_study

    with pytest.raises(ConfigError) as err:
        parse_study({"name": "x", "server": {"model_path": "m", "env": {"HF_TOKEN": ["hfSecretInAList01"]}},
                     "hardware": {"gpu": "h100"}})
    # server.env's values are never echoed (they are where secrets live); the field is named.
    assert str(err.value) == "server.env.HF_TOKEN: Input should be a valid string"
    # The CLI's own line filter leaves such a line as it is (the field is named, not valued).
    assert redact_text(str(err.value)) == str(err.value)
    with pytest.raises(ConfigError) as err:  # elsewhere a secret-named field's text is masked, not dropped
        parse_study({"name": "x", "server": {"model_path": "m", "api_key": ["hfSecretInAList01"]},
                     "hardware": {"gpu": "h100"}})
    assert str(err.value) == "server.api_key: unknown key (got '***')"


# ---- the study file: an error names the field, never a secret it holds ---------------------------

def _refused(server: dict[str, object] | None = None, search_space: dict[str, object] | None = None) -> str:
    from autotune.errors import ConfigError
    from autotune.spec import parse_study

    data: dict[str, object] = {"name": "x", "server": {"model_path": "m", **(server or {})}, "hardware": {"gpu": "h100"}}
    if search_space is not None:
        data["search_space"] = search_space
    with pytest.raises(ConfigError) as err:
        parse_study(data)
    assert err.value.exit_code == 2 and "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize(("args", "expected"), [
    (["--api-key", "SECRETPORT", "--port"],
     "server.extra_args: '--port' is set by autotune; use the study's own field instead (got ['--api-key', '***', '--port'])"),
    (["--api-key=SECRETEQ", "--host=h"],
     "server.extra_args: '--host=h' is set by autotune; use the study's own field instead (got ['--api-key=***', '--host=h'])"),
    (["--api-key", "SECRETA\tB"],
     "server.extra_args: argument: non-printable character '\\t' at position 7 of the value (got ['--api-key', '***'])"),
    (["--admin-api-key", "SECRETNUL\x00X"], "server.extra_args[1]: a NUL byte or a lone surrogate at position 9 of the value"),
    (["--api-key", 12345678], "server.extra_args.1: Input should be a valid string (got '***')"),
])
def test_an_error_about_an_argv_never_shows_the_value_of_a_secret_flag(args: list[object], expected: str) -> None:
    assert _refused({"extra_args": args}) == expected


@pytest.mark.parametrize("args", [["--api-ke", "SECRETABBR"], ["--api=SECRETABBR"], ["--admin-api", "SECRETABBR"]])
def test_an_abbreviated_secret_flag_is_refused_by_its_full_name(args: list[str]) -> None:
    """SGLang's parser takes --api-ke for --api-key (allow_abbrev), where nothing would hide its value."""
    line = _refused({"extra_args": args})
    assert "write it out: --" in line and "SECRETABBR" not in line
    assert line.startswith(f"server.extra_args: '{args[0].partition('=')[0]}' abbreviates the secret flag")


def test_a_flag_that_merely_starts_like_a_secret_one_is_accepted() -> None:
    from autotune.spec import parse_study

    spec = parse_study({"name": "x", "server": {"model_path": "m", "extra_args": ["--ssl-keyfile", "/k.pem"]},
                        "hardware": {"gpu": "h100"}})
    assert spec.server.extra_args == ["--ssl-keyfile", "/k.pem"]


@pytest.mark.parametrize(("kind", "name", "expected"), [
    ("flags", "--api-key", "search_space.flags.--api-key: a secret cannot be searched: its values would be stored as "
                           "trial parameters; set it in server.extra_args"),
    ("flags", "--api-keys", "search_space.flags.--api-keys: a secret cannot be searched: its values would be stored "
                            "as trial parameters; set it in server.extra_args"),
    ("env", "HF_TOKEN", "search_space.env.HF_TOKEN: a secret cannot be searched: its values would be stored as trial "
                        "parameters; set it in server.env"),
    ("flags", "--admin-api", "search_space.flags.--admin-api: abbreviates the secret flag --admin-api-key, and a secret "
                             "cannot be searched: its values would be stored as trial parameters; set it, written out, "
                             "in server.extra_args"),
])
def test_a_secret_cannot_be_searched(kind: str, name: str, expected: str) -> None:
    assert _refused(search_space={kind: {name: {"choices": ["CHOICESECRET1", "CHOICESECRET2"]}}}) == expected
    # a value the file cannot hold is refused first: by its position, not its value
    assert "CHOICESECRET" not in _refused(search_space={kind: {name: {"choices": ["CHOICESECRET\x00"]}}})


@pytest.mark.parametrize("unit", ["a://b:", "a.", "a-", "x=", "a:", "--a '", "a='", "'--a', '", "a://b:c@", "a.a.a://"])
def test_a_long_hostile_line_is_read_whole_without_failing(unit: str) -> None:
    """Lines built to nest pairs (``a://b:a://b:...``) or to make a pattern restart at every
    character: redaction reads them whole (a secret at their end is still hidden) and never fails.
    How long it takes per character: benchmarks/redact_scaling.py."""
    line = unit * 5_000 + " HF_TOKEN=hf_" + "a1B2" * 9 + " --api-key KEYATTHEEND"
    out = redact_text(line)
    assert "KEYATTHEEND" not in out and "a1B2a1B2" not in out
    if "@" not in unit:  # nothing in the line but the two secrets is hidden (a://b:c@...@: a URL's password)
        assert out.startswith(unit * 4_000)


@pytest.mark.parametrize(("line", "secret", "kept"), [
    ("cfg.HF_TOKEN=SECRETAFTERDOT port=1", "SECRETAFTERDOT", "port=1"),  # a name after a '.' is read with its prefix
    ("postgresql://u:PWSECRET@h/db then x://y:z", "PWSECRET", "x://y:z"),  # a later URL without userinfo
])
def test_pairs_after_a_dot_and_urls_in_a_line(line: str, secret: str, kept: str) -> None:
    out = redact_text(line)
    assert secret not in out and kept in out
