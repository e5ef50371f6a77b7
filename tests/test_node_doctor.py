"""`autotune doctor`: one line per check, exit 1 if any fails (fake NVML, no GPU needed)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml
from support.demo import demo_data, write_study
from support.fake_nvml import node_of

from autotune.cli import main
from autotune.doctor.checks import run_checks
from autotune.sglang.flags.installed import InstalledSglang
from autotune.spec import load_study_spec

H100 = ("NVIDIA H100 80GB HBM3", 81559, (9, 0))


def _study(tmp_path: Path, **over: object) -> Path:
    data = demo_data()
    # The demo's node and model on SGLang 0.5.9 (the checks below name its dialect), without the
    # demo's 0.5.23-only searched flags and env vars.
    data["server"]["sglang_version"] = "0.5.9"
    for key in ("flags", "env"):
        data["search_space"].pop(key, None)
    for key, value in over.items():
        data[key] = value
    return write_study(data, tmp_path)


def _real(tmp_path: Path, **over: object) -> Path:
    server = demo_data()["server"]
    server.update(backend="sglang", sglang_version="0.5.9")
    return _study(tmp_path, server=server, hardware={"gpu": "h100", "num_gpus": 8, "interconnect": "nvlink"},
                  executor={"kind": "inline"}, **over)


def _by_name(checks):  # type: ignore[no-untyped-def]
    return {c.name: c for c in checks}


def test_simulated_study_passes_here_and_says_what_it_skipped(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["doctor", str(_study(tmp_path))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("skip gpus: simulated backend")
    assert any(line.startswith("ok   sglang: simulated SGLang 0.5.9 (flag dialect classic") for line in out)
    assert any(line.startswith("ok   model: ") and "GiB per GPU at TP 8" in line for line in out)
    assert out[-1] == "6 passed, 2 skipped, 0 failed"


def test_real_node_all_good(tmp_path: Path) -> None:
    spec = load_study_spec(_real(tmp_path))
    checks = _by_name(run_checks(spec, nvml=node_of(*H100), probe=lambda py: InstalledSglang(py, "0.5.9")))
    assert checks["gpus"].ok and "driver 580.82.07, 8 x NVIDIA H100 80GB HBM3" in checks["gpus"].detail
    assert checks["gpus free"].ok and checks["sglang"].ok


def test_busy_gpu_wrong_gpu_wrong_dialect_fail(tmp_path: Path) -> None:
    spec = load_study_spec(_real(tmp_path))
    busy = node_of(*H100, busy={3: [4242]})
    checks = _by_name(run_checks(spec, nvml=busy, probe=lambda py: InstalledSglang(py, "0.5.23")))
    assert checks["gpus free"].ok is False and "GPU3 pids [4242]" in checks["gpus free"].detail
    assert checks["sglang"].ok is False and "dialect modern" in checks["sglang"].detail
    few = node_of("NVIDIA L4", 23034, (8, 9), n=2)
    checks = _by_name(run_checks(spec, nvml=few, probe=lambda py: None))
    assert checks["gpus"].ok is False and "needs 8 x h100" in checks["gpus"].detail
    assert checks["sglang"].ok is False and "cannot import SGLang" in checks["sglang"].detail
    nodriver = node_of(*H100, fail_init=True)
    assert _by_name(run_checks(spec, nvml=nodriver, probe=lambda py: None))["gpus"].ok is False


def test_missing_model_unreachable_ray_unwritable_run_dir_fail(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # closed on exit: nothing listens there
    path = _study(tmp_path, executor={"kind": "ray", "address": f"127.0.0.1:{dead}"})
    data = yaml.safe_load(path.read_text())
    data["server"]["model_path"] = str(tmp_path / "no-such-model")
    path.write_text(yaml.safe_dump(data))
    checks = _by_name(run_checks(load_study_spec(path)))
    assert checks["model"].ok is False and "no-such-model" in checks["model"].detail
    assert checks["ray"].ok is False and "not reachable" in checks["ray"].detail
    assert main(["doctor", str(path)]) == 1


class _NoNvml:
    """An NVML that must not be asked."""

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        raise AssertionError(f"NVML asked ({name}) for a study that needs no GPU check")


def test_a_cpu_study_asks_the_python_run_launches_and_no_gpu(tmp_path: Path) -> None:
    """doctor probed `server.python or sys.executable` (FAIL: cannot import SGLang) while `run`
    launches the cached CPU venv's python (launch_python); and a CPU study needs no GPU check."""
    import sys

    from autotune.sglang_env.resolve import launch_python

    spec = load_study_spec(Path(__file__).resolve().parents[1] / "studies" / "real-cpu-tiny.yaml")
    asked: list[str] = []
    checks = _by_name(run_checks(spec, nvml=_NoNvml(),
                                 probe=lambda py: asked.append(py) or InstalledSglang(py, "0.5.23")))
    assert asked == [launch_python(spec)] and asked[0] != sys.executable
    assert checks["sglang"].ok and asked[0] in checks["sglang"].detail
    assert checks["gpus"].ok is None and checks["gpus free"].ok is None and "CPU study" in checks["gpus"].detail
    missing = _by_name(run_checks(spec, nvml=_NoNvml(), probe=lambda py: None))["sglang"]
    assert missing.ok is False and "CPU venv at" in missing.detail and "sglang-env install" in missing.detail


def test_a_named_gpu_without_nvidia_ml_py_is_skipped_not_failed(tmp_path: Path, monkeypatch) -> None:
    """Every laptop failed doctor on `gpu: h100` ("hardware: auto needs nvidia-ml-py"): only
    `gpu: auto` needs NVML; a named GPU's checks are skipped with the reason."""
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` fails, as without nvidia-ml-py
    spec = load_study_spec(_real(tmp_path))
    checks = _by_name(run_checks(spec, probe=lambda py: InstalledSglang(py, "0.5.9")))
    assert checks["gpus"].ok is None and "without nvidia-ml-py" in checks["gpus"].detail
    assert checks["gpus free"].ok is None
    assert checks["gpus free"].detail.startswith("cannot check free GPU memory without nvidia-ml-py")
    assert not [c for c in checks.values() if c.ok is False], [c.line() for c in checks.values()]
