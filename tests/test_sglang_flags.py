"""Flag dialects: rendering, SGLang-like parsing (allow_abbrev), speculative validation."""

from __future__ import annotations

import shlex
import sys

import pytest

from autotune.errors import ConfigError
from autotune.sglang.flags.argv import (
    build_parser,
    config_from_namespace,
    flag_names,
    render_argv,
    shell_line,
    validate_speculative,
)
from autotune.sglang.knobs.config import ServerConfig, SpeculativeConfig

KIMI = "studies/models/kimi-k2-class"


def _parse_fails(version: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        build_parser(version).parse_args(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_modern_parser_rejects_classic_max_bs_as_ambiguous(capsys: pytest.CaptureFixture[str]) -> None:
    err = _parse_fails("0.5.23", ["--model-path", "m", "--cuda-graph-max-bs", "128"], capsys)
    assert "ambiguous option: --cuda-graph-max-bs could match" in err
    assert "--cuda-graph-max-bs-decode" in err and "--cuda-graph-max-bs-prefill" in err


def test_classic_parser_rejects_modern_flag(capsys: pytest.CaptureFixture[str]) -> None:
    err = _parse_fails("0.5.9", ["--model-path", "m", "--cuda-graph-max-bs-decode", "128"], capsys)
    assert "error: unrecognized arguments: --cuda-graph-max-bs-decode 128" in err


@pytest.mark.parametrize("version", ["0.5.14", "0.5.19"])
def test_deprecated_alias_releases_accept_both_spellings(version: str) -> None:
    p = build_parser(version)  # the alias stores into the -decode dest, as SGLang's DeprecatedAliasStoreAction does
    assert p.parse_args(["--model-path", "m", "--cuda-graph-max-bs", "64"]).cuda_graph_max_bs_decode == 64
    assert p.parse_args(["--model-path", "m", "--cuda-graph-max-bs-decode", "64"]).cuda_graph_max_bs_decode == 64


@pytest.mark.parametrize("version", ["0.5.20", "0.5.21", "0.5.22"])
def test_releases_after_the_alias_refuse_the_classic_spelling(version: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = _parse_fails(version, ["--model-path", "m", "--cuda-graph-max-bs", "128"], capsys)
    assert "ambiguous option: --cuda-graph-max-bs could match" in err


@pytest.mark.parametrize(("version", "spelling"), [
    ("0.5.9", "--cuda-graph-max-bs"), ("0.5.13.post1", "--cuda-graph-max-bs"), ("0.5.14", "--cuda-graph-max-bs-decode"),
    ("0.5.19", "--cuda-graph-max-bs-decode"), ("0.5.21", "--cuda-graph-max-bs-decode"),
    ("0.5.22", "--cuda-graph-max-bs-decode"), ("0.5.23", "--cuda-graph-max-bs-decode"),
])
def test_render_uses_each_releases_current_spelling(version: str, spelling: str) -> None:
    argv = render_argv(ServerConfig(model_path="m", cuda_graph_max_bs=128, disable_cuda_graph=False), version)
    assert argv[argv.index(spelling) + 1] == "128"


def test_unique_prefix_and_aliases_work_like_sglang() -> None:
    ns = build_parser("0.5.9").parse_args(["--model", "m", "--tp", "8", "--ep", "2", "--mem-frac", "0.8"])
    assert (ns.model_path, ns.tp_size, ns.ep_size, ns.mem_fraction_static) == ("m", 8, 2, 0.8)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_both_accept_the_reference_speculative_and_allreduce_flags(version: str) -> None:
    argv = shlex.split(
        "--model-path m --speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 4 --disable-custom-all-reduce --enable-torch-symm-mem "
        "--enable-flashinfer-allreduce-fusion"
    )
    ns = build_parser(version).parse_args(argv)
    assert ns.disable_custom_all_reduce and ns.enable_torch_symm_mem and ns.speculative_num_draft_tokens == 4


def test_kv_cache_dtype_choices_differ(capsys: pytest.CaptureFixture[str]) -> None:
    assert build_parser("0.5.23").parse_args(["--model-path", "m", "--kv-cache-dtype", "nvfp4"]).kv_cache_dtype == "nvfp4"
    assert "invalid choice: 'nvfp4'" in _parse_fails("0.5.9", ["--model-path", "m", "--kv-cache-dtype", "nvfp4"], capsys)


def test_common_flags_present() -> None:
    names = flag_names("0.5.9")
    for n in ["--page-size", "--watchdog-timeout", "--served-model-name", "--base-gpu-id", "--random-seed",
              "--skip-server-warmup", "--enable-metrics", "--disable-radix-cache", "--stream-interval",
              "--enable-p2p-check", "--disable-cuda-graph-padding", "--enable-torch-compile",
              "--mamba-full-memory-ratio", "--swa-full-tokens-ratio", "--max-prefill-tokens", "--log-level",
              "--dtype", "--quantization", "--load-format", "--context-length", "--trust-remote-code"]:
        assert n in names, n
    modern = flag_names("0.5.23")
    assert "--cuda-graph-max-bs" not in modern and "--flashinfer-allreduce-fusion-backend" in modern
    assert "--enforce-disable-flashinfer-allreduce-fusion" in modern and "--attn-dp-size" in modern


def test_render_default_config_passes_only_essentials() -> None:
    argv = render_argv(ServerConfig(model_path=KIMI, port=31234), "0.5.9", python="py")
    assert argv == ["py", "-m", "sglang.launch_server", "--model-path", KIMI, "--host", "127.0.0.1", "--port", "31234"]
    assert render_argv(ServerConfig(model_path="m"), "0.5.9")[0] == sys.executable


def test_render_classic_vs_modern_dialect() -> None:
    cfg = ServerConfig(model_path=KIMI, tp_size=8, mem_fraction_static=0.88, cuda_graph_max_bs=128,
                       custom_allreduce=False, flashinfer_allreduce_fusion=True, disable_cuda_graph=True)
    classic = render_argv(cfg, "0.5.9")
    modern = render_argv(cfg, "0.5.23")
    assert classic[classic.index("--cuda-graph-max-bs") + 1] == "128"
    assert "--cuda-graph-max-bs-decode" in modern and "--cuda-graph-max-bs" not in modern
    assert "--enable-flashinfer-allreduce-fusion" in classic and "--disable-cuda-graph" in classic
    assert modern[modern.index("--flashinfer-allreduce-fusion-backend") + 1] == "auto"
    assert "--disable-custom-all-reduce" in classic and "--disable-custom-all-reduce" in modern
    assert classic[classic.index("--mem-fraction-static") + 1] == "0.88"


@pytest.mark.parametrize("version", ["0.5.9", "0.5.14", "0.5.19", "0.5.23"])
def test_render_round_trips_through_the_parser(version: str) -> None:
    cfg = ServerConfig(
        model_path=KIMI, tp_size=8, ep_size=8, mem_fraction_static=0.85, cuda_graph_max_bs=256,
        custom_allreduce=False, flashinfer_allreduce_fusion=True, enable_torch_symm_mem=True, enable_symm_mem=True,
        speculative=SpeculativeConfig("EAGLE3", "studies/models/kimi-k2-class-eagle3", 3, 1, 4),
        chunked_prefill_size=4096, max_running_requests=64, max_total_tokens=100000, kv_cache_dtype="fp8_e4m3",
        attention_backend="flashinfer", context_length=8192, load_format="dummy", trust_remote_code=True,
        disable_cuda_graph=True, port=40001,
    )
    argv = render_argv(cfg, version)
    ns = build_parser(version).parse_args(argv[3:])
    assert config_from_namespace(ns, version) == cfg


def test_extra_args_appended_verbatim_and_checked() -> None:
    cfg = ServerConfig(model_path="m", extra_args=("--page-size", "64", "--enable-metrics"))
    assert render_argv(cfg, "0.5.9")[-3:] == ["--page-size", "64", "--enable-metrics"]
    with pytest.raises(ConfigError, match="argv: SGLang's parser refuses it: unrecognized arguments: --enable-metrcs"):
        render_argv(ServerConfig(model_path="m", extra_args=("--enable-metrcs",)), "0.5.9")  # a typo
    # near no flag of any release: a newer build's flag (autotune/sglang/flags/unknown.py), passed on
    assert render_argv(ServerConfig(model_path="m", extra_args=("--bogus",)), "0.5.9")[-1] == "--bogus"
    with pytest.raises(ConfigError, match="ambiguous option: --cuda-graph-max-bs"):
        render_argv(ServerConfig(model_path="m", extra_args=("--cuda-graph-max-bs", "8")), "0.5.23")


def test_refuses_knobs_the_version_lacks() -> None:
    with pytest.raises(ConfigError, match=r"kv_cache_dtype: 'nvfp4' is not accepted by SGLang 0.5.9"):
        render_argv(ServerConfig(model_path="m", kv_cache_dtype="nvfp4"), "0.5.9")
    with pytest.raises(ConfigError, match=r"kv_cache_dtype: 'fp4_e2m1' is not accepted by SGLang 0.5.23"):
        render_argv(ServerConfig(model_path="m", kv_cache_dtype="fp4_e2m1"), "0.5.23")
    with pytest.raises(ConfigError, match=r"speculative.algorithm: 'DFLASH'"):
        render_argv(ServerConfig(model_path="m", speculative=SpeculativeConfig("DFLASH")), "0.5.9")
    with pytest.raises(ConfigError, match="mem_fraction_static: must be in"):
        render_argv(ServerConfig(model_path="m", mem_fraction_static=1.5), "0.5.9")


def test_shell_line_quotes() -> None:
    line = shell_line(["python", "-m", "x", "--model-path", "/a b/c"])
    assert line == "python -m x --model-path '/a b/c'"
    assert shlex.split(line)[-1] == "/a b/c"


def test_speculative_topk1_forces_steps_plus_one() -> None:
    spec, notes = validate_speculative(SpeculativeConfig("EAGLE3", "d", 5, 1, 4), "DeepseekV3ForCausalLM", "0.5.9")
    assert (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens) == (5, 1, 6)
    assert any("adjusted 4 -> 6" in n for n in notes)


def test_speculative_auto_choice() -> None:
    spec, notes = validate_speculative(SpeculativeConfig("EAGLE", "d"), "LlamaForCausalLM", "0.5.9")
    assert (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens) == (5, 4, 8)
    assert any("auto-chosen" in n for n in notes)
    with pytest.raises(ConfigError, match="speculative.num_steps: unset while"):
        validate_speculative(SpeculativeConfig("EAGLE", "d", None, 2, None), "LlamaForCausalLM", "0.5.9")


def test_nextn_is_eagle_and_needs_no_draft_on_mtp_models() -> None:
    spec, notes = validate_speculative(SpeculativeConfig("NEXTN"), "DeepseekV3ForCausalLM", "0.5.23")
    assert spec.algorithm == "EAGLE" and spec.draft_model_path is None
    assert (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens) == (3, 1, 4)
    assert any("alias" in n for n in notes)
    with pytest.raises(ConfigError, match="speculative.draft_model_path: required for EAGLE3"):
        validate_speculative(SpeculativeConfig("EAGLE3"), "LlamaForCausalLM", "0.5.9")


def test_ngram_limits() -> None:
    spec, notes = validate_speculative(SpeculativeConfig("NGRAM", "d", None, 4, None), "Qwen3ForCausalLM", "0.5.23")
    assert (spec.eagle_topk, spec.num_draft_tokens, spec.draft_model_path) == (10, 12, None)
    assert any("BFS breadth" in n for n in notes) and any("dropped" in n for n in notes)
    with pytest.raises(ConfigError, match="requires flashinfer"):
        validate_speculative(SpeculativeConfig("NGRAM"), "Qwen3ForCausalLM", "0.5.9", attention_backend="fa3")
    with pytest.raises(ConfigError, match="DP attention"):
        validate_speculative(SpeculativeConfig("NGRAM"), "Qwen3ForCausalLM", "0.5.9", dp_attention=True)


def test_speculative_backend_rules() -> None:
    with pytest.raises(ConfigError, match="trtllm_mha backend only supports topk = 1"):
        validate_speculative(SpeculativeConfig("EAGLE", "d", 3, 4, 8), "LlamaForCausalLM", "0.5.9",
                             attention_backend="trtllm_mha")
    with pytest.raises(ConfigError, match="page_size=64"):
        validate_speculative(SpeculativeConfig("EAGLE", "d", 3, 4, 8), "LlamaForCausalLM", "0.5.9",
                             attention_backend="triton", page_size=64)
    ok, _ = validate_speculative(SpeculativeConfig("EAGLE", "d", 3, 4, 8), "LlamaForCausalLM", "0.5.23",
                                 attention_backend="triton", page_size=64)
    assert ok.eagle_topk == 4
    off, notes = validate_speculative(SpeculativeConfig(None, "d"), "LlamaForCausalLM", "0.5.9")
    assert off == SpeculativeConfig() and notes
