"""``autotune doctor STUDY.yaml``: is this node ready for a long study? One line per check.

Each check is a function of the study returning a :class:`Check`; none launches a server
or starts Ray. ``ok`` is None for a check that does not apply (simulated backend: no GPU).
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError
from autotune.redact import redact_url
from autotune.spec import StudySpec

# Free disk below which a study's artifacts (logs, per-request records) are at risk.
MIN_FREE_DISK_GIB = 2.0


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None  # None: not applicable here
    detail: str

    def line(self) -> str:
        mark = {True: "ok  ", False: "FAIL", None: "skip"}[self.ok]
        return f"{mark} {self.name}: {self.detail}"


def _gpus(spec: StudySpec, nvml: Any) -> list[Check]:
    """The node's GPUs against the study's named ones (``gpu: auto`` was resolved from NVML when
    the study loaded). No check for the simulated backend or a CPU study; skipped, not failed,
    where nvidia-ml-py is not installed: a named GPU needs no NVML to run."""
    from autotune.node.auto import catalogue_name
    from autotune.node.nvml import load_nvml, read_node
    from autotune.sglang.hardware.gpus import get_gpu

    if spec.server.backend == "sim":
        return [Check("gpus", None, "simulated backend: no GPU needed"),
                Check("gpus free", None, "simulated backend")]
    if spec.server.device == "cpu" or spec.hardware.gpu == "cpu":
        return [Check("gpus", None, "CPU study: no GPU needed"), Check("gpus free", None, "CPU study")]
    if nvml is None:
        try:
            nvml = load_nvml()
        except AutotuneError:
            hint = "(pip install nvidia-ml-py)"
            return [Check("gpus", None, f"cannot check the GPUs without nvidia-ml-py {hint}; the study names "
                                        f"{spec.hardware.num_gpus} x {spec.hardware.gpu}"),
                    Check("gpus free", None, f"cannot check free GPU memory without nvidia-ml-py {hint}")]
    try:
        node = read_node(nvml)
    except AutotuneError as exc:  # NVML installed but cannot start: no driver for the study's GPUs
        return [Check("gpus", False, str(exc)), Check("gpus free", None, "cannot tell without NVML")]
    want = get_gpu(spec.hardware.gpu)
    n = len(node.gpus)
    names = sorted({g.name for g in node.gpus})
    ok = n >= spec.hardware.num_gpus
    detail = f"driver {node.driver}, {n} x {', '.join(names) or 'none'} visible; the study needs " \
             f"{spec.hardware.num_gpus} x {want.name}"
    if ok and node.gpus:
        first = node.gpus[0]
        same = catalogue_name(first.name, first.memory_mib) == want.name or first.memory_mib == want.memory_mib
        if not same:
            ok, detail = False, detail + f" ({first.name}, {first.memory_mib} MiB, is not that GPU)"
    busy = {g.index: g.processes for g in node.gpus if g.processes}
    free = Check("gpus free", not busy, "no compute process on any GPU" if not busy else
                 "busy: " + "; ".join(f"GPU{i} pids {list(p)}" for i, p in sorted(busy.items())))
    return [Check("gpus", ok, detail), free]


def _sglang(spec: StudySpec, probe: Callable[[str], Any]) -> Check:
    from autotune.sglang.versions import parse_version
    from autotune.sglang_env.resolve import install_hint, launch_python

    want = parse_version(spec.server.sglang_version)
    if spec.server.backend == "sim":
        return Check("sglang", True, f"simulated SGLang {want} (flag dialect {want.dialect}, regime {want.regime})")
    python = launch_python(spec)  # the interpreter `run` launches (a CPU study: the cached venv's)
    installed = probe(python)
    if installed is None:
        if spec.server.device == "cpu" and not spec.server.python:
            return Check("sglang", False, f"no SGLang {want} CPU venv at {python}; build it with: "
                                          f"{install_hint(spec)}")
        return Check("sglang", False, f"{python} cannot import SGLang")
    have = parse_version(installed.version)
    ok = (have.dialect, have.regime) == (want.dialect, want.regime)
    return Check("sglang", ok, f"{python} runs SGLang {have} (dialect {have.dialect}, regime {have.regime}); "
                               f"the study says {want} (dialect {want.dialect}, regime {want.regime})")


def _model(spec: StudySpec) -> Check:
    from autotune.sglang.hardware.gpus import get_gpu
    from autotune.sglang.models.profile import load_model_profile

    path = spec.resolve_path(spec.server.model_path)
    try:
        model = load_model_profile(str(path))
    except AutotuneError as exc:
        return Check("model", False, str(exc))
    gpu = get_gpu(spec.hardware.gpu)
    per_gpu = model.weight_gib / spec.server.tp_size
    ok = per_gpu < gpu.memory_gib
    est = " (estimated from config.json)" if model.weight_bytes_estimated else ""
    return Check("model", ok, f"{path}: {model.architecture}, weights {model.weight_gib:.1f} GiB{est}, "
                              f"{per_gpu:.1f} GiB per GPU at TP {spec.server.tp_size} of {gpu.memory_gib:.1f} GiB")


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _disk(spec: StudySpec) -> Check:
    where = _existing(spec.run_path)
    free = shutil.disk_usage(where).free / 2**30
    writable = os.access(where, os.W_OK)
    ok = free >= MIN_FREE_DISK_GIB and writable
    return Check("disk", ok, f"{free:.1f} GiB free at {where} for {spec.run_path}"
                             + ("" if writable else " (not writable)")
                             + ("" if free >= MIN_FREE_DISK_GIB else f" (< {MIN_FREE_DISK_GIB:g} GiB)"))


def _ports(spec: StudySpec) -> Check:
    host = spec.server.host
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
    except OSError as exc:
        return Check("ports", False, f"cannot bind a port on server.host {host}: {exc}")
    return Check("ports", True, f"servers can bind {host} (probe got port {port})")


def _ray(spec: StudySpec) -> Check:
    if spec.executor.kind != "ray":
        return Check("ray", None, "executor.kind is inline")
    address = spec.executor.address or os.environ.get("RAY_ADDRESS")
    try:
        import ray  # noqa: F401
    except ImportError:
        return Check("ray", False, "ray is not importable")
    if not address or address in ("local", "auto"):
        return Check("ray", True, "a local Ray instance is started by the run")
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port or 6379)), timeout=3.0):
            pass
    except (OSError, ValueError) as exc:
        return Check("ray", False, f"cluster {address} not reachable: {exc}")
    auth = os.environ.get("RAY_AUTH_MODE", "")
    return Check("ray", True, f"cluster {address} accepts connections" +
                 ("" if auth else " (set RAY_AUTH_MODE=token if the cluster uses token auth)"))


def _storage(spec: StudySpec) -> Check:
    url = spec.storage_url
    if url.startswith("sqlite:///"):
        where = _existing(Path(url.removeprefix("sqlite:///")))
        ok = os.access(where if where.is_dir() else where.parent, os.W_OK) if where.exists() else False
        return Check("storage", ok, f"{url} ({'writable' if ok else 'not writable'})")
    from autotune.study.storage.retry import probe_storage

    err = probe_storage(url)
    return Check("storage", err is None, f"{redact_url(url)} " + ("answers" if err is None else f"unreachable: {err}"))


def run_checks(spec: StudySpec, *, nvml: Any = None, probe: Callable[[str], Any] | None = None) -> list[Check]:
    """Every check, in order. ``nvml`` and ``probe`` are injectable for tests."""
    from autotune.sglang.flags.installed import probe as real_probe

    checks = _gpus(spec, nvml)
    checks.append(_sglang(spec, probe or real_probe))
    checks += [_model(spec), _disk(spec), _ports(spec), _storage(spec), _ray(spec)]
    return checks
