"""autotune's load generator vs SGLang's own ``bench_serving``, on one REAL SGLang server on CPU.

One real SGLang server (the CPU venv of ``autotune sglang-env install``, the tiny
Llama of studies/models/tiny-llama-cpu, ``--load-format dummy``) is launched through
autotune's launcher; then, alternating A B A B ... on that same server, the same
random workload:

* ``bench_serving --backend sglang --dataset-name random-ids --tokenize-prompt``
  (token ids sent to ``/generate``; run with the venv's python, which has ``datasets``),
* ``autotune bench --backend sglang`` (token ids to ``/generate``, drawn inside the
  model's vocabulary).

Both: N prompts of exactly IN input / OUT output tokens (range ratio 1, ignore_eos, so
both generate the same number of tokens), request rate inf, max concurrency C, one
warm-up request each. The definitions are the same: output throughput = sum of output
tokens / duration, duration from the first request sent to the last one completed
(bench_serving's also holds one ``GET /server_info`` after the last completion, a few
ms in a run of tens of seconds).

Measurement design (on 2 shared cores the speed of real SGLang moves by +-25 % from run
to run): the server is pinned to core 0 (``taskset``; ``OMP_NUM_THREADS=1`` so torch runs
one thread) and both clients to core 1, so neither client competes with the engine for
its core; one unrecorded warm-up pair; then ``--repeats`` pairs. By default the two
clients of a pair run at the same time, each at half the concurrency (autotune starts
as bench_serving announces its timed run; bench_serving then waits 1 s, autotune needs
about as long to start, so each has the server to itself for a moment at one end): the
server's drift hits both alike and the per-pair ratio measures the clients, not the
drift. ``--sequential`` runs them one after the other at the full concurrency instead,
the order inside a pair alternating (A B, B A, ...).

``--start launch`` is issue 24's design: both clients launched at the same moment, each
starting its timed run when it is ready. bench_serving's start-up (imports, tokenizer,
data set: several seconds of one core's CPU, 45 s on this box under load) then runs on
the client core during autotune's timed run, and its own timed run comes after
autotune's: the line "timed runs overlap" prints the share of autotune's run that
bench_serving's covered (0 % in every pair measured here), so each client measures a
different server, one with a CPU-bound neighbour on the other core and one without.
``--clients separate-cores`` gives each client a core of its own (with 2 cores the
server floats over both and the clients swap cores every pair; with 3 or more the
server keeps core 0). Each pair also prints autotune's read lag (how long the bytes of
its reads waited for its loop; its token times are the kernel's arrival times, so the
lag is not in its TTFT / TPOT).

The figure that answers "within 5 %" is the median of the per-pair ratios autotune /
bench_serving of output throughput and of mean TPOT, with min-max and interquartile
range. Printed per tool: total output tokens (each tool's own count, and for autotune
the server's: the sum of ``completion_tokens``, and the streamed count), output
throughput, mean TTFT, mean and median TPOT: median over the repeats with min-max
spread, all measured (nothing modelled or calibrated).

Usage: python benchmarks/real_cpu_vs_bench_serving.py [--version 0.5.23] [--repeats 12]
       [--num-prompts 128] [--input-len 64] [--output-len 128] [--concurrency 16] [--no-pin]
       [--sequential | --start synced|launch] [--clients shared-core|separate-cores]
Issue 24's sizes: --start launch --num-prompts 64 --input-len 64 --output-len 64 --concurrency 16 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.launch import ServerProcess, free_port
from autotune.sglang.hardware.cpu import CPU_ENV, cpu_flags
from autotune.sglang_env.install import SglangEnv, check, default_prefix

REPO = Path(__file__).resolve().parents[1]

MODEL = REPO / "studies" / "models" / "tiny-llama-cpu"


def bench_serving(py: Path, url: str, a: argparse.Namespace, seed: int, pin: list[str],
                  during: Callable[[], Any] | None = None) -> tuple[dict[str, Any], Any]:
    """Run bench_serving; ``during`` is called as bench_serving starts its timed run (both run together),
    or at once in the designs that launch both clients at the same moment."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "res.jsonl"
        argv = [*pin, str(py), "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", url,
                "--tokenizer", str(MODEL), "--model", str(MODEL), "--dataset-name", "random-ids",
                "--tokenize-prompt", "--random-input-len", str(a.input_len), "--random-output-len",
                str(a.output_len), "--random-range-ratio", "1.0", "--num-prompts", str(a.num_prompts),
                "--max-concurrency", str(a.client_concurrency), "--warmup-requests", "1", "--seed", str(seed),
                "--ready-check-timeout-sec", "600", "--disable-tqdm", "--output-file", str(out)]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        try:
            return _bench_serving_wait(proc, out, during, a)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _bench_serving_wait(proc: subprocess.Popen[str], out: Path, during: Callable[[], Any] | None,
                        a: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    said: list[str] = []
    other = None
    began = math.nan
    if during is not None and a.start == "launch":
        other = during()  # both launched at once: each starts its timed run when it is ready
    assert proc.stdout is not None
    for line in proc.stdout:
        said.append(line.rstrip())
        if "Starting main benchmark run" in line:
            began = time.monotonic() + 1.0  # it sleeps 1 s before its first timed request
            if during is not None and other is None:
                other = during()
    rc = proc.wait(timeout=900)
    if rc != 0 or not out.exists():
        said = [ln for ln in said if "warn" not in ln.lower()]
        raise SystemExit(f"bench_serving failed (rc {rc}): " + "\n".join(said[-30:]))
    row = json.loads(out.read_text().splitlines()[-1])
    return {**_figures(row), "window": (began, began + row["duration"])}, other


def _figures(row: dict[str, Any]) -> dict[str, Any]:
    return {"tokens": row["total_output_tokens"], "tok_s": row["output_throughput"], "ttft_ms": row["median_ttft_ms"],
            "tpot_ms": row["median_tpot_ms"], "mean_ttft_ms": row["mean_ttft_ms"], "mean_tpot_ms": row["mean_tpot_ms"],
            "completed": row["completed"]}


class Client:
    """A running ``autotune bench``; a thread collects its output and when it exited."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        self.out = self.err = ""
        self.exited = math.nan
        self._waiter = threading.Thread(target=self._wait, daemon=True)
        self._waiter.start()

    def _wait(self) -> None:
        self.out, self.err = self.proc.communicate()
        self.exited = time.monotonic()

    def finish(self, timeout: float) -> None:
        self._waiter.join(timeout)
        if self.proc.poll() is None:
            self.kill()
            raise SystemExit(f"autotune bench did not finish within {timeout:g} s")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._waiter.join(5)


def autotune_start(url: str, a: argparse.Namespace, seed: int, pin: list[str]) -> Client:
    argv = [*pin, sys.executable, "-m", "autotune", "bench", "--url", url, "--backend", "sglang",
            "--concurrency", str(a.client_concurrency), "--num-prompts", str(a.num_prompts), "--input-len",
            str(a.input_len), "--output-len", str(a.output_len), "--range-ratio", "1.0", "--warmup-requests", "1",
            "--seed", str(seed), "--json", "--output-details", str(a.details)]
    return Client(argv)


def autotune_finish(client: Client, details: Path) -> dict[str, Any]:
    try:
        client.finish(900)
    finally:
        client.kill()
    if client.proc.returncode != 0:
        raise SystemExit(f"autotune bench failed (rc {client.proc.returncode}): {client.err[-2000:]}")
    row = json.loads(next(line for line in client.out.splitlines() if line.startswith("{")))
    recs = [json.loads(line) for line in details.read_text().splitlines() if line.strip()]
    server = sum(r.get("completion_tokens") or 0 for r in recs)
    streamed = sum(r.get("streamed_tokens") or 0 for r in recs)
    # its timed run ended just before it exited (the figures and the details file take well under 1 s)
    window = (client.exited - row["duration"], client.exited)
    return {**_figures(row), "server_tokens": server, "streamed_tokens": streamed, "window": window,
            "read_lag_p50_ms": row.get("read_lag_p50_ms"), "read_lag_p99_ms": row.get("read_lag_p99_ms")}


def autotune_bench(url: str, a: argparse.Namespace, seed: int, pin: list[str]) -> dict[str, Any]:
    return autotune_finish(autotune_start(url, a, seed, pin), a.details)


def _same_cpu_weight(pid: int | None) -> None:
    """Give the server (its own session, so its own scheduler autogroup) this script's CPU weight.

    With autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) CPU is shared
    between sessions regardless of ``nice``; run under a raised autogroup weight (as on the
    shared box: ``echo -15 > /proc/self/autogroup``), the server gets the same. Best effort.
    """
    try:
        mine = Path("/proc/self/autogroup").read_text().split("nice")[1].strip()
        Path(f"/proc/{pid}/autogroup").write_text(mine)
    except (OSError, IndexError):
        pass


def _track(clients: list[Client], client: Client) -> Client:
    clients.append(client)
    return client


def _overlap(ours: dict[str, Any], theirs: dict[str, Any]) -> float:
    """The share of autotune's timed run during which bench_serving's ran too (0..1; NaN: unknown)."""
    (a0, a1), (b0, b1) = ours["window"], theirs["window"]
    return max(min(a1, b1) - max(a0, b0), 0.0) / (a1 - a0) if a1 > a0 else math.nan


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} ms"


def _med(rows: list[dict[str, Any]], key: str) -> str:
    vals = [float(r[key]) for r in rows]
    return f"{statistics.median(vals):9.1f} [{min(vals):.1f}-{max(vals):.1f}]"


def _ratios(name: str, ours: list[dict[str, Any]], theirs: list[dict[str, Any]], key: str) -> float:
    """Print the per-pair ratios autotune / bench_serving of ``key``; return their median."""
    ratios = sorted(o[key] / t[key] for o, t in zip(ours, theirs, strict=True))
    med = statistics.median(ratios)
    q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [med, med, med]
    above = sum(r > 1 for r in ratios)
    print(f"autotune / bench_serving {name}, per pair: median {med:.3f} ({(med - 1) * 100:+.1f} %), "
          f"IQR [{q[0]:.3f}-{q[2]:.3f}], min-max [{ratios[0]:.3f}-{ratios[-1]:.3f}], autotune higher in "
          f"{above} of {len(ratios)} pairs; per pair: {' '.join(f'{r:.3f}' for r in ratios)}")
    return med


_STARTS = {
    "synced": "run together (autotune started as bench_serving starts its timed run)",
    "launch": "both clients launched at the same moment (each starts its timed run when it is ready)",
}


def _layout(a: argparse.Namespace, cores: list[int], pair: int) -> tuple[list[str], list[str], list[str]]:
    """taskset prefixes (server, bench_serving, autotune) of one pair."""
    if a.no_pin or len(cores) < 2 or shutil.which("taskset") is None:
        return [], [], []

    def pin(cs: list[int]) -> list[str]:
        return ["taskset", "-c", ",".join(str(c) for c in cs)]

    if a.clients == "separate-cores":
        if len(cores) >= 3:  # the server on its own core, one client on each of the next two
            one, two = [cores[1]], [cores[2]]
            server = pin([cores[0]])
        else:  # 2 cores: the server floats over both, each client has one; sides swap every pair
            one, two = [cores[0]], [cores[1]]
            server = []
        if pair % 2:
            one, two = two, one
        return server, pin(one), pin(two)
    return pin([cores[0]]), pin(cores[1:]), pin(cores[1:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default="0.5.23")
    ap.add_argument("--repeats", type=int, default=12, help="measured pairs (after one unrecorded warm-up pair)")
    ap.add_argument("--num-prompts", type=int, default=128)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=16,
                    help="the two clients' total; each runs at half of it, except with --sequential")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the server and the clients to cores")
    ap.add_argument("--sequential", action="store_true",
                    help="run the two clients one after the other at the full concurrency, not together at half each")
    ap.add_argument("--start", choices=sorted(_STARTS), default="synced",
                    help="together: start autotune as bench_serving starts its timed run (synced), or launch both "
                         "at the same moment (launch: issue 24's design; bench_serving's start-up then shares the "
                         "client core with autotune's timed run)")
    ap.add_argument("--clients", choices=("shared-core", "separate-cores"), default="shared-core",
                    help="both clients on one core (the server on another), or each client on its own core (with 2 "
                         "cores the server floats over both and the clients swap cores every pair)")
    a = ap.parse_args()
    a.together = not a.sequential
    a.client_concurrency = max(a.concurrency // 2, 1) if a.together else a.concurrency
    cores = sorted(os.sched_getaffinity(0))
    server_pin = _layout(a, cores, 0)[0]
    env = SglangEnv(default_prefix(a.version, "cpu"), a.version, "cpu")
    why = check(env)
    if why:
        print(f"no real SGLang {a.version} CPU venv ({why}); run: autotune sglang-env install "
              f"--version {a.version} --device cpu")
        return 1
    port = free_port()
    argv = [*server_pin, str(env.python), "-m", "sglang.launch_server", "--model-path", str(MODEL), "--host", "127.0.0.1",
            "--port", str(port), *cpu_flags(a.version), "--attention-backend", "torch_native",
            "--max-total-tokens", "16384", "--load-format", "dummy"]
    work = Path(tempfile.mkdtemp(prefix="real-bench-"))
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    loads: list[float] = []
    started: list[Client] = []
    server_env = {**CPU_ENV, **({"OMP_NUM_THREADS": "1"} if server_pin else {})}
    with ServerProcess(argv, env=server_env, log_path=work / "server.log", host="127.0.0.1", port=port,
                       startup_timeout_s=600) as server:
        server.wait_ready()
        _same_cpu_weight(server.pid)
        t0 = time.monotonic()
        for i in range(-1, a.repeats):  # pair -1 warms the server up (allocator, caches) and is not recorded
            seed = i + 2
            _, pin_theirs, pin_ours = _layout(a, cores, i)
            pair: dict[str, dict[str, Any]] = {}
            order: tuple[str, ...] = ("theirs", "ours") if i % 2 == 0 else ("ours", "theirs")
            a.details = work / f"ours{i}.jsonl"
            if a.together:  # both at once, each with half the concurrency: the server's drift hits both alike
                order = ("together",)
                try:
                    pair["theirs"], proc = bench_serving(
                        env.python, server.url, a, seed, pin_theirs,
                        during=lambda: _track(started, autotune_start(server.url, a, seed, pin_ours)))  # noqa: B023
                    pair["ours"] = autotune_finish(proc, a.details)
                finally:
                    for c in started:  # a client left running when the other failed
                        c.kill()
            for who in order if not a.together else ():
                if who == "theirs":
                    pair[who] = bench_serving(env.python, server.url, a, seed, pin_theirs)[0]
                else:
                    pair[who] = autotune_bench(server.url, a, seed, pin_ours)
            if i < 0:
                print(f"warm-up pair: bench_serving {pair['theirs']['tok_s']:.1f} tok/s, autotune "
                      f"{pair['ours']['tok_s']:.1f} tok/s (not recorded)", flush=True)
                continue
            theirs.append(pair["theirs"])
            ours.append(pair["ours"])
            loads.append(os.getloadavg()[0])
            where = f"autotune on {pin_ours[2]}, bench_serving on {pin_theirs[2]}; " if pin_ours else ""
            print(f"pair {i + 1} ({' then '.join({'theirs': 'bench_serving', 'ours': 'autotune'}.get(w, w) for w in order)}; "
                  f"{where}load average {loads[-1]:.2f}): bench_serving {theirs[-1]['tok_s']:.1f} tok/s, mean TPOT "
                  f"{theirs[-1]['mean_tpot_ms']:.1f} ms; autotune {ours[-1]['tok_s']:.1f} tok/s, mean TPOT "
                  f"{ours[-1]['mean_tpot_ms']:.1f} ms (read lag p50 {_ms(ours[-1]['read_lag_p50_ms'])}, p99 "
                  f"{_ms(ours[-1]['read_lag_p99_ms'])}); throughput ratio {ours[-1]['tok_s'] / theirs[-1]['tok_s']:.3f}; "
                  f"timed runs overlap {100 * _overlap(ours[-1], theirs[-1]):.0f} % of autotune's", flush=True)
        took = time.monotonic() - t0
    expected = a.num_prompts * a.output_len
    placed = (f"server on {server_pin[2] if server_pin else 'any core'}, clients "
              f"{'on ' + _layout(a, cores, 0)[1][2] if a.clients == 'shared-core' else 'on one core each'}"
              if _layout(a, cores, 0)[1] else "not pinned")
    print(f"\nreal SGLang {a.version} on CPU, tiny Llama (dummy weights), {a.num_prompts} prompts x {a.input_len} in / "
          f"{a.output_len} out, {a.repeats} pairs, {_STARTS[a.start] if a.together else 'one after the other, alternating order'}, each client at concurrency "
          f"{a.client_concurrency} ({took:.0f} s; {placed}; load average {min(loads):.2f}-{max(loads):.2f}); "
          f"median [min-max], all measured")
    print(f"{'':16}{'output tok/s':>24}{'mean TTFT ms':>24}{'mean TPOT ms':>22}{'median TPOT ms':>22}   output tokens")
    for name, rows in (("bench_serving", theirs), ("autotune bench", ours)):
        toks = sorted({r["tokens"] for r in rows})
        print(f"{name:16}{_med(rows, 'tok_s'):>24}{_med(rows, 'mean_ttft_ms'):>24}{_med(rows, 'mean_tpot_ms'):>22}"
              f"{_med(rows, 'tpot_ms'):>22}   {toks}")
    overlaps = [_overlap(o, t) for o, t in zip(ours, theirs, strict=True)]
    print(f"\nbench_serving's timed run overlapped autotune's: median {100 * statistics.median(overlaps):.0f} % "
          f"[{100 * min(overlaps):.0f}-{100 * max(overlaps):.0f}] of autotune's")
    lags = [r["read_lag_p99_ms"] for r in ours if r["read_lag_p99_ms"] is not None]
    if lags:
        print(f"autotune's loop read the streams late by p99 {statistics.median(lags):.2f} ms [{min(lags):.2f}-"
              f"{max(lags):.2f}] (median of the pairs; its token times are the arrival times, without this delay)")
    exact = all(r["tokens"] == r["server_tokens"] == r["streamed_tokens"] == expected for r in ours)
    print(f"autotune output tokens == sum of the server's completion_tokens == streamed == {expected}: {exact}")
    med = _ratios("output throughput", ours, theirs, "tok_s")
    med_tpot = _ratios("mean TPOT", ours, theirs, "mean_tpot_ms")
    within = abs(med - 1) <= 0.05 and abs(med_tpot - 1) <= 0.05
    print(f"goal |median ratio - 1| <= 5 % for output throughput and mean TPOT, tokens exact: "
          f"{'met' if within and exact else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
