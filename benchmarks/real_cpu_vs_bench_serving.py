"""autotune's load generator vs SGLang's own ``bench_serving``, on one REAL SGLang server on CPU.

One real SGLang server (the CPU venv of ``autotune sglang-env install``, the tiny
Llama of studies/models/tiny-llama-cpu, ``--load-format dummy``) is launched through
autotune's launcher; then, alternating A B A B ... on that same server, the same
random workload:

* ``bench_serving --backend sglang --dataset-name random-ids --tokenize-prompt``
  (token ids sent to ``/generate``; run with the venv's python, which has ``datasets``),
* ``autotune bench --backend sglang`` (token ids to ``/generate``, drawn inside the
  model's vocabulary).

Both: N prompts of exactly IN input / OUT output tokens (range ratio 1, ignore_eos),
concurrency C, one warm-up request. Printed per tool: total output tokens (each
tool's own count, and the server's: the sum of ``completion_tokens``), output
throughput, median TTFT and TPOT: median over the repeats with min-max spread, all
measured (nothing modelled or calibrated). The same-server alternation is the
fairest baseline this machine allows; on 2 shared cores single runs vary by ~10 %.

Usage: python benchmarks/real_cpu_vs_bench_serving.py [--version 0.5.23] [--repeats 3]
       [--num-prompts 64] [--input-len 64] [--output-len 64] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotune.launch import ServerProcess, free_port  # noqa: E402
from autotune.sglang.cpu import CPU_ENV, cpu_flags  # noqa: E402
from autotune.sglang_env.install import SglangEnv, check, default_prefix  # noqa: E402

MODEL = REPO / "studies" / "models" / "tiny-llama-cpu"


def bench_serving(py: Path, url: str, a: argparse.Namespace, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "res.jsonl"
        argv = [str(py), "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", url,
                "--tokenizer", str(MODEL), "--model", str(MODEL), "--dataset-name", "random-ids",
                "--tokenize-prompt", "--random-input-len", str(a.input_len), "--random-output-len",
                str(a.output_len), "--random-range-ratio", "1.0", "--num-prompts", str(a.num_prompts),
                "--max-concurrency", str(a.concurrency), "--warmup-requests", "1", "--seed", str(seed),
                "--ready-check-timeout-sec", "600", "--disable-tqdm", "--output-file", str(out)]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env, check=False)
        if proc.returncode != 0 or not out.exists():
            said = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "warn" not in ln.lower()]
            raise SystemExit(f"bench_serving failed (rc {proc.returncode}): " + "\n".join(said[-30:]))
        row = json.loads(out.read_text().splitlines()[-1])
    return {"tokens": row["total_output_tokens"], "tok_s": row["output_throughput"],
            "ttft_ms": row["median_ttft_ms"], "tpot_ms": row["median_tpot_ms"], "completed": row["completed"]}


def autotune_bench(url: str, a: argparse.Namespace, seed: int, details: Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", "autotune", "bench", "--url", url, "--backend", "sglang",
            "--concurrency", str(a.concurrency), "--num-prompts", str(a.num_prompts), "--input-len",
            str(a.input_len), "--output-len", str(a.output_len), "--range-ratio", "1.0", "--warmup-requests", "1",
            "--seed", str(seed), "--json", "--output-details", str(details)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=REPO, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"autotune bench failed (rc {proc.returncode}): {proc.stderr[-2000:]}")
    row = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("{")))
    recs = [json.loads(line) for line in details.read_text().splitlines() if line.strip()]
    server = sum(r.get("completion_tokens") or 0 for r in recs)
    streamed = sum(r.get("streamed_tokens") or 0 for r in recs)
    return {"tokens": row["total_output_tokens"], "server_tokens": server, "streamed_tokens": streamed,
            "tok_s": row["output_throughput"], "ttft_ms": row["median_ttft_ms"], "tpot_ms": row["median_tpot_ms"],
            "completed": row["completed"]}


def _med(rows: list[dict[str, Any]], key: str) -> str:
    vals = [float(r[key]) for r in rows]
    return f"{statistics.median(vals):9.1f} [{min(vals):.1f}-{max(vals):.1f}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default="0.5.23")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=16)
    a = ap.parse_args()
    env = SglangEnv(default_prefix(a.version, "cpu"), a.version, "cpu")
    why = check(env)
    if why:
        print(f"no real SGLang {a.version} CPU venv ({why}); run: autotune sglang-env install "
              f"--version {a.version} --device cpu")
        return 1
    port = free_port()
    argv = [str(env.python), "-m", "sglang.launch_server", "--model-path", str(MODEL), "--host", "127.0.0.1",
            "--port", str(port), *cpu_flags(a.version), "--attention-backend", "torch_native",
            "--max-total-tokens", "16384", "--load-format", "dummy"]
    work = Path(tempfile.mkdtemp(prefix="real-bench-"))
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    with ServerProcess(argv, env=dict(CPU_ENV), log_path=work / "server.log", host="127.0.0.1", port=port,
                       startup_timeout_s=600) as server:
        t0 = time.monotonic()
        for i in range(a.repeats):
            theirs.append(bench_serving(env.python, server.url, a, seed=i + 1))
            ours.append(autotune_bench(server.url, a, seed=i + 1, details=work / f"ours{i}.jsonl"))
            print(f"repeat {i + 1}: bench_serving {theirs[-1]['tok_s']:.1f} tok/s, autotune {ours[-1]['tok_s']:.1f} "
                  f"tok/s", flush=True)
        took = time.monotonic() - t0
    expected = a.num_prompts * a.output_len
    print(f"\nreal SGLang {a.version} on CPU, tiny Llama (dummy weights), {a.num_prompts} prompts x {a.input_len} in / "
          f"{a.output_len} out, concurrency {a.concurrency}, {a.repeats} alternating repeats on one server "
          f"({took:.0f} s); median [min-max], all measured")
    print(f"{'':22}{'output tok/s':>26}{'median TTFT ms':>26}{'median TPOT ms':>26}   output tokens")
    for name, rows in (("bench_serving", theirs), ("autotune bench", ours)):
        toks = sorted({r["tokens"] for r in rows})
        print(f"{name:22}{_med(rows, 'tok_s'):>26}{_med(rows, 'ttft_ms'):>26}{_med(rows, 'tpot_ms'):>26}   {toks}")
    exact = all(r["tokens"] == r["server_tokens"] == r["streamed_tokens"] == expected for r in ours)
    ratio = statistics.median(r["tok_s"] for r in ours) / statistics.median(r["tok_s"] for r in theirs)
    print(f"\nautotune output tokens == sum of the server's completion_tokens == streamed == {expected}: {exact}")
    print(f"autotune / bench_serving output throughput (medians): {ratio:.3f} ({(ratio - 1) * 100:+.1f} %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
