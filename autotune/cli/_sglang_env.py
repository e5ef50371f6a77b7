"""``autotune sglang-env install|check|model``: real SGLang environments and tiny local models."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from autotune.cli._common import add_json_flag, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sglang-env",
        help="build a venv with real SGLang (CPU or GPU), write a tiny local model for it",
        description="autotune sglang-env install --version 0.5.23 --device cpu builds (or reuses) a venv "
        "with real SGLang under ~/.cache/autotune/sglang/<version>-<device> (AUTOTUNE_CACHE moves it). "
        "On CPU it adds autotune's pure-PyTorch sgl_kernel stand-in. A study with server.device: cpu and no "
        "server.python launches that venv's python.",
    )
    sp = p.add_subparsers(dest="env_command", metavar="ACTION", required=True)
    inst = sp.add_parser("install", help="build the venv, or reuse it in seconds when it is good")
    chk = sp.add_parser("check", help="say whether the venv is there and imports SGLang (exit 1 if not)")
    for q in (inst, chk):
        q.add_argument("--version", required=True, dest="sglang_version", metavar="VERSION",
                       help="SGLang release, e.g. 0.5.23 or 0.5.9")
        q.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="cpu (default) or cuda")
        q.add_argument("--prefix", type=Path, default=None, help="venv directory (default: the cache)")
        add_json_flag(q)
    inst.add_argument("--force", action="store_true", help="rebuild even when the venv is good")
    inst.set_defaults(func=_install)
    chk.set_defaults(func=_check)
    mod = sp.add_parser("model", help="write a tiny model (config + word-level tokenizer) for --load-format dummy")
    mod.add_argument("path", type=Path, help="directory to write")
    mod.add_argument("--arch", default="llama", choices=("llama", "qwen3"))
    mod.add_argument("--vocab-size", type=int, default=384)
    mod.add_argument("--layers", type=int, default=2)
    mod.set_defaults(func=_model)


def _install(args: argparse.Namespace) -> int:
    from autotune.sglang_env import ensure

    t0 = time.monotonic()
    env, built = ensure(args.sglang_version, args.device, args.prefix, force=args.force)
    took = time.monotonic() - t0
    if args.json:
        print_json({"python": str(env.python), "env": env.env, "built": built, "seconds": round(took, 1)})
    else:
        print(f"SGLang {env.version} ({env.device}) {'built' if built else 'reused'} in {took:.0f} s: {env.python}")
        if env.env:
            print("launch with: " + " ".join(f"{k}={v}" for k, v in env.env.items()))
    return 0


def _check(args: argparse.Namespace) -> int:
    from autotune.sglang_env.install import SglangEnv, check, default_prefix

    prefix = (args.prefix or default_prefix(args.sglang_version, args.device)).expanduser().absolute()
    why = check(SglangEnv(prefix, args.sglang_version, args.device))
    if args.json:
        print_json({"python": str(prefix / "bin" / "python"), "ok": why is None, "problem": why})
    else:
        print(f"ok: {prefix / 'bin' / 'python'}" if why is None else f"not usable: {why}")
    return 0 if why is None else 1


def _model(args: argparse.Namespace) -> int:
    from autotune.sglang_env.tiny_model import write_tiny_model

    out = write_tiny_model(args.path, args.arch, vocab_size=args.vocab_size, num_layers=args.layers)
    print(f"wrote a tiny {args.arch} model to {out} (serve it with --load-format dummy)")
    return 0
