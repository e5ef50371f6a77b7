"""launchers/ray-head.sh and ray-worker.sh: the `ray start` they would run, and their refusals.

Only ``--dry-run`` is exercised: starting a real head here would touch host-wide Ray state.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

LAUNCHERS = Path(__file__).resolve().parent.parent / "launchers"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("ray") is None,
                                reason="needs bash and the ray CLI")


def _run(script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("RAY_", "NCCL_", "AUTOTUNE_")) and k != "CUDA_DEVICE_ORDER"}
    return subprocess.run(["bash", str(LAUNCHERS / script), *args], capture_output=True, text=True,
                          env={**clean, **env}, timeout=60, check=False)


def test_head_dry_run_renders_gpus_resources_labels_and_pcie_env() -> None:
    proc = _run("ray-head.sh", "--dry-run", "--num-gpus", "8", "--gpu-arch", "blackwell", "--pcie",
                "--resources", '{"rack_a": 1}', "--labels", "zone=lab", "--port", "6390")
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("would run: "))
    assert "ray start --head --port=6390 --num-gpus=8 --disable-usage-stats" in line
    assert '--resources={"rack_a":1,"gpu_arch_blackwell":8}' in line
    assert "--labels=gpu-arch=blackwell,zone=lab" in line
    env_lines = set(proc.stdout.splitlines())
    assert {"NCCL_IB_DISABLE=1", "RAY_AUTH_MODE=token", "CUDA_DEVICE_ORDER=PCI_BUS_ID",
            "RAY_USAGE_STATS_ENABLED=0"} <= env_lines
    assert not any(ln.startswith("NCCL_P2P_DISABLE") for ln in env_lines)


def test_worker_dry_run_joins_the_address_and_can_disable_p2p() -> None:
    proc = _run("ray-worker.sh", "--dry-run", "--address", "10.0.0.1:6379", "--num-gpus", "4", "--no-p2p",
                "--auth", "disabled", RAY_ADDRESS="10.9.9.9:1")
    assert proc.returncode == 0, proc.stderr
    assert "would run: ray start --address=10.0.0.1:6379 --num-gpus=4 --disable-usage-stats" in proc.stdout
    assert "NCCL_P2P_DISABLE=1" in proc.stdout.splitlines()
    assert "RAY_AUTH_MODE=disabled" in proc.stdout.splitlines()


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("ray-worker.sh", ["--num-gpus", "4"], "--address: expected HEAD_IP:PORT, got ''"),
        ("ray-head.sh", ["--num-gpus", "8", "--resources", "[1]"], "--resources: expected a JSON object of numbers"),
        ("ray-head.sh", ["--num-gpus", "eight"], "--num-gpus: expected a number, got 'eight'"),
        ("ray-head.sh", ["--num-gpus", "8", "--auth", "maybe"], "--auth: expected token or disabled, got 'maybe'"),
        ("ray-head.sh", ["--num-gpus", "8", "--gpu-arch", "a b"], "--gpu-arch: letters, digits"),
        ("ray-head.sh", ["--bogus"], "unknown option --bogus"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(script: str, args: list[str], message: str) -> None:
    proc = _run(script, "--dry-run", *args)
    assert proc.returncode == 2
    assert message in proc.stderr
