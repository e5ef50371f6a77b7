"""Hostile input, families 2 and 3: every value checked before anything starts; ``calibrate`` never
stores a bad value (issue 34).

Each bad value of a study (a seed, an environment variable's name or text, an argument, a reference
point, an SLO key, a length past the model's context, a calibration or a GPU's memory that is not a
finite measurement, a 400-digit ``--set`` value) is refused by the checks ``plan`` and ``run`` share
(autotune/preflight.py): exit 2, one line naming the field and the value, no database, no run
directory. Before, most passed ``plan`` and crashed a run after its first launch, leaving a trial
RUNNING. A server log whose figures are not a measurement of the study's GPU, or whose weights are
another model's, stores nothing (``--force`` stores the second kind, never the first).
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.hostile import SECONDS, cli, nothing_stored, one_line, setting, study

pytestmark = pytest.mark.timeout(SECONDS)

# (edit, what the line must hold)
CASES = {
    "negative sampler seed": (setting("sampler.seed", -5), ["sampler.seed: ", "greater than or equal to 0", "-5"]),
    "sampler seed past 2**32": (setting("sampler.seed", 2**40), ["sampler.seed: ", "1099511627776"]),
    "negative simulator seed": (setting("server.sim.seed", -1), ["server.sim.seed: ", "-1"]),
    "'=' in an environment name": (setting("server.env", {"A=B": "1"}), ["server.env: ", "'A=B'"]),
    "NUL in an environment value": (setting("server.env", {"HF_TOKEN": "hf_x\x00y"}),
                                    ["server.env.HF_TOKEN: a NUL byte or a lone surrogate at position 4 of the value"]),
    "newline in an environment value": (setting("server.env", {"HF_TOKEN": "hf_secret\n"}),
                                        ["server.env: HF_TOKEN: non-printable character '\\n' at position 9"]),
    "NUL in an argument": (setting("server.extra_args", ["--served-model-name", "a\x00b"]),
                           ["server.extra_args[1]: a NUL byte", r"'a\x00b'"]),
    "escape sequence in an argument": (setting("server.extra_args", ["--served-model-name", "a\x1b[31mb"]),
                                       ["server.extra_args: ", r"non-printable character '\x1b'"]),
    "newline in a searched variable": (setting("search_space.env", {"SGLANG_X": {"choices": ["1\n2"]}}),
                                       ["search_space.env.SGLANG_X.choices: ", r"non-printable character '\n'"]),
    "reference value of the wrong type": (setting("search.references", {"mine": {"mem_fraction_static": "abc"}}),
                                          ["search.references.mine.mem_fraction_static: bad value", "'abc'"]),
    "reference of a knob outside the space": (setting("search.references", {"mine": {"max_running_requests": 8}}),
                                              ["search.references.mine.max_running_requests: not a knob"]),
    "reference choice outside the choices": (setting("search.references", {"mine": {"cuda_graph_max_bs": 24}}),
                                             ["search.references.mine.cuda_graph_max_bs: 24 is not one of its "
                                              "choices (8, 16)"]),
    # every trial an OverflowError at run time before (F12)
    "simulator time_scale 1e308": (setting("server.sim.time_scale", 1e308),
                                   ["server.sim.time_scale: Input should be less than or equal to 1000000", "1e+308"]),
    "simulator time_scale 1e-300": (setting("server.sim.time_scale", 1e-300),
                                    ["server.sim.time_scale: Input should be greater than or equal to 0.001"]),
    "simulator slow_tokens fault 1e308": (setting("server.sim.faults", ["slow_tokens:1e308"]),
                                          ["server.sim.faults: slow_tokens must be at most 1e+06, got "
                                           "'slow_tokens:1e308'"]),
    "unknown simulator fault": (setting("server.sim.faults", ["crash_after:1", "bogus"]),
                                ["server.sim.faults: unknown fault 'bogus'"]),
    "unknown goodput_slo key": (setting("workload.goodput_slo", {"ttfb_ms": 100}),
                                ["workload.goodput_slo: unknown key 'ttfb_ms'"]),
    "input_len 10**15": (setting("workload.input_len", 10**15), ["workload.input_len: ", "1000000000000000"]),
    # what a load point builds, checked as the load generator checks it (autotune.load.spec.load_problem)
    "warm-up prompts past the budget": (lambda d: d["workload"].update(warmup_requests=1_000_000, input_len=256),
                                        ["workload: (num_prompts + warmup_requests) x input_len = (8 + 1,000,000) "
                                         "x 256 = 256,002,048 prompt tokens, more than the 200,000,000"]),
    "2,000,000 warm-up requests": (setting("workload.warmup_requests", 2_000_000),
                                   ["workload.warmup_requests: ", "less than or equal to 1000000", "2000000"]),
    "random kind of 10**11 tokens": (setting("workload.dataset", {"kind": "random", "input_len": 10**11}),
                                     ["workload.dataset.random.input_len: ", "100000000000"]),
    "10^8 shared-prefix prompts": (setting("workload.dataset", {"kind": "generated-shared-prefix",
                                                                "num_groups": 100_000, "prompts_per_group": 1000}),
                                   ["workload.dataset.generated-shared-prefix: num_groups x prompts_per_group = "
                                    "100,000 x 1,000 = 100,000,000 requests, more than the 1,000,000"]),
    "shared-prefix tokens past the budget": (setting("workload.dataset", {"kind": "generated-shared-prefix",
                                                                          "num_groups": 1000, "prompts_per_group": 100,
                                                                          "system_prompt_len": 4000}),
                                             ["(system_prompt_len + question_len) = 100,000 x 4,128 = 412,800,000 "
                                              "prompt tokens"]),
    "10^9 conversations": (setting("workload.dataset", {"kind": "multi-turn", "num_conversations": 10**9}),
                           ["workload.dataset.multi-turn.num_conversations: ", "1000000000"]),
    "conversations past the budget": (setting("workload.dataset", {"kind": "multi-turn", "num_conversations": 10_000,
                                                                   "turns": 100}),
                                      ["workload.dataset.multi-turn: num_conversations x (system_prompt_len + turns "
                                       "x (user_len + output_len)) = 10,000 x (0 + 100 x 256) = 256,000,000 tokens"]),
    "request_rate 1e-300": (setting("workload.request_rate", 1e-300),
                            ["workload: request_rate=1e-300: num_prompts / request_rate = 8 / 1e-300 = 8e+300 s",
                             "more than the 604,800 s"]),
    # a time with no upper bound waited on a hung server for ever (docs/input-limits.md: a day, a week, a year)
    "duration_s 1e300": (setting("workload.duration_s", 1e300),
                         ["workload.duration_s: Input should be less than or equal to 604800 (got 1e+300)"]),
    "infinite startup_timeout_s": (setting("server.startup_timeout_s", float("inf")),
                                   ["server.startup_timeout_s: Input should be less than or equal to 86400 (got inf)"]),
    "startup_timeout_s of a day and a second": (setting("server.startup_timeout_s", 86_401),
                                                ["server.startup_timeout_s: ", "86400 (got 86401)"]),
    "first_token_s 1e300": (setting("workload.timeouts", {"first_token_s": 1e300}),
                            ["workload.timeouts.first_token_s: Input should be less than or equal to 86400"]),
    "infinite total_s": (setting("workload.timeouts", {"total_s": float("inf")}),
                         ["workload.timeouts.total_s: ", "(got inf)"]),
    "infinite wall_time_s": (setting("budget.wall_time_s", float("inf")),
                             ["budget.wall_time_s: Input should be less than or equal to 31536000 (got inf)"]),
    "gpu_hours 1e300": (setting("budget.gpu_hours", 1e300),
                        ["budget.gpu_hours: Input should be less than or equal to 8970240 (got 1e+300)"]),
    "input + output past the context": (setting("workload.input_len", 40_928),
                                        ["workload.input_len + output_len = 40,928 + 32 reaches the context "
                                         "length 40,960 (the model's max_position_embeddings)"]),
    "NaN calibration": (setting("calibration", {"p_gib": float("nan"), "a_gib": 10.0}),
                        ["calibration.p_gib: Input should be a finite number (got nan)"]),
    "infinite calibration": (setting("calibration", {"p_gib": 79.0, "a_gib": float("inf")}),
                             ["calibration.a_gib: Input should be a finite number (got inf)"]),
    "negative calibration": (setting("calibration", {"p_gib": 79.0, "a_gib": -1.0}),
                             ["calibration.a_gib: Input should be greater than 0 (got -1.0)"]),
    "calibration past the GPU": (setting("calibration", {"p_gib": 7000.0, "a_gib": 10.0}),
                                 ["calibration: p_gib=7000.0 GiB is more than the GPU's memory (79.65 GiB) (h100)"]),
    "NaN memory of a custom GPU": (setting("hardware", {"gpu": "l4x", "memory_mib": float("nan")}),
                                   ["hardware.memory_mib: must be a finite number > 0 (got nan)"]),
    "text memory of a custom GPU": (setting("hardware", {"gpu": "l4x", "memory_mib": "lots"}),
                                    ["hardware.memory_mib: must be a finite number > 0 (got 'lots')"]),
    "a 10^12-value integer range": (setting("search_space.speculative", {"algorithm": {"choices": ["NGRAM"]},
                                                                         "num_draft_tokens": {"low": 1,
                                                                                              "high": 10**12}}),
                                    ["search_space.speculative.num_draft_tokens.high: ", "1000000000000"]),
}


def test_a_bad_environment_value_is_named_never_echoed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """server.env may hold a secret (HF_TOKEN): the line names the variable and where the bad character
    is, never the value."""
    for env in ({"HF_TOKEN": "hf_secret\n"}, {"HF_TOKEN": "hf_secret\x00"}, {"HF=TOKEN": "hf_secret"}):
        line = one_line(*cli(capsys, ["plan", str(study(tmp_path, setting("server.env", env)))]), "server.env")
        assert "hf_secret" not in line and "TOKEN" in line


@pytest.mark.parametrize("command", ["plan", "run"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_value_is_one_line_before_anything_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        cli_signal_handlers: None, case: str, command: str) -> None:
    edit, needles = CASES[case]
    argv = [command, str(study(tmp_path, edit))] + (["--no-progress"] if command == "run" else [])
    one_line(*cli(capsys, argv), *needles)
    nothing_stored(tmp_path)


def test_a_400_digit_set_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line(*cli(capsys, ["plan", str(study(tmp_path)), "--set", "cuda_graph_max_bs=" + "9" * 400]),
                    "--set: bad value for cuda_graph_max_bs: '9999")
    assert "9999... (must be a whole number)" in line and len(line) < 160  # the value is cut, not echoed whole


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=12))
def test_any_text_in_an_argument_either_launches_or_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                text: str) -> None:
    """Whatever text a study gives an argument, the study loads (and the argv can hold it: printable,
    no NUL) or it is refused on one line; never a traceback, never a crash at the first launch."""
    code, lines = cli(capsys, ["plan", str(study(tmp_path, setting("server.extra_args",
                                                                    ["--served-model-name", text])))])
    # What the study holds: YAML reads NEL, LS and PS as line breaks ('\x85' is loaded as ' ').
    held = yaml.safe_load(yaml.safe_dump([text], allow_unicode=True))[0]
    if code == 0:
        assert held.isprintable() and "\x00" not in held
    else:
        one_line(code, lines, "server.extra_args")


# ---- stored calibration -------------------------------------------------------------------------
def _log(p_gib: str, a_gib: str, weights_gib: str = "61.02") -> str:
    return "\n".join([
        "[2026-03-02 10:00:00] server_args={'model_path': '/models/m', 'tp_size': 1, 'dp_size': 1}",
        f"[2026-03-02 10:00:10 TP0] Load weight begin. avail mem={p_gib} GB",
        f"[2026-03-02 10:02:00 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, "
        f"avail mem={a_gib} GB, mem usage={weights_gib} GB.",
    ])


@pytest.mark.parametrize("force", [False, True])
def test_a_300_digit_figure_is_never_stored(tmp_path: Path, capsys: pytest.CaptureFixture[str], force: bool) -> None:
    log = tmp_path / "server.log"
    log.write_text(_log("79.10", "1" + "0" * 300 + ".00"))
    argv = ["calibrate", str(study(tmp_path)), "--from-log", str(log)] + (["--force"] if force else [])
    one_line(*cli(capsys, argv), "--from-log: server.log: avail mem=1000000000000000000000000000000000000... GB is "
             "not a finite number of GiB within the GPU's memory (79.65 GiB) (h100); nothing stored")
    nothing_stored(tmp_path)
    assert cli(capsys, ["plan", str(study(tmp_path))])[0] == 0  # and every later plan still works


def test_a_smaller_model_of_the_same_architecture_is_refused_unless_forced(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-8B's 15 GiB of weights into a Qwen3-32B study (61 GiB at TP 1): the KV pool it implies is
    24 x the study model's. Refused like another architecture; --force stores it and says so."""
    path, log = study(tmp_path), tmp_path / "qwen3-8b.log"
    log.write_text(_log("79.10", "63.50", "15.27"))
    one_line(*cli(capsys, ["calibrate", str(path), "--from-log", str(log)]),
             "weights: the log's server loaded 15.27 GiB per GPU, under half of the study model's 61.02 GiB at "
             "TP 1 (qwen3-32b-class): a smaller model", "nothing stored", "--force")
    nothing_stored(tmp_path)
    from autotune.cli import main

    capsys.readouterr()
    assert main(["calibrate", str(path), "--from-log", str(log), "--force"]) == 0
    assert "stored despite (--force): weights: the log's server loaded 15.27 GiB" in capsys.readouterr().out
    log.write_text(_log("79.10", "17.80", "61.30"))  # the study's own model: stored without a word
    assert cli(capsys, ["calibrate", str(path), "--from-log", str(log)]) == (0, [])


def test_a_log_of_malformed_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``1.2.3`` is no figure (the line is skipped), a 5,000-digit one reads as infinite (refused, named as the
    log wrote it, clipped), a 5,000-digit token count is no integer Python converts (skipped): one line, not a
    traceback."""
    log = tmp_path / "server.log"
    log.write_text(_log("1.2.3", "9" * 5000) + "\n[2026-03-02 10:02:10 TP0] KV Cache is allocated. #tokens: "
                   + "9" * 5000 + ", KV size: 1.00 GB")
    one_line(*cli(capsys, ["calibrate", str(study(tmp_path)), "--from-log", str(log)]),
             "--from-log: server.log: avail mem=9999999999999999999999999999999999999... GB is not a finite "
             "number of GiB within the GPU's memory (79.65 GiB) (h100); nothing stored")
    nothing_stored(tmp_path)


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize(("weights", "shown"), [("1e999", "mem usage=1e999 GB"),
                                                ("9" * 400 + ".00", "mem usage=" + "9" * 37 + "... GB"),
                                                ("1" + "0" * 300 + ".00", "mem usage=1" + "0" * 36 + "... GB"),
                                                ("80.00", "mem usage=80.00 GB")])
def test_a_weights_figure_past_the_gpu_is_never_used(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     force: bool, weights: str, shown: str) -> None:
    """``mem usage=`` of "Load weight end" read as inf (400 digits, 1e999 was skipped as no figure) or past the
    GPU was the weights check's "loaded inf GiB per GPU ... a larger model", which --force stored anyway:
    refused, --force or not, naming the figure as the log wrote it, clipped."""
    log = tmp_path / "server.log"
    log.write_text(_log("79.10", "17.80", weights))
    argv = ["calibrate", str(study(tmp_path)), "--from-log", str(log)] + (["--force"] if force else [])
    line = one_line(*cli(capsys, argv), f"--from-log: server.log: {shown} is not a finite number of GiB within the "
                    "GPU's memory (79.65 GiB) (h100); nothing stored")
    assert "inf" not in line and len(line) < 200
    nothing_stored(tmp_path)


def test_a_bad_calibration_stored_by_an_older_autotune_is_one_line(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A study whose storage already holds A = 1e300 (stored before these checks): plan names it."""
    path = study(tmp_path)
    storage = f"sqlite:///{tmp_path / 'hostile.db'}"
    optuna.create_study(study_name="hostile", storage=storage).set_user_attr(
        "calibration", {"p_gib": 79.1, "a_gib": 1e300, "source": "log old.log"})
    one_line(*cli(capsys, ["plan", str(path)]), "calibration stored with study 'hostile' (log old.log): "
             "a_gib=1e+300 GiB is more than the GPU's memory")


def test_the_weight_bounds_hold_for_the_public_logs_of_plain_sglang() -> None:
    """Every public log (tests/data/public_logs) that names its weights per GPU, served by plain SGLang from
    the checkpoint its config.json describes, passes the weight bounds against its own model; the ones
    left out could not (ktransformers keeps the routed experts on the CPU; pr9162 served the FP4
    checkpoint whose hf_quant_config.json the data set does not hold, so its config reads as BF16)."""
    from autotune.sglang.logparse import parse_log, summarize
    from autotune.sglang.models.profile import profile_from_config
    from autotune.spec import parse_study
    from autotune.study.log_check import _weights_contradiction, logged_sizes

    root = Path(__file__).parent / "data" / "public_logs"
    spec = parse_study({"name": "p", "server": {"model_path": "m"}, "hardware": {"gpu": "h100"}})
    left_out = {"sglang-pr9162-dsr1-fp4-b200-tp4"}
    checked = 0
    for entry in json.loads((root / "manifest.json").read_text()):
        if not entry.get("config") or entry["id"].startswith("ktransformers") or entry["id"] in left_out:
            continue
        text = (root / entry["id"] / "server.log").read_text()
        logged = summarize(parse_log(text)).get("weights_gib")
        if logged is None:
            continue
        model = profile_from_config(json.loads((root / entry["config"]).read_text()), path=entry["id"])
        tp = logged_sizes(text).get("tp_size") or entry.get("tp") or 1
        assert _weights_contradiction(spec, logged, model, tp) is None, entry["id"]
        checked += 1
    assert checked >= 8
    # and the case it is for: Qwen3-8B's weights against Qwen3-32B's own, at TP 1
    qwen32 = profile_from_config(json.loads((Path(__file__).parents[1] / "studies" / "models" / "qwen3-32b-class"
                                             / "config.json").read_text()))
    assert "a smaller model" in (_weights_contradiction(spec, 15.27, qwen32, 1) or "")


def test_run_n_trials_is_bounded_like_the_study_files(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      cli_signal_handlers: None) -> None:
    one_line(*cli(capsys, ["run", str(study(tmp_path)), "--n-trials", str(10**12), "--no-progress"]),
             "--n-trials: must be from 1 to 100000, got 1000000000000")
    nothing_stored(tmp_path)


def test_the_time_bounds_are_reached_not_passed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each time's bound itself is a value plan takes: a day to start, a week of sending, a year of study."""
    def edit(d: dict) -> None:
        d["server"]["startup_timeout_s"] = 86_400
        d["workload"].update(duration_s=604_800, timeouts={"connect_s": 86_400, "first_token_s": 86_400,
                                                           "between_tokens_s": 86_400, "total_s": 86_400})
        d["budget"] = {"wall_time_s": 365 * 86_400, "gpu_hours": 1024 * 365 * 24}
    assert cli(capsys, ["plan", str(study(tmp_path, edit))]) == (0, [])
