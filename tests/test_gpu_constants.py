"""benchmarks/gpu_constants.py, the device check of the speed constants: its model side (the roofline it holds a
GEMM against follows the speed model's own rows), its refusals (one line, exit code 2), and, in the slow tier,
the whole script run end to end on the CPU with the real SGLang venv's PyTorch (a wiring check: on a CPU the
figures mean nothing, the steps and the report are what is checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest
from support.benchmarks import BENCHMARKS, load_script
from support.real_sglang import need_real_sglang

from autotune.sglang.hardware.gpus import get_gpu
from autotune.sim.perf import gpu as gpu_rows


@pytest.fixture()
def script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_script("gpu_constants", monkeypatch)


def test_the_roofline_is_the_speed_models_row_bandwidth_compute_and_floor(script: ModuleType) -> None:
    h100 = get_gpu("h100")
    row = gpu_rows.gpu_speed(h100)
    k = n = 8192
    read = k * n * 2 / (h100.hbm_tb_s * 1e12 * row.hbm)
    assert script.modelled_gemm_s(h100, 1, k, n) == pytest.approx(read)  # decode: the weight read
    compute = 2.0 * 8192 * k * n / (h100.bf16_tflops * 1e12 * row.gemm)
    assert compute > read
    assert script.modelled_gemm_s(h100, 8192, k, n) == pytest.approx(compute)  # prefill: the FLOPs
    assert script.modelled_gemm_s(h100, 1, 64, 64) == row.kernel_floor_s  # a tiny GEMM: the floor
    # FP8: half the bytes, and the block-scaled path's share of twice the peak
    assert script.modelled_gemm_s(h100, 1, k, n, fp8=True) == pytest.approx(read / 2)
    assert script.modelled_gemm_s(h100, 8192, k, n, fp8=True) == pytest.approx(
        compute / (2.0 * gpu_rows.FP8_GEMM_RELATIVE))


def test_a_changed_row_changes_what_the_script_holds_the_gpu_against(script: ModuleType,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    h200 = get_gpu("h200")
    before = script.modelled_gemm_s(h200, 1, 8192, 8192)
    monkeypatch.setitem(gpu_rows.GPU_SPEED, "h200", replace(gpu_rows.GPU_SPEED["h200"],
                                                            hbm=gpu_rows.GPU_SPEED["h200"].hbm / 2))
    assert script.modelled_gemm_s(h200, 1, 8192, 8192) == pytest.approx(2 * before)


def test_figures_say_which_way_the_model_errs(script: ModuleType) -> None:
    h100 = get_gpu("h100")
    # 2.68 TB/s achieved is 0.8 of H100's 3.35: against a share of 0.92 the model streams faster than the GPU
    fig = script.share_figure("copy", 0.8 * h100.hbm_tb_s * 1e12, h100, 0.92, "gpu.py hbm")
    assert fig.measured == pytest.approx(0.8) and fig.ratio == pytest.approx(0.8 / 0.92)
    slow = script.time_figure("gemm", 20e-6, 10e-6, "roofline")  # modelled 10 us, measured 20: too fast
    assert slow.ratio == pytest.approx(0.5) and slow.measured == pytest.approx(20.0)
    report = script.Report("test GPU", "h100", "none", [fig, slow])
    text = script.table(report)
    assert "copy" in text and "gemm" in text and "0.87" in text and "0.50" in text
    assert "model is faster than the kernel alone" in text


@pytest.mark.parametrize(("argv", "says"), [
    (["--device", "cpu"], "--kind: needed with --device cpu"),
    (["--device", "cpu", "--kind", "no-such-gpu"], "--kind: "),
    (["--device", "tpu"], "--device: cuda or cpu (got 'tpu')"),
    (["--device", "cpu", "--kind", "h100", "--reps", "0"], "--reps: 1 to 10000 (got 0)"),
])
def test_bad_arguments_get_one_line_and_exit_code_2(script: ModuleType, capsys: pytest.CaptureFixture[str],
                                                    argv: list[str], says: str) -> None:
    assert script.main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


def test_without_pytorch_it_says_so_in_one_line(script: ModuleType, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    assert script.main(["--device", "cpu", "--kind", "h100"]) == 2
    err = capsys.readouterr().err
    assert "PyTorch is needed" in err and err.count("\n") == 1


@pytest.mark.real_sglang
@pytest.mark.timeout(300)
def test_every_step_runs_end_to_end_on_the_cpu_with_real_pytorch(tmp_path: Path) -> None:
    env = need_real_sglang("0.5.9")  # the one venv here with PyTorch
    out = tmp_path / "gpu_constants.json"
    proc = subprocess.run([str(env.python), str(BENCHMARKS / "gpu_constants.py"), "--device", "cpu", "--kind", "h200",
                           "--quick", "--reps", "2", "--json", str(out)],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(BENCHMARKS.parent)})  # as on a bare GPU node
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["kind"] == "h200"
    assert not [k for k in report["raw"] if k.endswith("_error")]
    names = [f["name"] for f in report["figures"]]
    # every step reported: bandwidth, each decode GEMM, prefill, each expert batch, the small ops, eager launch
    assert sum(n.startswith("HBM:") for n in names) == 2
    assert sum(n.startswith("decode GEMM bf16") for n in names) == 8
    assert sum(n.startswith("routed experts") for n in names) == 4
    assert sum(n.startswith("small op") for n in names) == 4
    assert any(n.startswith("prefill GEMM") for n in names) and any(n.startswith("eager") for n in names)
    assert all(f["measured"] > 0 for f in report["figures"])
    h200 = gpu_rows.gpu_speed(get_gpu("h200"))
    hbm = [f for f in report["figures"] if f["name"].startswith("HBM:")]
    assert all(f["constant"] == h200.hbm for f in hbm)  # held against the H200 row asked for
    assert "figures in" in proc.stdout and "ratio: measured / constant" in proc.stdout
