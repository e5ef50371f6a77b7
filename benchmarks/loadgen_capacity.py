"""How many output tokens per second can the load generator take in, and at what CPU cost?

Starts autotune/testing/loadgen_fake_server.py streaming as fast as the client reads (no pacing;
uvloop, back-pressure aware), then runs, one after the other against fresh servers:

* ours: ``python -m autotune.cli bench --json`` (its own figures: output tok/s, client CPU
  microseconds per output token over the timed run; plus the whole process's CPU),
* SGLang's ``bench_serving`` (python client), when a throwaway venv has it: set
  ``LOADGEN_SGLANG_PY`` to that venv's python (default /tmp/v-sglang/bin/python). Made with
  ``python -m venv /tmp/v-sglang && /tmp/v-sglang/bin/pip install --no-deps sglang &&
  /tmp/v-sglang/bin/pip install aiohttp numpy requests tqdm transformers tokenizers pybase64
  pillow orjson uvloop psutil pyzmq msgspec jinja2 datasets`` (no torch needed),
* guidellm and aiperf, when ``LOADGEN_<TOOL>_BIN`` (default /tmp/v-<tool>/bin/<tool>) exists
  (``python -m venv /tmp/v-guidellm && /tmp/v-guidellm/bin/pip install guidellm``; same for
  aiperf); judged by the server's count and their process CPU, their own reports are not
  parsed. inference-perf (Python >= 3.12) is not driven. A peer that is missing or fails
  is skipped, and the script says why.

Every tool gets the same work: concurrency 256, 256 output tokens, 128 input tokens,
completions endpoint. Throughput is also taken from the server's own count (tokens
completed / first arrival to last completion) so the tools are compared on one ruler.
Process CPU is measured with getrusage(RUSAGE_CHILDREN) around each tool's process.

Usage: python benchmarks/loadgen_capacity.py [--concurrency 256] [--output-len 256] [--num-prompts 2048]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from autotune.testing.loadgen_fake_server import FakeServer, running

REPO = Path(__file__).resolve().parents[1]

# Runs sglang's benchmark module without sglang's package __init__s (they import torch); stubs the
# one constant it takes from a torch-importing module. Install: see the module docstring.
_SGLANG_SHIM = r"""
import importlib.util, runpy, sys, types
root = importlib.util.find_spec("sglang").submodule_search_locations[0]
for name, sub in (("sglang", ""), ("sglang.benchmark", "/benchmark"), ("sglang.srt", "/srt"),
                  ("sglang.srt.disaggregation", "/srt/disaggregation"), ("sglang.srt.utils", "/srt/utils")):
    mod = types.ModuleType(name); mod.__path__ = [root + sub]; sys.modules[name] = mod
utils = types.ModuleType("sglang.srt.disaggregation.utils"); utils.FAKE_BOOTSTRAP_HOST = "2.2.2.2"
sys.modules["sglang.srt.disaggregation.utils"] = utils
target = "sglang.benchmark.serving" if importlib.util.find_spec("sglang.benchmark.serving") else "sglang.bench_serving"
sys.argv = [target] + sys.argv[1:]
runpy.run_module(target, run_name="__main__")
"""


def _run_tool(
    argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 300
) -> tuple[int, str, float, float]:
    """Run one tool; return (rc, stdout, then the tail of stderr; wall s; CPU s of it and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc.returncode, proc.stdout + "\n" + proc.stderr[-3000:], wall, cpu


def ours(server: FakeServer, a: argparse.Namespace) -> dict[str, Any]:
    argv = [sys.executable, "-m", "autotune.cli", "bench", "--url", server.url, "--backend", "openai",
            "--concurrency", str(a.concurrency), "--num-prompts", str(a.num_prompts), "--input-len", "128",
            "--output-len", str(a.output_len), "--warmup-requests", "0", "--flush-cache", "--json"]
    rc, out, wall, cpu = _run_tool(argv)
    if rc != 0:
        return {"tool": "autotune", "skipped": f"exit {rc}: {out[-300:]}"}
    row = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    truth = server.stats()
    return {
        "tool": "autotune",
        "reported_tok_s": row["output_throughput"],
        "server_tok_s": truth["output_throughput"],
        "cpu_us_per_token_run": row["client_cpu_us_per_token"],
        "cpu_us_per_token_process": cpu * 1e6 / truth["total_output_tokens"],
        "client_bound": row["client_bound"],
        "wall_s": wall,
    }


def sglang_bench(server: FakeServer, a: argparse.Namespace, tok_dir: Path) -> dict[str, Any]:
    py = os.environ.get("LOADGEN_SGLANG_PY", "/tmp/v-sglang/bin/python")
    if not Path(py).exists():
        return {"tool": "sglang bench_serving", "skipped": f"no python at {py} (set LOADGEN_SGLANG_PY)"}
    with tempfile.TemporaryDirectory() as tmp:
        out_file = Path(tmp) / "res.jsonl"
        argv = [py, "-c", _SGLANG_SHIM, "--backend", "sglang-oai", "--base-url", server.url, "--model", "fake-model",
                "--tokenizer", str(tok_dir), "--dataset-name", "random-ids", "--random-input-len", "128",
                "--random-output-len", str(a.output_len), "--random-range-ratio", "1.0",
                "--num-prompts", str(a.num_prompts), "--max-concurrency", str(a.concurrency), "--disable-tqdm",
                "--output-file", str(out_file)]
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        try:
            rc, out, wall, cpu = _run_tool(argv, env=env)
        except subprocess.TimeoutExpired:
            return {"tool": "sglang bench_serving", "skipped": "timed out"}
        if rc != 0 or not out_file.exists():
            return {"tool": "sglang bench_serving", "skipped": f"exit {rc}: {out[-400:]}"}
        row = json.loads(out_file.read_text().splitlines()[-1])
    truth = server.stats()
    return {
        "tool": "sglang bench_serving",
        "reported_tok_s": row["output_throughput"],
        "server_tok_s": truth["output_throughput"],
        "cpu_us_per_token_run": None,
        "cpu_us_per_token_process": cpu * 1e6 / max(truth["total_output_tokens"], 1),
        "client_bound": None,
        "wall_s": wall,
    }


def make_tokenizer(path: Path) -> bool:
    """A tiny word-level tokenizer for peers that insist on one (needs `tokenizers`)."""
    code = r"""
import sys, json
from tokenizers import Tokenizer, models, pre_tokenizers
vocab = {"[UNK]": 0, "tok": 1, **{f"w{i}": i + 2 for i in range(30000)}}
tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]")); tk.pre_tokenizer = pre_tokenizers.Whitespace()
d = sys.argv[1]; tk.save(d + "/tokenizer.json")
json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "model_max_length": 1000000},
          open(d + "/tokenizer_config.json", "w"))
json.dump({"model_type": "llama"}, open(d + "/config.json", "w"))
"""
    py = os.environ.get("LOADGEN_SGLANG_PY", "/tmp/v-sglang/bin/python")
    if not Path(py).exists():
        return False
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run([py, "-c", code, str(path)], capture_output=True).returncode == 0


def _peer(server: FakeServer, tool: str, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run a peer whose own report format we do not parse: judged by the server's count."""
    try:
        rc, out, wall, cpu = _run_tool(argv, env=env, timeout=400)
    except subprocess.TimeoutExpired:
        return {"tool": tool, "skipped": "timed out after 400 s"}
    truth = server.stats()
    if rc != 0 or not truth.get("completed"):
        return {"tool": tool, "skipped": f"exit {rc}, {truth.get('completed', 0)} requests served: {out[-300:]}"}
    return {
        "tool": tool,
        "reported_tok_s": None,
        "server_tok_s": truth["output_throughput"],
        "cpu_us_per_token_run": None,
        "cpu_us_per_token_process": cpu * 1e6 / truth["total_output_tokens"],
        "client_bound": None,
        "wall_s": wall,
    }


def hf_cache_alias(tok_dir: Path, hf_home: Path, repo: str = "local/tiny-tok") -> None:
    """Serve a local tokenizer under a repo id from an offline HF cache (aiperf wants a repo id)."""
    commit = "1" * 40
    d = hf_home / "hub" / f"models--{repo.replace('/', '--')}"
    (d / "refs").mkdir(parents=True, exist_ok=True)
    (d / "refs" / "main").write_text(commit)
    snap = d / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    for f in tok_dir.iterdir():
        shutil.copy(f, snap / f.name)


def other_peers(a: argparse.Namespace, tok_dir: Path, work: Path, server_opts: tuple[str, ...]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    hf_home = work / "hf"
    hf_cache_alias(tok_dir, hf_home)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(hf_home),
               GUIDELLM__LOGGING__CONSOLE_LOG_LEVEL="ERROR")
    found = {
        "guidellm": os.environ.get("LOADGEN_GUIDELLM_BIN", "/tmp/v-guidellm/bin/guidellm"),
        "aiperf": os.environ.get("LOADGEN_AIPERF_BIN", "/tmp/v-aiperf/bin/aiperf"),
        "inference-perf": os.environ.get("LOADGEN_INFERENCE_PERF_BIN", "/tmp/v-infperf/bin/inference-perf"),
    }
    for tool, exe in found.items():
        if not Path(exe).exists():
            var = f"LOADGEN_{tool.upper().replace('-', '_')}_BIN"
            rows.append({"tool": tool, "skipped": f"not installed at {exe} (set {var})"})
            continue
        if tool == "inference-perf":
            rows.append({"tool": tool, "skipped": "needs Python >= 3.12 and a YAML config; no driver here"})
            continue
        with running(*server_opts) as server:
            if tool == "guidellm":
                argv = [exe, "run", "--backend",
                        f"kind=openai_http,target={server.url},request_format=/v1/completions,model=fake-model",
                        "--profile", f"kind=concurrent,streams={a.concurrency}",
                        "--data", f"kind=synthetic_text,prompt_tokens=128,output_tokens={a.output_len}",
                        "--tokenizer", f"kind=huggingface_auto,model={tok_dir}",
                        "--constraint", f"kind=max_requests,count={a.num_prompts}",
                        "--output", f"kind=json,path={work / 'guidellm.json'}", "--disable-progress"]
            else:
                argv = [exe, "profile", "--model", "fake-model", "--url", server.url, "--endpoint-type",
                        "completions", "--streaming", "--concurrency", str(a.concurrency), "--request-count",
                        str(a.num_prompts), "--synthetic-input-tokens-mean", "128",
                        "--synthetic-input-tokens-stddev", "0", "--output-tokens-mean", str(a.output_len),
                        "--output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true", "--tokenizer",
                        "local/tiny-tok", "--ui-type", "none", "--artifact-dir", str(work / "aiperf"),
                        "--no-gpu-telemetry", "--no-server-metrics"]
            rows.append(_peer(server, tool, argv, env))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--num-prompts", type=int, default=2048)
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    server_opts = ("--token-delay-ms", "0", "--ttft-ms", "0", "--uvloop")
    rows = []
    with running(*server_opts) as server:
        rows.append(ours(server, a))
    if not a.skip_peers:
        with tempfile.TemporaryDirectory() as tmp:
            tok = Path(tmp) / "tok"
            if make_tokenizer(tok):
                with running(*server_opts) as server:
                    rows.append(sglang_bench(server, a, tok))
                rows.extend(other_peers(a, tok, Path(tmp), server_opts))
            else:
                rows.append({"tool": "peers", "skipped": "no venv with `tokenizers` to build their tokenizer"})
    print(f"load average (1 min): {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; c={a.concurrency}, "
          f"output {a.output_len} tokens, {a.num_prompts} requests, fake server streaming unpaced")
    if a.json:
        print(json.dumps(rows))
        return 0
    print(f"{'tool':<22} {'reported tok/s':>14} {'server tok/s':>13} {'us/tok (run)':>13} {'us/tok (proc)':>14}")
    for r in rows:
        if "skipped" in r:
            print(f"{r['tool']:<22} skipped: {r['skipped'][:200]}")
            continue
        run = f"{r['cpu_us_per_token_run']:.2f}" if r["cpu_us_per_token_run"] is not None else "-"
        rep = f"{r['reported_tok_s']:.0f}" if r["reported_tok_s"] is not None else "-"
        print(f"{r['tool']:<22} {rep:>14} {r['server_tok_s']:>13.0f} {run:>13} "
              f"{r['cpu_us_per_token_process']:>14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
