"""The fault table against real SGLang on CPU (``python benchmarks/faults.py --engine real-cpu``, or
``python benchmarks/faults_real.py [--only KEYS] [--sglang-version V]``).

Real SGLang is a process tree: the launcher (HTTP and tokenizer manager), ``sglang::scheduler``
and ``sglang::detokenizer``. Each fault hits a short study (studies/real-cpu-tiny.yaml made
small: 1-2 trials of a random-weight tiny Llama, 16 prompts of 32 + 64 tokens at c=8, a 20 s
between-tokens limit) while a trial's real server streams its load point, or during its
startup; the study is then resumed, as a person would, until it holds its trials. Per fault:

- lost, repeated, recovery: as in the simulator's table (``faults.py``);
- left: SGLang processes of the study alive after the faulted run and the watchdog's grace
  (by process title, ``sglang.launch_server`` / ``sglang::*``, among this study's process
  tree as walked with psutil during the run plus every process carrying this fault's
  environment marker) / live processes of the launches in the registry
  (``run/processes.json``);
- kind and evidence: what the study recorded for the hit trial, and whether that line (or
  the row's own proof) is in the trial's real ``server.log``.

Nothing is modelled. Faults: driver kill -9 during a load point, then a plain re-run; Ctrl-C
during a real server's startup; the scheduler killed mid-load; the detokenizer killed
mid-load; the whole tree stopped (SIGSTOP) mid-load; a launch that fails at startup (a flag
SGLang's parser accepts and its server refuses: --context-length 4096 over the model's 2,048);
the port taken between the probe and the bind; the Ray worker running the trial killed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import yaml
from harness import faults as shared  # Row, start_run, settle, measure, snapshot, the fault_child patches

from autotune.launch.tree import command_line, is_sglang
from autotune.testing.real_cpu_study import small_study  # the tests' own small real study

STALL_S = 20.0  # the study's between-tokens limit: a hung server fails its load point after this
N_TRIALS = int(os.environ.get("AUTOTUNE_FAULTS_TRIALS", "2"))  # 1: the hit trial and its re-run only


Ctx = dict[str, Any]  # one fault's row, root, version, python, tree, study, n_trials, before, left


def write_study(ctx: Ctx, *, executor: str = "inline", space: dict[str, Any] | None = None) -> Path:
    ex: dict[str, Any] = {"kind": executor}
    if executor == "ray":
        ex.update(num_cpus=2, num_gpus=1, max_parallel=1)
    n = max(N_TRIALS, 2) if space else N_TRIALS  # a space of its own: SGLang's defaults run first
    ctx["n_trials"] = n  # measure() counts a budget not reached as lost
    ctx["study"] = small_study(ctx["root"], ctx["python"], name="faults-real", version=ctx["version"], stall_s=STALL_S,
                               executor=ex, space=space, n_trials=n)
    return ctx["study"]


# ---- this study's processes ----------------------------------------------------------------
class Tree:
    """Every process seen under the driver (walked with psutil while it runs), plus the marked ones."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.seen: dict[int, psutil.Process] = {}

    def walk(self, proc: subprocess.Popen) -> list[psutil.Process]:
        with contextlib.suppress(psutil.Error):
            for p in psutil.Process(proc.pid).children(recursive=True):
                self.seen.setdefault(p.pid, p)
        for p in shared.servers_of(self.root):  # the watchdogs, and anything reparented away
            self.seen.setdefault(p.pid, p)
        return self.alive()

    def alive(self) -> list[psutil.Process]:
        out = []
        for p in list(self.seen.values()) + _marked(self.root):
            with contextlib.suppress(psutil.Error):
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE and p not in out:
                    out.append(p)
        return out

    def sglang(self) -> list[psutil.Process]:
        return [p for p in self.alive() if is_sglang(p)]

    def titled(self, prefix: str) -> list[psutil.Process]:
        return [p for p in self.sglang() if command_line(p).startswith(prefix)]


def _marked(root: Path) -> list[psutil.Process]:
    """SGLang processes whose environment carries this fault's marker (orphans reparented to init)."""
    return shared.marked_processes(root, ("sglang.launch_server", "sglang::"))


def left_after_grace(tree: Tree, root: Path) -> tuple[int, int]:
    """(by title, by registry) after the watchdog's grace; the harness then ends what it counted."""
    from autotune.launch import ProcessRegistry

    deadline = time.monotonic() + shared.WATCHDOG_GRACE_S
    while time.monotonic() < deadline and tree.sglang():
        time.sleep(0.5)
    by_title = tree.sglang()
    by_registry = [p for p in ProcessRegistry(root / "run").alive_processes() if is_sglang(p)]
    for p in {q.pid: q for q in by_title + by_registry}.values():
        with contextlib.suppress(psutil.Error):
            p.kill()
    return len(by_title), len(by_registry)


def wait_under_load(root: Path, proc: subprocess.Popen, tree: Tree, *, timeout: float = 900) -> int:
    """Wait until a trial's real server streams its measured load (a decode batch after readiness)."""
    return _wait(root, proc, tree, lambda text: "Decode batch" in text.partition("fired up")[2], timeout)


def wait_starting(root: Path, proc: subprocess.Popen, tree: Tree, *, timeout: float = 900) -> int:
    """Wait until a trial's real server is starting: its scheduler runs, it is not ready yet."""
    def starting(text: str) -> bool:
        return "fired up" not in text and bool(tree.titled("sglang::scheduler"))
    return _wait(root, proc, tree, starting, timeout)


def _wait(root: Path, proc: subprocess.Popen, tree: Tree, ok: Callable[[str], bool], timeout: float) -> int:
    trials = root / "run" / "trials"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the run ended (rc {proc.returncode}) before the fault could be injected")
        tree.walk(proc)
        for d in sorted(trials.glob("0*"), reverse=True):
            log = d / "server.log"
            if log.exists() and ok(log.read_text(errors="replace")):
                tree.walk(proc)
                return int(d.name)
        time.sleep(0.2)
    raise RuntimeError("no trial reached the fault's moment in time")


# ---- the faults ----------------------------------------------------------------------------


def _run(ctx: Ctx, proc: subprocess.Popen, *, resume: bool) -> None:
    """Let the faulted run end, count what is left, then (``resume``) run the study again as is."""
    row, root, tree = ctx["row"], ctx["root"], ctx["tree"]
    row.runs.append(shared.settle(proc, timeout=1800))
    ctx["left"] = left_after_grace(tree, root)
    if resume or row.runs[-1] != 0 or shared.budget(ctx["study"]) < ctx["n_trials"]:
        again = shared.start_run(ctx["study"], root / "resume.log")
        ctx["tree2"] = Tree(root)
        while again.poll() is None:
            ctx["tree2"].walk(again)
            time.sleep(1.0)
        row.runs.append(again.returncode)
        left2 = left_after_grace(ctx["tree2"], root)
        ctx["left"] = (max(ctx["left"][0], left2[0]), max(ctx["left"][1], left2[1]))


def _walk_until_end(ctx: Ctx, proc: subprocess.Popen) -> None:
    while proc.poll() is None:
        ctx["tree"].walk(proc)
        time.sleep(1.0)


def _signal_driver(sig: int, moment: Callable[..., int]) -> Callable[[Ctx], tuple[int, float]]:
    """``sig`` to the driver at ``moment`` (under load, or during a startup), then a plain re-run."""
    def fault(ctx: Ctx) -> tuple[int, float]:
        proc = shared.start_run(ctx["study"], ctx["root"] / "run.log")
        victim = moment(ctx["root"], proc, ctx["tree"])
        ctx["before"], t = shared.snapshot(ctx["study"]), time.time()
        proc.send_signal(sig)
        _run(ctx, proc, resume=True)
        return victim, t
    return fault


def _kill_titled(prefix: str) -> Callable[[Ctx], tuple[int, float]]:
    def fault(ctx: Ctx) -> tuple[int, float]:
        proc = shared.start_run(ctx["study"], ctx["root"] / "run.log")
        victim = wait_under_load(ctx["root"], proc, ctx["tree"])
        targets = ctx["tree"].titled(prefix)
        if not targets:
            raise RuntimeError(f"no {prefix} process in the study's tree")
        ctx["before"], t = shared.snapshot(ctx["study"]), time.time()
        ctx["row"].note = f"SIGKILL to {', '.join(command_line(p).split()[0] for p in targets)}"
        for p in targets:
            p.kill()
        _walk_until_end(ctx, proc)
        _run(ctx, proc, resume=False)
        return victim, t
    return fault


def fault_sigstop(ctx: Ctx) -> tuple[int, float]:
    proc = shared.start_run(ctx["study"], ctx["root"] / "run.log")
    victim = wait_under_load(ctx["root"], proc, ctx["tree"])
    tree = [p for p in ctx["tree"].sglang()]
    ctx["before"], t = shared.snapshot(ctx["study"]), time.time()
    for p in tree:
        p.suspend()
    ctx["row"].note = f"SIGSTOP to the whole tree ({len(tree)} processes)"
    _walk_until_end(ctx, proc)
    _run(ctx, proc, resume=False)
    return victim, t


def fault_startup(ctx: Ctx) -> tuple[int, float]:
    # Every launch at --context-length 4096: SGLang's parser accepts it, its model config refuses it (the
    # tiny Llama's 2,048). (A memory refusal is not reproducible on CPU: at --mem-fraction-static 0.0001
    # SGLang compares host RAM before and after the weights, and other processes move it either way.)
    study = ctx["study"]
    data = yaml.safe_load(study.read_text())
    data["server"]["extra_args"] = [*data["server"].get("extra_args", []), "--context-length", "4096"]
    study.write_text(yaml.safe_dump(data))
    ctx["before"], t = {}, time.time()
    proc = shared.start_run(study, ctx["root"] / "run.log")
    _walk_until_end(ctx, proc)
    _run(ctx, proc, resume=False)
    return _first_failed(study), t


def fault_port(ctx: Ctx) -> tuple[int, float]:
    root = ctx["root"]
    squat = "1" if ctx["n_trials"] == 1 else "2"  # the launch whose port is taken
    proc = shared.start_run(ctx["study"], root / "run.log", child="port", env={"AUTOTUNE_FAULT_PORT_CALL": squat})
    mark = root / "port.taken"
    while not mark.exists() and proc.poll() is None:
        ctx["tree"].walk(proc)
        time.sleep(0.2)
    if not mark.exists():
        raise RuntimeError("the port was never taken")
    victim, t = int(mark.read_text().split()[0]), float(mark.read_text().split()[1])
    ctx["before"] = shared.snapshot(ctx["study"])
    _walk_until_end(ctx, proc)
    _run(ctx, proc, resume=False)
    return victim, t


def fault_ray_worker(ctx: Ctx) -> tuple[int, float]:
    study = write_study(ctx, executor="ray")
    proc = shared.start_run(study, ctx["root"] / "run.log")
    victim = wait_under_load(ctx["root"], proc, ctx["tree"])
    launcher = next((p for p in ctx["tree"].sglang() if "sglang.launch_server" in command_line(p)), None)
    worker = next((p for p in (launcher.parents() if launcher else []) if command_line(p).startswith("ray::")), None)
    if worker is None:
        raise RuntimeError("no ray:: worker above the real server")
    ctx["before"], t = shared.snapshot(study), time.time()
    worker.kill()
    _walk_until_end(ctx, proc)
    _run(ctx, proc, resume=False)
    return victim, t


def _first_failed(study: Path) -> int:
    from autotune.spec import load_study_spec
    from autotune.study.storage.opening import open_study

    st = open_study(load_study_spec(study), create=False)
    failed = [t.number for t in st.get_trials(deepcopy=False) if t.state.name == "FAIL"]
    return failed[0] if failed else -1


# (label, fault, a regex for the row's proof in the real log when the recorded evidence is autotune's own)
FAULTS: dict[str, tuple[str, Callable[[Ctx], tuple[int, float]], str]] = {
    "kill9": ("driver kill -9 mid-load, then re-run", _signal_driver(signal.SIGKILL, wait_under_load), r"autotune watchdog: launcher pid|SIGTERM"),
    "sigint_startup": ("Ctrl-C during a real startup", _signal_driver(signal.SIGINT, wait_starting), r"SIGTERM|sigterm|Received sig"),
    "scheduler": ("sglang::scheduler killed mid-load", _kill_titled("sglang::scheduler"), r"crashed with exit code"),
    "detokenizer": ("sglang::detokenizer killed mid-load", _kill_titled("sglang::detokenizer"),
                    r"crashed with exit code"),
    "sigstop": ("server tree hung mid-load (SIGSTOP)", fault_sigstop, r"Decode batch"),
    "startup": ("launch refused at startup (context 4096)", fault_startup, r"greater than the derived context"),
    "port": ("port taken between probe and bind", fault_port, r"address already in use"),
    "ray_worker": ("Ray worker running the trial killed", fault_ray_worker, r"autotune watchdog|SIGTERM"),
}


def _evidence(root: Path, study: Path, victim: int, rx: str) -> tuple[str, str, str]:
    """(kind, recorded evidence, the proof line found in the hit trial's real server.log)."""
    from autotune.spec import load_study_spec
    from autotune.study.storage.opening import open_study

    st = open_study(load_study_spec(study), create=False)
    t = next((t for t in st.get_trials(deepcopy=False) if t.number == victim), None)
    if t is None:
        return "?", "", ""
    kind = str(t.user_attrs.get("failure_kind", t.state.name))
    ev = str(t.user_attrs.get("evidence") or t.user_attrs.get("reason") or "")
    log = root / "run" / "trials" / f"{victim:05d}" / "server.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    first = ev.splitlines()[0].strip() if ev else ""
    if first and first in text:
        return kind, first, "the recorded line, verbatim"
    hit = next((ln.strip() for ln in text.splitlines() if re.search(rx, ln)), "")
    return kind, first, hit


def run_fault(key: str, version: str, python: str) -> tuple[shared.Row, str, str, str, tuple[int, int]]:
    label, fn, rx = FAULTS[key]
    row = shared.Row(label)
    root = Path(tempfile.mkdtemp(prefix=f"autotune-fault-real-{key}-"))
    ctx: Ctx = {"row": row, "root": root, "version": version, "python": python, "tree": Tree(root),
                "left": (-1, -1), "before": {}}
    kind = evidence = proof = ""
    try:
        write_study(ctx)
        victim, t = fn(ctx)
        if victim >= 0:
            shared.measure(row, ctx["study"], victim, ctx["before"], t, ctx["n_trials"])
            kind, evidence, proof = _evidence(root, ctx["study"], victim, rx)
        row.left = ctx["left"][0]
    except Exception as exc:  # noqa: BLE001 - a harness failure is a row, not a crash
        row.note = f"harness: {type(exc).__name__}: {exc}"[:200]
        row.lost = row.lost or -1
        ctx["left"] = left_after_grace(ctx["tree"], root)
        row.left = ctx["left"][0]
    finally:
        shared.clean_up(root, row, ctx["tree"].alive())
    return row, kind, evidence, proof, ctx["left"]


def main(only: list[str], version: str) -> int:
    from autotune.sglang_env.install import SglangEnv, check, default_prefix

    env = SglangEnv(default_prefix(version, "cpu"), version, "cpu")
    why = check(env)
    if why is not None:
        print(f"real SGLang {version} on CPU is not usable ({why}); build it with: "
              f"autotune sglang-env install --version {version} --device cpu")
        return 2
    keys = only or list(FAULTS)
    print(f"# real SGLang {version} on CPU, load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    print(f"{'fault':38} {'lost':>4} {'rep':>3} {'left':>6} {'recov s':>7}  runs  kind: evidence", flush=True)
    bad = 0
    for key in keys:
        row, kind, evidence, proof, left = run_fault(key, version, str(env.python))
        rec = f"{row.recovery_s:.0f}" if row.recovery_s is not None else "-"
        print(f"{row.fault:38} {row.lost:>4} {row.repeated:>3} {left[0]:>2}/{left[1]:<3} {rec:>7}  "
              f"{','.join(map(str, row.runs)):5} {kind}: {evidence[:150]}", flush=True)
        print(f"{'':38} in server.log: {proof[:160] or '(none)'}{'; ' + row.note if row.note else ''}",
              flush=True)
        bad += int(row.lost != 0 or left != (0, 0))
    print("every fault: 0 lost, 0 SGLang processes left (by title / by registry)" if not bad
          else f"{bad} fault(s) lost a trial or left a process")
    return 1 if bad else 0


def cli(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated fault keys: " + ",".join(FAULTS))
    ap.add_argument("--sglang-version", default="0.5.23", help="the CPU venv's SGLang version")
    args = ap.parse_args(argv)
    return main([k for k in args.only.split(",") if k], args.sglang_version)


if __name__ == "__main__":
    sys.exit(cli())
