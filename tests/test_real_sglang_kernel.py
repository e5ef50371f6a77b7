"""autotune's pure-PyTorch ``sgl_kernel`` stand-in, inside the real-SGLang CPU venv, against plain Python.

The main test environment has no torch, so the checks run in the venv's python
(a subprocess) and print JSON; the reference computations here are plain Python.
Also: the stand-in installed in the venv is the repo's copy, any submodule
imports, an unimplemented kernel raises NotImplementedError naming itself, and
``scalar_type`` stays missing (SGLang 0.5.9's fallback needs that).
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import textwrap
from pathlib import Path

import pytest
from support.real_sglang import need_real_sglang

from autotune.sglang_env.install import STAND_IN

pytestmark = pytest.mark.real_sglang

_PROBE = textwrap.dedent(
    """
    import json, sys, torch, sgl_kernel
    case = json.loads(sys.stdin.read())
    out = {"file": sgl_kernel.__file__}
    a = case["assign"]
    req_to_token = torch.full((a["rows"], a["pool_len"]), -1, dtype=torch.int32)
    sgl_kernel.assign_req_to_token_pool_cpu(
        torch.tensor(a["req_pool_indices"]), req_to_token, torch.tensor(a["start"]), torch.tensor(a["end"]),
        torch.tensor(a["out_cache_loc"], dtype=torch.int64), a["pool_len"])
    out["req_to_token"] = req_to_token.tolist()
    x = torch.tensor(case["x"], dtype=torch.float32)
    for name in ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"):
        fn = getattr(sgl_kernel, name)
        buf = torch.empty(x.shape[0], x.shape[1] // 2)
        ret = fn(x, buf)
        out[name] = fn(x).tolist()
        out[name + "_out_is_buffer"] = ret is buf and torch.equal(buf, fn(x))
    import sgl_kernel.kvcacheio as kv
    from sgl_kernel.some.nested import anything
    try:
        kv.transfer_kv_per_layer(1, 2)
    except NotImplementedError as exc:
        out["not_implemented"] = str(exc)
    try:
        import sgl_kernel.scalar_type
        out["scalar_type"] = "imported"
    except ImportError:
        out["scalar_type"] = "missing"
    out["scalar_types_attr"] = hasattr(sgl_kernel, "scalar_types")
    out["nested_callable"] = callable(anything)
    print(json.dumps(out))
    """
)


def _reference_assign(rows: int, pool_len: int, idx: list[int], start: list[int], end: list[int],
                      locs: list[int]) -> list[list[int]]:
    table = [[-1] * pool_len for _ in range(rows)]
    pos = 0
    for r, s, e in zip(idx, start, end, strict=False):
        for j in range(s, e):
            table[r][j] = locs[pos]
            pos += 1
    return table


def _silu(v: float) -> float:
    return v / (1 + math.exp(-v))


def _gelu(v: float) -> float:
    return 0.5 * v * (1 + math.erf(v / math.sqrt(2)))


def _gelu_tanh(v: float) -> float:
    return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))


def test_stand_in_kernels_match_plain_python() -> None:
    env = need_real_sglang("0.5.23")
    rng = random.Random(7)
    rows, pool_len = 5, 12
    idx, start, end = [3, 0, 4], [2, 0, 5], [6, 3, 5]  # request 4 writes nothing (empty slice)
    locs = rng.sample(range(100, 1000), sum(e - s for s, e in zip(start, end, strict=False)))
    x = [[rng.uniform(-4, 4) for _ in range(8)] for _ in range(3)]
    case = {"assign": {"rows": rows, "pool_len": pool_len, "req_pool_indices": idx, "start": start, "end": end,
                       "out_cache_loc": locs}, "x": x}
    proc = subprocess.run([str(env.python), "-c", _PROBE], input=json.dumps(case), capture_output=True,
                          text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])

    installed = got["file"].rsplit("/", 1)[0]
    assert installed.endswith("site-packages/sgl_kernel")
    assert (STAND_IN / "__init__.py").read_text() in Path(got["file"]).read_text()

    assert got["req_to_token"] == _reference_assign(rows, pool_len, idx, start, end, locs)
    for name, act in (("silu_and_mul", _silu), ("gelu_and_mul", _gelu), ("gelu_tanh_and_mul", _gelu_tanh)):
        want = [[act(row[i]) * row[i + 4] for i in range(4)] for row in x]
        for got_row, want_row in zip(got[name], want, strict=False):
            assert got_row == pytest.approx(want_row, rel=1e-5, abs=1e-6), name
        assert got[name + "_out_is_buffer"], f"{name} must fill and return `out`"
    assert "transfer_kv_per_layer" in got["not_implemented"]
    assert got["scalar_type"] == "missing" and got["scalar_types_attr"] is False
    assert got["nested_callable"]
