"""Benchmark: autotune on a study of thousands of trials.

1. Builds a 2,000-trial study of the demo (TPE, as the demo samples) with the offline
   evaluator (no processes; a short workload, 64 prompts of 32 tokens), kept in
   ``benchmarks/.cache/`` for later runs (``--rebuild`` to redo it). ``--driven K`` drives
   only the first K trials through the driver and tops the study up to the total with
   copies of them (``study.add_trial``: same parameters, values, attributes and constraints;
   their notes, like the driven trials', are generated when read), when a full drive does not fit the time at hand; the output says how many
   were driven. Then 20 more trials are driven on the full study: the driver's cost per
   trial at that size.
2. Times what a person runs on it, as a person runs it (a fresh ``python -m autotune``
   process each, imports included): ``status``, ``best``, ``export -o x.csv``,
   ``report -o x.html``; and the dashboard's study list and trial list
   (``/api/studies/<id>``, all trials) over HTTP. Three runs each: median [min-max].
3. The driver's own cost per trial (ask, memory prediction, tell, user attributes,
   artifacts, note: the loop's wall time less the evaluator's), on SQLite and on
   PostgreSQL (a throwaway server, as the tests start one), for the same 200-trial study:
   median and p90 per trial, and over the 2,000-trial build, for its first and last 200.

All figures are measured on this machine, none modelled; the offline evaluator's
throughput figures are not the point here. Goal: each command under 10 s.

    python benchmarks/scale.py                  # build (once) and time
    python benchmarks/scale.py --trials 500     # a smaller study
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "benchmarks" / ".cache" / "scale"
GOAL_S = 10.0


def study_file(where: Path, n: int, storage: str | None = None, name: str = "scale") -> Path:
    data = yaml.safe_load((ROOT / "studies" / "demo.yaml").read_text())
    data["server"]["model_path"] = str(ROOT / "studies" / "models" / "kimi-k2-class")
    data["search_space"]["speculative"]["draft_model_path"] = str(ROOT / "studies" / "models" / "kimi-k2-class-eagle3")
    data["workload"].update({"num_prompts": 64, "output_len": 32, "warmup_requests": 0})
    data.update({"name": name, "n_trials": n, "run_dir": str(where / f"runs-{name}")})
    data["search"] = {**data.get("search", {}), "confirm_top": 2}
    if storage:
        data["storage"] = storage
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def build(path: Path) -> list[float]:
    """Run the study offline; return the driver's own seconds per trial (wall less evaluator)."""
    from autotune.spec import load_study_spec
    from autotune.study.driver import run_study
    from autotune.study.execution.offline import OfflineExecutor
    from autotune.study.observer import Progress
    from autotune.trial.offline import evaluate

    spent = {"eval": 0.0}
    marks: list[float] = []
    last = [time.perf_counter(), 0.0]

    def timed(req: Any) -> Any:
        t = time.perf_counter()
        try:
            return evaluate(req)
        finally:
            spent["eval"] += time.perf_counter() - t

    def on_trial_end(_study: Any, _trial: Any) -> None:
        now = time.perf_counter()
        ev = spent["eval"]
        marks.append((now - last[0]) - (ev - last[1]))
        last[0], last[1] = now, ev

    run_study(load_study_spec(path), executor=OfflineExecutor(timed), progress=Progress(on_trial_end=on_trial_end))
    return marks


def top_up(path: Path, total: int) -> int:
    """Copy driven trials (cycling) until the study holds ``total``; return how many were added."""
    import optuna

    from autotune.spec import load_study_spec
    from autotune.study.storage.opening import open_study

    study = open_study(load_study_spec(path))  # opened to write (create=False opens read-only)
    done = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    added = 0
    while len(done) + added < total:
        src = done[added % len(done)]
        copy = optuna.trial.create_trial(
            state=src.state, value=src.value if src.state == optuna.trial.TrialState.COMPLETE else None,
            params=src.params, distributions=src.distributions, user_attrs=src.user_attrs,
            system_attrs=src.system_attrs, intermediate_values=src.intermediate_values)
        study.add_trial(copy)  # no stored note: like a driven trial's, its note is generated at read time
        added += 1
    return added


def timed_cli(argv: list[str], runs: int = 3) -> tuple[float, float, float, int]:
    times = []
    rc = 0
    for _ in range(runs):
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "autotune", *argv], capture_output=True, text=True,
                              check=False, timeout=600)
        times.append(time.perf_counter() - t)
        rc = rc or proc.returncode
        if proc.returncode:
            print(f"  {' '.join(argv[:1])} failed: {proc.stderr.strip()[-300:]}", file=sys.stderr)
    return statistics.median(times), min(times), max(times), rc


def timed_dashboard(path: Path, runs: int = 3) -> dict[str, tuple[float, float, float, int]]:
    from autotune.results.dashboard import serve_in_thread, url_of
    from autotune.spec import load_study_spec

    spec = load_study_spec(path)
    httpd, thread = serve_in_thread(spec, "127.0.0.1", 0)
    out: dict[str, tuple[float, float, float, int]] = {}
    try:
        base = url_of(httpd).removesuffix("/dashboard/")
        for label, suffix in (("studies", "/api/studies"), ("trials", None)):
            times, n = [], 0
            for _ in range(runs):
                if suffix is None:
                    with urllib.request.urlopen(base + "/api/studies", timeout=120) as r:
                        sid = next(s["study_id"] for s in json.loads(r.read())["study_summaries"]
                                   if s["study_name"] == spec.name)
                    url = f"{base}/api/studies/{sid}"
                else:
                    url = base + suffix
                t = time.perf_counter()
                with urllib.request.urlopen(url, timeout=600) as r:
                    body = json.loads(r.read())
                times.append(time.perf_counter() - t)
                n = len(body.get("trials", body.get("study_summaries", [])))
            out[label] = (statistics.median(times), min(times), max(times), n)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
    return out


def per_trial(marks: list[float]) -> str:
    if not marks:
        return "-"
    q = statistics.quantiles(marks, n=10) if len(marks) >= 10 else [max(marks)] * 9
    return f"median {statistics.median(marks) * 1000:.0f} ms, p90 {q[8] * 1000:.0f} ms"


def postgres_overhead(n: int) -> list[float] | str:
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        return f"skipped: {exc}"
    from autotune.testing.pg_server import PgServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        return "skipped: PostgreSQL not installed"
    root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    pg = PgServer(bindir, root)
    try:
        pg.init()
        pg.start()
        url = pg.createdb("scale")
        return build(study_file(root / "study", n, storage=url, name="pg"))
    finally:
        pg.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--overhead-trials", type=int, default=200)
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--driven", type=int, default=None, help="drive this many, copy the rest (default: all)")
    ap.add_argument("--skip-overhead", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import logging

    logging.basicConfig(level=logging.ERROR)
    where = CACHE / f"n{args.trials}"
    path = study_file(where, args.trials)
    built = where / "built.json"
    if args.rebuild and where.exists():
        shutil.rmtree(where)
        path = study_file(where, args.trials)
    if not built.exists():
        driven = args.driven or args.trials
        print(f"building a {args.trials}-trial study offline in {where} ({driven} driven) ...", flush=True)
        t = time.perf_counter()
        marks = build(study_file(where, driven)) if driven else []
        build_s = time.perf_counter() - t
        t = time.perf_counter()
        added = top_up(path, args.trials)
        more = build(study_file(where, args.trials + 20))  # 20 more on the full study
        built.write_text(json.dumps({"seconds": build_s, "marks": marks, "copied": added,
                                     "copy_s": time.perf_counter() - t, "at_size": more}))
        path = study_file(where, args.trials + 20)
    info = json.loads(built.read_text())
    marks = info["marks"]
    path = study_file(where, args.trials + 20)
    print(f"study: {len(marks)} trials driven in {info['seconds']:.0f} s"
          + (f", {info['copied']} copies added" if info.get("copied") else "")
          + f", then {len(info.get('at_size', []))} more driven on the full study")
    k = min(200, len(marks) // 2)
    if marks:
        print(f"driver cost per trial during the build: first {k}: {per_trial(marks[:k])}; "
              f"last {k}: {per_trial(marks[-k:])}")
    print(f"driver cost per trial on the full study: {per_trial(info.get('at_size', []))}")

    out = where / "out"
    out.mkdir(exist_ok=True)
    rows = [
        ("status", ["status", str(path)]),
        ("status --json", ["status", str(path), "--json"]),
        ("best", ["best", str(path)]),
        ("export -o x.csv", ["export", str(path), "-o", str(out / "x.csv")]),
        ("report -o x.html", ["report", str(path), "-o", str(out / "x.html")]),
    ]
    slow = []
    print(f"{'command':24} {'median s':>9} {'min-max s':>13}")
    for label, argv in rows:
        med, lo, hi, rc = timed_cli(argv)
        flag = "" if rc == 0 and med < GOAL_S else "  <- over the goal" if rc == 0 else f"  <- exit {rc}"
        if flag:
            slow.append(label)
        print(f"{label:24} {med:9.2f} {lo:6.2f}-{hi:<6.2f}{flag}", flush=True)
    for label, (med, lo, hi, n) in timed_dashboard(path).items():
        flag = "" if med < GOAL_S else "  <- over the goal"
        if flag:
            slow.append(f"dashboard {label}")
        print(f"{'dashboard ' + label + f' ({n})':24} {med:9.2f} {lo:6.2f}-{hi:<6.2f}{flag}", flush=True)

    if not args.skip_overhead:
        n = args.overhead_trials
        tmp = Path(tempfile.mkdtemp(prefix="autotune-scale-"))
        try:
            sqlite_marks = build(study_file(tmp, n, name="sqlite"))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        pg_marks = postgres_overhead(n)
        print(f"driver cost per trial, {n}-trial study: SQLite {per_trial(sqlite_marks)}; PostgreSQL "
              + (per_trial(pg_marks) if isinstance(pg_marks, list) else pg_marks))
    print("every command under the goal" if not slow else f"over the {GOAL_S:g} s goal: {', '.join(slow)}")
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
