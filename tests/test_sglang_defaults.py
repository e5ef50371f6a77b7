"""SGLang's automatic values must reproduce the reference's worked numbers."""

from __future__ import annotations

import pytest

from autotune.sglang.defaults import (
    auto_chunked_prefill_size,
    auto_cuda_graph_max_bs,
    auto_mem_fraction_static,
    auto_speculative_params,
    decode_graph_batch_sizes,
    default_max_running_requests,
    prefill_graph_token_sizes,
)
from autotune.sglang.hardware.gpus import get_gpu


def _f(gpu: str, tp: int, version: str, **kw: object) -> float:
    return auto_mem_fraction_static(get_gpu(gpu).memory_mib, tp_size=tp, version=version, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "gpu,tp,expected",
    [("h100", 1, 0.835), ("h100", 2, 0.834), ("h100", 4, 0.824), ("h100", 8, 0.818),
     ("h200", 1, 0.907), ("h200", 8, 0.897), ("b200", 8, 0.852), ("rtx-pro-6000", 8, 0.848),
     ("a100-40", 1, 0.833), ("l40s", 1, 0.851), ("rtx-4090", 1, 0.847)],
)
def test_0_5_9_worked_values(gpu: str, tp: int, expected: float) -> None:
    assert _f(gpu, tp, "0.5.9") == expected


@pytest.mark.parametrize("tp,expected", [(1, 0.810), (2, 0.809), (4, 0.799), (8, 0.793)])
def test_0_5_9_eagle_reserves_two_gib(tp: int, expected: float) -> None:
    assert _f("h100", tp, "0.5.9", speculative_algorithm="EAGLE") == expected


def test_0_5_9_standalone_reserves_six_gib_and_ngram_nothing() -> None:
    base = _f("h100", 1, "0.5.9")
    assert _f("h100", 1, "0.5.9", speculative_algorithm="NGRAM") == base
    assert _f("h100", 1, "0.5.9", speculative_algorithm="STANDALONE") == round((81559 - 13440 - 6144) / 81559, 3)


def test_dp_attention_deepseek_h200() -> None:
    assert _f("h200", 8, "0.5.9", is_mla=True, dp_attention_size=8) == 0.769


@pytest.mark.parametrize(
    "gpu,tp,mla,expected",
    [("h100", 1, False, 0.830), ("h100", 2, False, 0.828), ("h100", 8, False, 0.812),
     ("h200", 8, False, 0.893), ("h200", 8, True, 0.886)],
)
def test_0_5_23_worked_values(gpu: str, tp: int, mla: bool, expected: float) -> None:
    assert _f(gpu, tp, "0.5.23", is_mla=mla) == expected


def test_regime_b_has_no_speculative_reserve() -> None:
    assert _f("h100", 1, "0.5.23", speculative_algorithm="EAGLE3") == _f("h100", 1, "0.5.23")
    assert _f("h100", 1, "0.5.14", speculative_algorithm="STANDALONE") == _f("h100", 1, "0.5.14")


def test_unknown_capacity_fallbacks() -> None:
    assert auto_mem_fraction_static(None, tp_size=8, version="0.5.9") == 0.88
    assert auto_mem_fraction_static(None, tp_size=8, version="0.5.23") == 0.95
    assert auto_chunked_prefill_size(None, "0.5.9") == 4096
    assert auto_cuda_graph_max_bs(None, 8, "0.5.9") == 160


def test_ten_gib_floor_only_above_sixty_gib() -> None:
    # A100-80 TP1 has reserved 13440 > 10240 anyway; a 64 GiB card with small chunks hits the floor.
    small = auto_mem_fraction_static(65536, tp_size=1, version="0.5.9", chunked_prefill_size=2048, cuda_graph_max_bs=8)
    assert small == round((65536 - 10240) / 65536, 3)
    below = auto_mem_fraction_static(40960, tp_size=1, version="0.5.9", chunked_prefill_size=2048, cuda_graph_max_bs=8)
    assert below == round((40960 - (512 + 3072 + 16 + 128)) / 40960, 3)


@pytest.mark.parametrize(
    "mib,tp,version,chunk,max_bs",
    [(16000, 1, "0.5.9", 2048, 8), (24564, 1, "0.5.9", 2048, 24), (24564, 4, "0.5.9", 2048, 80),
     (24564, 1, "0.5.3", 2048, 16), (24564, 1, "0.5.23", 4096, 48), (24564, 8, "0.5.23", 4096, 160),
     (46068, 1, "0.5.9", 4096, 32), (46068, 4, "0.5.9", 4096, 160), (81559, 2, "0.5.9", 8192, 256),
     (81559, 4, "0.5.9", 8192, 512), (143771, 1, "0.5.23", 8192, 256), (183359, 1, "0.5.9", 16384, 512)],
)
def test_capacity_brackets(mib: int, tp: int, version: str, chunk: int, max_bs: int) -> None:
    assert auto_chunked_prefill_size(mib, version) == chunk
    assert auto_cuda_graph_max_bs(mib, tp, version) == max_bs


def test_prefill_graph_sizes_count() -> None:
    sizes = prefill_graph_token_sizes(8192)
    assert len(sizes) == 58 and sizes[0] == 4 and sizes[-1] == 8192
    assert len(prefill_graph_token_sizes(2048)) == 8 + 14 + 8 + 8 + 4


def test_decode_ladder_non_spec() -> None:
    ladder = decode_graph_batch_sizes(512, speculative=False, version="0.5.9")
    assert ladder[:6] == [1, 2, 4, 8, 12, 16] and ladder[-1] == 512
    assert 264 not in ladder and 272 in ladder and 496 in ladder and 504 not in ladder
    assert len(ladder) == 5 + 31 + 15 + 1
    assert decode_graph_batch_sizes(128, speculative=False, version="0.5.9")[-1] == 128


def test_decode_ladder_spec_and_padding() -> None:
    ladder = decode_graph_batch_sizes(64, speculative=True, version="0.5.9")
    assert ladder == list(range(1, 9)) + list(range(10, 33, 2)) + [40, 44, 48, 52, 56, 60, 64]
    assert decode_graph_batch_sizes(5, speculative=False, version="0.5.9", disable_padding=True) == [1, 2, 3, 4, 5]


def test_max_bs_appended_from_0_5_15() -> None:
    assert decode_graph_batch_sizes(100, speculative=False, version="0.5.9")[-1] == 96
    assert decode_graph_batch_sizes(100, speculative=False, version="0.5.15")[-2:] == [96, 100]


def test_max_running_requests_defaults() -> None:
    # 0.5.9: min(N//2, clamp(N/ctx*512, 2048, 4096))
    assert default_max_running_requests(159368, 131072, "0.5.9", False) == 2048
    assert default_max_running_requests(2261377, 128000, "0.5.9", False) == 4096
    assert default_max_running_requests(3000, 4096, "0.5.9", False) == 1500
    assert default_max_running_requests(159368, 131072, "0.5.9", True) == 48
    assert default_max_running_requests(159368, 131072, "0.5.23", True) == 48
    assert default_max_running_requests(159368, 131072, "0.5.9", False, user=256, dp_size=2) == 128
    assert default_max_running_requests(100, 4096, "0.5.23", False, user=256) == 50


@pytest.mark.parametrize(
    "algo,arch,expected",
    [("EAGLE", "LlamaForCausalLM", (5, 4, 8)), ("EAGLE3", "DeepseekV3ForCausalLM", (3, 1, 4)),
     ("STANDALONE", "LlamaForCausalLM", (3, 1, 4)), ("NEXTN", "Glm4MoeForCausalLM", (3, 1, 4)),
     ("NGRAM", "Qwen3ForCausalLM", (1, 10, 12))],
)
def test_auto_speculative_triple(algo: str, arch: str, expected: tuple[int, int, int]) -> None:
    steps, topk, draft = auto_speculative_params(algo, arch)
    assert (steps, topk, draft) == expected
    if topk == 1:
        assert draft == steps + 1


# RTX PRO 6000 (97,887 MiB) at TP 8 with an MLA model: SGLang's automatic mem_fraction_static, release by release.
@pytest.mark.parametrize(("version", "plain", "eagle"), [
    ("0.5.9", 0.848, 0.827),    # prefill graphs opt-in; EAGLE +2 GiB
    ("0.5.10", 0.833, 0.806),   # prefill graphs on (MLA: flat 1.5 GiB); EAGLE +4 GiB and prefill graphs off
    ("0.5.12", 0.833, 0.791),   # 0.5.11 on: speculative decoding keeps prefill graphs; EAGLE still +4 GiB
    ("0.5.13.post1", 0.833, 0.791),
    ("0.5.14", 0.833, 0.833),   # draft memory inside the budget: no speculative reserve
    ("0.5.23", 0.833, 0.833),
])
def test_auto_mem_fraction_release_by_release(version: str, plain: float, eagle: float) -> None:
    from autotune.sglang.defaults import auto_mem_fraction_static

    assert auto_mem_fraction_static(97887, tp_size=8, version=version, is_mla=True) == plain
    assert auto_mem_fraction_static(97887, tp_size=8, version=version, is_mla=True,
                                    speculative_algorithm="EAGLE") == eagle


def test_bracket_and_fallback_move_at_0_5_20_and_the_max_bs_cap_at_0_5_22() -> None:
    from autotune.sglang.defaults import auto_chunked_prefill_size, auto_cuda_graph_max_bs, auto_mem_fraction_static

    card_24g = 24 * 1024
    assert (auto_cuda_graph_max_bs(card_24g, 1, "0.5.19"), auto_chunked_prefill_size(card_24g, "0.5.19")) == (24, 2048)
    assert (auto_cuda_graph_max_bs(card_24g, 1, "0.5.20"), auto_chunked_prefill_size(card_24g, "0.5.20")) == (48, 4096)
    assert auto_mem_fraction_static(None, tp_size=1, version="0.5.19") == 0.88
    assert auto_mem_fraction_static(None, tp_size=1, version="0.5.20") == 0.95
    assert auto_cuda_graph_max_bs(97887, 8, "0.5.21", max_running_requests=64) == 512
    assert auto_cuda_graph_max_bs(97887, 8, "0.5.22", max_running_requests=64) == 64
