"""Hostile input, family 1: a small file cannot eat the machine (issue 34).

A study file, a model's config.json or shard, a data set, a tokenizer or a server log that is an alias
bomb, 100,000 levels deep, not UTF-8, unreadable, not a regular file (/dev/zero, a FIFO, a symlink to
either) or too large; a search space whose grid would be listed whole. Each: exit 2 and one line
naming the field and the value, nothing stored, within 10 s (pytest-timeout) and bounded memory: the
cases that ate the machine before run in a subprocess with 1 GiB of address space, the rest in this
process with their allocations counted (tests/hostile.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.hostile import QWEN32B, SECONDS, cli, cli_bounded, nothing_stored, one_line, setting, study

ALIAS_BOMB = "".join(
    [f"a0: &a0 [{', '.join(['lol'] * 10)}]\n"]
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)]  # 10^9 values
) + "name: *a8\n"


def _model(tmp: Path, *, config: dict | None = None, link_config: str | None = None,
           shard: bytes | None = None, link_shard: str | None = None) -> Path:
    model = tmp / "model"
    model.mkdir()
    if link_config:
        os.symlink(link_config, model / "config.json")
    else:
        cfg = json.loads((QWEN32B / "config.json").read_text())
        cfg.update(config or {})
        (model / "config.json").write_text(json.dumps(cfg))
    if shard is not None:
        (model / "model.safetensors").write_bytes(shard)
    if link_shard:
        os.symlink(link_shard, model / "model.safetensors")
    return model


def _header(header: dict) -> bytes:
    raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw


pytestmark = pytest.mark.timeout(2 * SECONDS)

_HUGE_SPACE = (
    "import sys; from autotune.spec import load_study_spec; from autotune import space;"
    "from autotune.study.search import initial_design, samplers;"
    "spec = load_study_spec('study.yaml');"
    "print(samplers.choose_sampler(spec)[1], file=sys.stderr);"
    "pts = initial_design.build(spec, {}, lambda p: {'verdict': 'fits', 'kv_tokens': 10**6}, 6);"
    "sp = spec.search_space.speculative;"
    "print(len(pts), space.spec_variant_count(sp), sum(1 for _ in space.spec_variants(sp)), file=sys.stderr)"
)


@pytest.fixture(scope="module")
def eaters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, list[str], Path]]:
    """The inputs that ate the machine before, each in its own directory, run in one subprocess bounded
    to 1 GiB and 10 s: name -> (exit code, stderr lines, directory)."""
    cases: dict[str, tuple[Path, dict]] = {}

    def new(name: str) -> Path:
        d = tmp_path_factory.mktemp(name.replace(" ", "-").replace("/", "_"))
        return d

    d = new("alias bomb")
    (d / "study.yaml").write_text(ALIAS_BOMB)
    cases["alias bomb"] = (d, {"argv": ["plan", str(d / "study.yaml")]})
    d = new("deep")
    (d / "study.yaml").write_text("name: " + "[" * 100_000 + "]" * 100_000 + "\n")
    cases["deep"] = (d, {"argv": ["plan", str(d / "study.yaml")]})
    for kind in ("/dev/zero", "FIFO"):
        d = new(f"config {kind}")
        (d / "model").mkdir()
        if kind == "FIFO":
            os.mkfifo(d / "model" / "config.json")
        else:
            os.symlink("/dev/zero", d / "model" / "config.json")
        path = study(d, setting("server.model_path", str(d / "model")))
        cases[f"config {kind}"] = (d, {"argv": ["run", str(path), "--no-progress"]})
    d = new("huge grid")
    path = study(d, setting("search_space.mem_fraction_static", {"low": 0.5, "high": 0.95, "step": 1e-9}))
    cases["huge grid"] = (d, {"argv": ["plan", str(path)]})
    d = new("set lists")
    fs = ",".join(f"{0.5 + i * 0.001:.3f}" for i in range(300))
    sizes = ",".join(str(i) for i in range(1, 301))
    cases["set lists"] = (d, {"argv": ["plan", str(study(d)), "--set", f"mem_fraction_static={fs}",
                                       "--set", f"cuda_graph_max_bs={sizes}", "--set", f"chunked_prefill_size={sizes}"]})
    d = new("huge space")
    study(d, lambda x: x["search_space"].update(
        mem_fraction_static={"low": 0.5, "high": 0.95, "step": 1e-9},
        speculative={"algorithm": {"choices": ["none", "NGRAM"]}, "num_draft_tokens": {"low": 1, "high": 10**9}}))
    cases["huge space"] = (d, {"code": f"import os; os.chdir({str(d)!r}); " + _HUGE_SPACE})
    results = cli_bounded([case for _, case in cases.values()], tmp_path_factory.getbasetemp())
    return {name: (*res, cases[name][0]) for name, res in zip(cases, results, strict=True)}


# ---- the study file ----------------------------------------------------------------------------
def test_an_alias_bomb(eaters: dict) -> None:
    """24 lines standing for 10^9 values: refused while it is composed (the old error message formatted
    the whole expansion: 60 s, 2.2 GB, then a MemoryError)."""
    code, lines, d = eaters["alias bomb"]
    one_line(code, lines, f"{d / 'study.yaml'}: line 1: holds more than 100,000 values once its aliases are expanded")
    nothing_stored(d)


def test_nesting_100000_deep(eaters: dict) -> None:
    """Refused at level 65 as it is read (before: a RecursionError traceback from the composer)."""
    code, lines, d = eaters["deep"]
    one_line(code, lines, f"{d / 'study.yaml'}: line 1: nested more than 64 levels deep")


@pytest.mark.parametrize(("case", "needles"), [
    ("2 MiB", ["study file: 2 MiB, more than the 1 MiB"]),
    ("/dev/zero", ["study file: must be a regular file, this is a device"]),
    ("FIFO", ["study file: must be a regular file, this is a FIFO"]),
    ("directory", ["study file: must be a regular file, this is a directory"]),
    ("NUL byte", ["position 7: unacceptable character #x0000"]),
])
def test_a_study_file_that_is_not_a_small_text(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str,
                                               needles: list[str]) -> None:
    path = tmp_path / "study.yaml"
    if case == "2 MiB":
        path.write_text("name: x\n" + "#" * 2**21 + "\n")
    elif case == "/dev/zero":
        os.symlink("/dev/zero", path)
    elif case == "FIFO":
        os.mkfifo(path)
    elif case == "directory":
        path.mkdir()
    else:
        path.write_text("name: a\x00b\n")
    one_line(*cli(capsys, ["plan", str(path)]), *needles)
    nothing_stored(tmp_path)


def test_a_study_file_not_utf8_or_unreadable(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "study.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    one_line(*cli(capsys, ["plan", str(path)]), "study file: unreadable, not UTF-8 text (byte 9")
    path.write_text("name: x\n")
    path.chmod(0)
    if os.geteuid() == 0:  # root reads any file: the refusal the kernel would give, given
        real_open = os.open

        def refuse(p: object, flags: int, *a: object) -> int:
            if str(p) == str(path):
                raise PermissionError(13, "Permission denied")
            return real_open(p, flags, *a)  # type: ignore[arg-type]
        monkeypatch.setattr("autotune.files.os.open", refuse)
    one_line(*cli(capsys, ["plan", str(path)]), "study file: cannot read it (Permission denied)")
    nothing_stored(tmp_path)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300))
def test_any_bytes_as_a_study_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               data: bytes) -> None:
    path = tmp_path / "study.yaml"
    path.write_bytes(data)
    one_line(*cli(capsys, ["plan", str(path)]))


# ---- files the study points at -----------------------------------------------------------------
@pytest.mark.parametrize("kind", ["/dev/zero", "FIFO"])
def test_a_model_config_that_never_ends(eaters: dict, kind: str) -> None:
    """Read to the end before: /dev/zero until memory ran out, a FIFO without a writer forever."""
    code, lines, d = eaters[f"config {kind}"]
    one_line(code, lines, "server.model_path: config.json: must be a regular file, this is a "
             + ("FIFO" if kind == "FIFO" else "device"), str(d / "model" / "config.json"))
    nothing_stored(d)


@pytest.mark.parametrize(("case", "needles"), [
    ("shard -> /dev/zero", ["server.model_path: safetensors shard: must be a regular file, this is a device"]),
    ("dataset_path -> /dev/zero", ["workload.dataset_path: must be a regular file, this is a device"]),
    ("dataset_path FIFO", ["workload.dataset_path: must be a regular file, this is a FIFO"]),
    ("trace -> /dev/zero", ["workload.dataset.path: ", "must be a regular file, this is a device"]),
    ("tokenizer FIFO", ["workload.tokenizer: must be a regular file, this is a FIFO"]),
    ("dataset line of 5,000 digits", ["workload.dataset_path=", "line 1: not JSON (Exceeds the limit (4300 digits)"]),
])
def test_a_file_the_study_points_at_that_is_not_a_bounded_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             case: str, needles: list[str]) -> None:
    if case.startswith("shard"):
        edit = setting("server.model_path", str(_model(tmp_path, link_shard="/dev/zero")))
    elif case.startswith("dataset_path"):
        os.symlink("/dev/zero", tmp_path / "prompts.jsonl") if "zero" in case else os.mkfifo(tmp_path / "prompts.jsonl")
        edit = setting("workload.dataset_path", str(tmp_path / "prompts.jsonl"))
    elif case.startswith("trace"):
        os.symlink("/dev/zero", tmp_path / "trace.jsonl")
        edit = setting("workload.dataset", {"kind": "trace", "path": str(tmp_path / "trace.jsonl")})
    elif case.startswith("tokenizer"):
        os.mkfifo(tmp_path / "tokenizer.json")
        edit = setting("workload.tokenizer", str(tmp_path / "tokenizer.json"))
    else:
        (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi", "output_len": ' + "9" * 5000 + "}\n")
        edit = setting("workload.dataset_path", str(tmp_path / "prompts.jsonl"))
    one_line(*cli(capsys, ["plan", str(study(tmp_path, edit))]), *needles)
    nothing_stored(tmp_path)


@pytest.mark.parametrize(("case", "needles"), [
    ("40 rows of 10M tokens", ["workload.dataset.path: ", "trace.jsonl: its 40 requests hold 400,000,000 prompt tokens, "
                               "more than the 200,000,000 a load point builds"]),
    ("block_size 10**9", ["workload.dataset.trace.block_size: ", "1000000000"]),
    ("blocks of 10M tokens", ["trace.jsonl: 40 distinct hash_ids x block_size 10,000,000 = 400,000,000 tokens of "
                              "blocks"]),
    ("a trace of 30,000 years", ["trace.jsonl:2: timestamp: the trace lasts 1e+12 s at slowdown_factor 1"]),
])
def test_a_trace_is_bounded_in_what_it_builds_before_the_study(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               cli_signal_handlers: None,
                                                               case: str, needles: list[str]) -> None:
    """A 2.5 KB Mooncake trace of 40 rows x 10M tokens, or hash blocks of 10^9 tokens, passed ``plan``, and
    ``run`` ran out of memory building its prompts (trial left RUNNING): refused up front, on one line."""
    trace = tmp_path / "trace.jsonl"
    dataset: dict = {"kind": "trace", "path": str(trace)}
    if case.startswith("40 rows"):
        rows = [{"timestamp": t, "input_length": 10_000_000, "output_length": 1} for t in range(40)]
    elif case.startswith("a trace of"):
        rows = [{"timestamp": 0, "input_length": 8, "output_length": 1},
                {"timestamp": 1e15 - 1, "input_length": 8, "output_length": 1}]
    else:
        rows = [{"timestamp": t, "input_length": 8, "output_length": 1, "hash_ids": [t]} for t in range(40)]
        dataset["block_size"] = 10**9 if "10**9" in case else 10_000_000
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for command in ("plan", "run"):
        one_line(*cli(capsys, [command, str(study(tmp_path, setting("workload.dataset", dataset)))]), *needles)
        nothing_stored(tmp_path)


@pytest.mark.parametrize("field", ["workload.dataset_path", "workload.dataset"])
def test_a_token_id_prompt_file_is_refused_before_its_ids_are_built(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    cli_signal_handlers: None, field: str) -> None:
    """A 20 MB line of 10,000,065 token ids (a 2 GiB file holds 10^9) was parsed whole, every id a list entry:
    refused by counting its commas and brackets, before json builds it, on one line naming the file's line."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"output_len": 4, "prompt": "hi"}\n{"output_len": 4, "input_ids": [' + "1," * 10_000_064 + "1]}\n")
    value = str(prompts) if field.endswith("path") else {"kind": "file", "path": str(prompts)}
    where = "workload.dataset_path=" if field.endswith("path") else f"workload.dataset.path: {prompts}:2: "
    for command in ("plan", "run"):
        one_line(*cli(capsys, [command, str(study(tmp_path, setting(field, value)))]), where,
                 "10,000,067 commas and brackets on one line, more JSON values than a prompt's 10,000,000 tokens")
        nothing_stored(tmp_path)


@pytest.mark.parametrize("field", ["workload.dataset_path", "workload.dataset"])
def test_a_prompt_file_line_without_end_is_not_held_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch, field: str) -> None:
    """A prompt file is read a line at a time, but a 1 GiB file without a newline was one line, held whole
    (10.5 s, 2.1 GB) before it was refused as not JSON: a line longer than ``PROMPT_LINE_BYTES`` (made small
    here: the real one is 128 MiB) is refused once that much is read, naming its line."""
    from autotune.load import formats
    from autotune.load import prompts as prompt_mod

    for module in (formats, prompt_mod):
        monkeypatch.setattr(module, "PROMPT_LINE_BYTES", 1000)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"output_len": 4, "prompt": "hi"}\n{"output_len": 4, "prompt": "' + "a" * 5000)
    value = str(prompts) if field.endswith("path") else {"kind": "file", "path": str(prompts)}
    where = "workload.dataset_path" if field.endswith("path") else f"workload.dataset.path: {prompts}: "
    one_line(*cli(capsys, ["plan", str(study(tmp_path, setting(field, value)))]), where,
             "line 2 is longer than the 1000 B a line may hold")
    nothing_stored(tmp_path)


def test_a_line_of_exactly_the_line_limit_is_read(tmp_path: Path) -> None:
    """The bound is on the line's text: its own line end (\\n or \\r\\n) does not count against it."""
    from autotune.errors import ConfigError
    from autotune.files import read_lines

    path = tmp_path / "lines.txt"
    path.write_bytes(b"x" * 10 + b"\r\n" + b"y" * 10 + b"\n" + b"z" * 10)
    assert [text for _, text in read_lines(path, "f", 1000, line_limit=10)] == ["x" * 10, "y" * 10, "z" * 10]
    path.write_bytes(b"x" * 10 + b"\n" + b"y" * 11 + b"\n")
    lines = read_lines(path, "f", 1000, line_limit=10)
    assert next(lines) == (1, "x" * 10)
    with pytest.raises(ConfigError, match="f: line 2 is longer than the 10 B a line may hold"):
        next(lines)


@pytest.mark.parametrize(("limit", "rows", "needles"), [
    ("MAX_PROMPTS", ['{"input_ids": [7]}'] * 6,
     ["prompts.jsonl:6: more than the 5 requests a load point sends"]),
    ("MAX_PROMPT_TOKENS", ['{"input_ids": [' + ", ".join(["7"] * 400) + "]}"] * 3,
     ["prompts.jsonl:3: input_ids: 1,200 tokens up to this line, more than the 1,000 prompt tokens a load point "
      "builds"]),
    ("MAX_SEQUENCE_TOKENS", ['{"prompt": "hi"}', '{"input_ids": [' + ", ".join(["7"] * 1001) + "]}"],
     ["prompts.jsonl:2: input_ids: 1,001 tokens, more than the 1,000 a prompt may hold"]),
])
def test_a_token_id_prompt_file_is_bounded_like_every_workload(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch, limit: str,
                                                               rows: list[str], needles: list[str]) -> None:
    """Requests, a prompt's ids and the ids in all are counted line by line as the file is read (limits made
    small: the real ones are 10^6 rows, 10^7 and 2 x 10^8 ids), refused at the line that passes them: the
    line after it, not UTF-8, is never read (the whole file was decoded and split first)."""
    from autotune.load import formats

    monkeypatch.setattr(formats, limit, 5 if limit == "MAX_PROMPTS" else 1000)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_bytes("".join(row + "\n" for row in rows).encode() + b"\xff not UTF-8\n")  # never read
    one_line(*cli(capsys, ["plan", str(study(tmp_path, setting("workload.dataset", {"kind": "file",
                                                                                   "path": str(prompts)})))]),
             "workload.dataset.path: ", *needles)
    nothing_stored(tmp_path)


@pytest.mark.parametrize(("config", "header", "needles"), [
    ({"num_key_value_heads": "eight"}, None, ["num_key_value_heads='eight' is not a size"]),
    ({"max_position_embeddings": float("nan")}, None, ["max_position_embeddings=nan is not a size"]),
    ({"hidden_size": 10**400}, None, ["hidden_size=<an integer of about 401 digits> is not a size"]),
    ({}, {"w": {"dtype": "BF16", "shape": ["x", 2], "data_offsets": [0, 4]}},
     ["safetensors header 'w' shape=['x', 2] is not a list of sizes"]),
    ({}, {"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, "8"]}},
     ["safetensors header 'w' data_offsets=[0, '8'] is not a list of sizes"]),
])
def test_text_where_a_model_file_has_a_number(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              config: dict, header: dict | None, needles: list[str]) -> None:
    model = _model(tmp_path, config=config, shard=_header(header) if header else None)
    one_line(*cli(capsys, ["plan", str(study(tmp_path, setting("server.model_path", str(model))))]),
             "server.model_path: ", *needles)
    nothing_stored(tmp_path)


@pytest.mark.parametrize(("config", "needles"), [
    ({"num_hidden_layers": 2**40 - 1},  # a MemoryError traceback before (["attn"] * layers)
     ["config.json: num_hidden_layers=1099511627775 is more layers than autotune models (at most 1,024"]),
    ({"num_hidden_layers": 10**7}, ["num_hidden_layers=10000000 is more layers"]),  # 83 s before
    ({"text_config": {"num_hidden_layers": 1025}}, ["num_hidden_layers=1025 is more layers"]),
    ({"architectures": ["NemotronHForCausalLM"], "hybrid_override_pattern": "M*" * 10**6},
     ["hybrid_override_pattern holds 2,000,000 per-layer entries (got 'M*M*", "more than the 1,024 layers"]),
    ({"layer_types": ["full_attention"] * 5000}, ["layer_types holds 5,000 per-layer entries"]),
    ({"compress_ratios": [4] * 2000}, ["compress_ratios holds 2,000 per-layer entries"]),
    ({"quantization_config": {"quant_method": "fp8", "ignored_layers": ["re:.*x"] * 5000}},
     ["ignored_layers lists 5,000 modules (got ['re:.*x'", "more than the 4,096"]),
    # one pattern, one module name: plan never ended ((.+)+! took 0.7 s on 24 characters, 3.2 s on 26)
    ({"quantization_config": {"quant_method": "fp8", "ignored_layers": ["re:.*lm_head", "re:(.+)+!"]}},
     ["ignore pattern '(.+)+!': nested quantifiers: backtracking exponential in a module name's length"]),
    ({"quantization_config": {"quant_method": "compressed-tensors", "ignore": ["re:(a+)+$"]}},
     ["ignore pattern '(a+)+$': nested quantifiers"]),
    ({"quantization_config": {"quant_method": "fp8", "modules_to_not_convert": ["re:(.|\\w)+!"]}},
     ["ignore pattern '(.|\\\\w)+!': an alternation inside a repeat"]),
    ({"quantization_config": {"quant_method": "fp8", "ignored_layers": ["re:.*.*.*.*!"]}},  # 6.4 s at 1,024 layers
     ["ignore pattern '.*.*.*.*!': 4 variable repeats: over 135,777 ways to backtrack on a module name"]),
])
def test_a_model_config_whose_layers_would_be_walked_for_ever(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            config: dict, needles: list[str]) -> None:
    """Every per-layer rule (weights, KV layout, quantization ignore lists) walks the layers: a layer count or a
    per-layer list past limits.MAX_LAYERS, an ignore list past MAX_QUANT_PATTERNS, is one line naming the file,
    the key and the value, before any list is built."""
    model = _model(tmp_path, config=config)
    one_line(*cli(capsys, ["plan", str(study(tmp_path, setting("server.model_path", str(model))))]),
             "server.model_path: ", *needles)
    nothing_stored(tmp_path)


def test_ignore_patterns_that_backtrack_little_still_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What checkpoints write (two or three repeats, an alternation outside them, a back-reference) and the
    slowest a pattern may be (14 optional characters: 16,384 ways, 0.3 s on Qwen3-32B's 64 layers) plan."""
    patterns = ["re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:.*layers\\.\\d+\\.mlp.*",
                "re:model\\.layers\\.(\\d)\\.self_attn\\.\\1?q", "re:" + ".?" * 14 + "!"]
    model = _model(tmp_path, config={"quantization_config": {"quant_method": "fp8", "ignored_layers": patterns}})
    code, lines = cli(capsys, ["plan", str(study(tmp_path, setting("server.model_path", str(model))))])
    assert code == 0, lines[-3:]
    # four variable repeats (about 36,000 ways on the longest name): within a lone pattern's share up to 220
    # layers (Llama-3.1-405B has 126); a flat 20,000-way bound refused it on every model
    sub = tmp_path / "attn"
    sub.mkdir()
    model = _model(sub, config={"quantization_config": {"quant_method": "fp8", "ignored_layers": [
        "re:.*layers\\.\\d+\\.(self_)?attn.*"]}})
    code, lines = cli(capsys, ["plan", str(study(sub, setting("server.model_path", str(model))))])
    assert code == 0, lines[-3:]


def test_a_model_of_max_layers_plans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.limits import MAX_LAYERS

    model = _model(tmp_path, config={"num_hidden_layers": MAX_LAYERS})
    code, lines = cli(capsys, ["plan", str(study(tmp_path, setting("server.model_path", str(model))))])
    assert code == 0, lines[-3:]


# ---- search spaces that would be listed whole ------------------------------------------------------
def test_plan_counts_a_huge_grid_instead_of_listing_it(eaters: dict) -> None:
    code, lines, d = eaters["huge grid"]
    one_line(code, lines, "search_space.mem_fraction_static: the search space's grid holds 900,000,002 candidates",
             "450,000,001 values", "--set")


def test_plan_set_lists_are_counted_before_they_are_crossed(eaters: dict) -> None:
    one_line(*eaters["set lists"][:2], "--set: 300 x 300 x 300 = 27,000,000 candidates")


def test_an_exhaustive_grid_over_a_huge_axis_is_refused_before_the_study(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = study(tmp_path, lambda d: (d.update(sampler={"kind": "grid"}),
                                      d["search_space"]["mem_fraction_static"].update(step=1e-7)))
    one_line(*cli(capsys, ["run", str(path), "--no-progress"]),
             "search_space.mem_fraction_static: sampler.kind grid would enumerate its 1,000,001 values")
    nothing_stored(tmp_path)


def test_a_huge_space_is_the_samplers_not_a_list(eaters: dict) -> None:
    """TPE over a float range of 4.5e8 steps and 10^9 draft-token counts: the sampler choice, the designed
    start and the speculative stage's next variant count or sample the axes, never list them."""
    code, lines, _ = eaters["huge space"]
    assert code == 0, lines[-5:]
    assert lines[0].startswith("tpe: ")
    designed, variants, listed = map(int, lines[1].split())
    assert designed >= 3 and variants == 10**9 and 0 < listed <= 100_001


@pytest.fixture(scope="module")
def spec_factory():  # type: ignore[no-untyped-def]
    from autotune.spec import parse_study

    def make(space: dict) -> object:
        data = {"name": "g", "server": {"model_path": str(QWEN32B), "tp_size": 1}, "hardware": {"gpu": "h100"},
                "search_space": space}
        return parse_study(data)
    return make


_int_axis = st.one_of(
    st.builds(lambda lo, n, s: {"low": lo, "high": lo + n * s, "step": s}, st.integers(1, 4), st.integers(0, 3),
              st.integers(1, 3)),
    st.lists(st.integers(1, 64), min_size=1, max_size=4).map(lambda c: {"choices": c}),
)


@settings(max_examples=40, deadline=None)
@given(
    f=st.builds(lambda n, s: {"low": 0.5, "high": round(0.5 + n * s, 4), "step": s}, st.integers(0, 4),
                st.sampled_from([0.01, 0.05, 0.1])),
    bs=st.lists(st.sampled_from([8, 16, 32, 64]), min_size=1, max_size=3, unique=True),
    algos=st.lists(st.sampled_from(["none", "EAGLE", "NGRAM"]), min_size=1, max_size=3, unique=True),
    steps=st.one_of(st.none(), _int_axis), topk=st.one_of(st.none(), _int_axis), drafts=st.one_of(st.none(), _int_axis),
)
def test_the_grid_is_counted_exactly(spec_factory, f, bs, algos, steps, topk, drafts) -> None:  # type: ignore[no-untyped-def]
    """The count that replaces listing is the listing's length, speculative variants included."""
    from autotune import space

    spec_space = {"mem_fraction_static": f, "cuda_graph_max_bs": {"choices": bs},
                  "speculative": {"algorithm": {"choices": algos}, "draft_model_path": str(QWEN32B),
                                  **{k: v for k, v in (("num_steps", steps), ("eagle_topk", topk),
                                                       ("num_draft_tokens", drafts)) if v is not None}}}
    spec = spec_factory(spec_space)
    assert space.grid_size(spec) == sum(1 for _ in space.iter_grid(spec))
    sp = spec.search_space.speculative
    assert space.spec_variant_count(sp) == sum(1 for v in space.spec_variants(sp)
                                               if v["speculative_algorithm"] != "none")

