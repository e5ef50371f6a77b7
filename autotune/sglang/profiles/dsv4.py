"""DeepSeek V4's compressed KV pools (SGLang 0.5.23 ``DSV4PoolConfigurator``,
``srt/model_executor/pool_configurator.py:1067-1712``; ``kernels/ops/attention/dsv4/kv_layout.py:18-105``).

Per layer, ``compress_ratios`` says 0 (sliding window only), 4 (c4 pool + indexer) or 128 (c128 pool).
The main row is 584 B (fp8 nope + bf16 rope + scales), pages of 256 tokens padded to 576-B multiples:
585 B a token in the SWA and c4 pools, 864 in the c128 pool. With the SWA ratio 0.1
(``srt/arg_groups/model_overrides/deepseek_v4.py:44-49``):

* ``coef = ratio x swa_tok + sum_c4 (585/4 + 132/4) + sum_c128 864/128`` bytes per token (PC:1390-1446),
  ``swa_tok = 585 x L + (8/256) x (4 x 512 x 4 + 4 x 128 x 4) x L_c4`` (PC:1372-1388);
* fixed c128 state: ``ceil128((R + 1) x 128 + 129) x 1024 x 4`` B per c128 layer, R = requests per DP
  rank (256 by default, ``srt/arg_groups/deepseek_v4_hook.py:138-145``) (PC:1509-1528);
* ``T = (bytes - fixed) / coef``, floored to the 256-token page (PC:1638-1701).
"""

from __future__ import annotations

import math

__all__ = ["DSV4_PAGE", "DSV4_MAX_RUNNING", "dsv4_coef", "dsv4_fixed_bytes", "default_compress_ratios"]

DSV4_PAGE = 256
DSV4_MAX_RUNNING = 256
SWA_RATIO = 0.1
ROW = 585.0  # 584 B padded to 576-B multiples over a 256-token page
ROW_C128 = 864.0
INDEX_ROW = 132.0
RING4 = 8


def default_compress_ratios(layers: int) -> tuple[int, ...]:
    """The config class's pattern (``srt/configs/deepseek_v4.py:48-140``): alternating c4 / c128, the
    first layers window-only."""
    return tuple(0 if i < 2 else (4 if i % 2 == 0 else 128) for i in range(layers))


def dsv4_coef(ratios: tuple[int, ...], swa_ratio: float = SWA_RATIO) -> float:
    """Bytes per full token; ``swa_ratio`` is ``--swa-full-tokens-ratio`` when given (PC:1130-1135: the
    operator's value, else ``DSV4_DEFAULT_SWA_FULL_TOKENS_RATIO`` 0.1, PC:1046)."""
    layers = len(ratios)
    c4 = sum(1 for r in ratios if r == 4)
    c128 = sum(1 for r in ratios if r == 128)
    swa_tok = ROW * layers + (RING4 / DSV4_PAGE) * (4 * 512 * 4 + 4 * 128 * 4) * c4
    return swa_ratio * swa_tok + c4 * (ROW / 4 + INDEX_ROW / 4) + c128 * ROW_C128 / 128


def dsv4_fixed_bytes(ratios: tuple[int, ...], max_running: int = DSV4_MAX_RUNNING) -> float:
    c128 = sum(1 for r in ratios if r == 128)
    per = math.ceil(((max_running + 1) * 128 + 129) / 128) * 128 * 1024 * 4
    return float(per * c128)
