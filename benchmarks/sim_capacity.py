"""How many tokens per second the *simulated* SGLang server can stream on this machine.

Starts ``python -m autotune.sim`` with a huge time scale (so the modelled engine is never
the limit), drives it at concurrency 256 with streaming ``/generate`` requests from a
minimal aiohttp client, and prints the wall-clock token rate. A load point whose modelled
throughput / time scale approaches this figure measures the simulator, not the config:
keep ``modelled tok/s / time_scale`` well below it.

    python benchmarks/sim_capacity.py [--concurrency 256] [--requests 1024] [--output-len 256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"simulated server exited with {proc.returncode}")
            try:
                async with session.get(url + "/health") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("simulated server did not become ready")


async def _drive(url: str, concurrency: int, requests: int, output_len: int) -> tuple[int, int, float]:
    """Return (tokens received, SSE chunks received, wall seconds)."""
    sem = asyncio.Semaphore(concurrency)
    tokens = chunks = 0
    payload = {"input_ids": [1] * 128, "stream": True,
               "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True}}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:

        async def one() -> None:
            nonlocal tokens, chunks
            async with sem, session.post(url + "/generate", json=payload) as resp:
                last = None
                async for raw in resp.content:
                    line = raw.strip()
                    if not line.startswith(b"data: ") or line == b"data: [DONE]":
                        continue
                    chunks += 1
                    last = line
                if last is not None:
                    tokens += json.loads(last[6:])["meta_info"]["completion_tokens"]

        t0 = time.monotonic()
        await asyncio.gather(*(one() for _ in range(requests)))
        return tokens, chunks, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--requests", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--time-scale", type=float, default=1e6)
    ap.add_argument("--stream-interval", type=int, default=1)
    args = ap.parse_args()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "autotune.sim", "--model-path", str(REPO / "studies/models/qwen3-32b-class"),
            "--sim-gpu", "h100", "--sim-time-scale", str(args.time_scale), "--port", str(port),
            "--stream-interval", str(args.stream_interval), "--max-running-requests", str(max(args.concurrency, 1))]
    with tempfile.NamedTemporaryFile(prefix="sim-capacity-", suffix=".log", delete=False) as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
    try:
        asyncio.run(_wait_ready(url, proc))
        tokens, chunks, wall = asyncio.run(_drive(url, args.concurrency, args.requests, args.output_len))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    print(f"simulator capacity on this machine ({os.cpu_count()} cores), concurrency {args.concurrency}, "
          f"{args.requests} requests x {args.output_len} tokens, stream_interval {args.stream_interval}:")
    print(f"  {tokens} tokens in {chunks} SSE chunks in {wall:.2f} s wall")
    print(f"  {tokens / wall:,.0f} tokens/s streamed ({chunks / wall:,.0f} chunks/s)")
    print(f"  server log: {log.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
