"""Tiny real server processes for the launch tests (helpers only; no tests here).

``fake_argv(port, **opts)`` is an argv that runs ``sys.executable -c FAKE_SERVER``:
it prints SGLang-like lines, serves ``/health`` on 127.0.0.1:port, and can spawn
grandchildren, ignore SIGTERM, hang, crash, or bind a busy port, as ``opts`` say.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable

import psutil

FAKE_SERVER = r'''
import http.server, json, os, signal, subprocess, sys, threading, time
opts = json.loads(sys.argv[1])
port = opts["port"]
if opts.get("argparse"):
    import argparse
    p = argparse.ArgumentParser(prog="launch_server.py")
    p.add_argument("--model-path")
    p.parse_args(opts["argparse"])
for name in opts.get("print_env", []):
    print(f"ENV {name}={os.environ.get(name)}", flush=True)
if opts.get("ignore_term"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
for spec in opts.get("grandchildren", []):
    code = "import signal, time\n"
    if spec.get("ignore_term"):
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "time.sleep(600)\n"
    g = subprocess.Popen([sys.executable, "-c", code], start_new_session=bool(spec.get("escape")))
    print(f"GRANDCHILD {g.pid}", flush=True)
for line in opts.get("lines", []):
    print(line, flush=True)
    time.sleep(opts.get("line_delay", 0.0))
if opts.get("exit") is not None:
    time.sleep(opts.get("exit_delay", 0.0))
    sys.exit(opts["exit"])
if opts.get("hang"):
    while True:
        time.sleep(1)
ready_at = time.monotonic() + opts.get("ready_after", 0.0)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health_generate" and opts.get("no_health_generate"):
            code = 404
        elif self.path in ("/health", "/health_generate"):
            code = 200 if time.monotonic() >= ready_at else 503
        else:
            code = 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
print("The server is fired up and ready to roll!", flush=True)
srv.serve_forever()
'''


def fake_argv(port: int, **opts: object) -> list[str]:
    """argv of a fake server on ``port`` behaving as ``opts`` say (see FAKE_SERVER)."""
    return [sys.executable, "-c", FAKE_SERVER, json.dumps({"port": port, **opts})]


def alive(pid: int) -> bool:
    """True when ``pid`` runs and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_all_gone(pids: Iterable[int], timeout_s: float) -> list[int]:
    """Wait until none of ``pids`` is alive; return those still alive at the deadline."""
    pids = list(pids)
    deadline = time.monotonic() + timeout_s
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def kill_quietly(pids: Iterable[int]) -> None:
    """SIGKILL whatever of ``pids`` is still alive (test cleanup)."""
    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass


def grandchild_pids(lines: Iterable[str]) -> list[int]:
    """Pids printed by the fake server as ``GRANDCHILD <pid>``."""
    return [int(ln.split()[1]) for ln in lines if ln.startswith("GRANDCHILD ")]
