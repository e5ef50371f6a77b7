"""Layout study on 8 GPUs: one TP-8 server vs two TP-4 vs four TP-2 replicas, per-node throughput.

Runs ``studies/layout.yaml`` (Llama-3.1-70B class on 8 x RTX PRO 6000 over PCIe,
SGLang 0.5.23, simulated) through the study driver with the offline executor
(the simulated server's parser, memory plan and engine in modelled time), so
each layout is one trial exactly as ``autotune run`` would launch it: a replica
layout is SGLang's own ``--dp-size`` (one server, its router feeding ``dp``
replicas of ``tp`` GPUs), so the measured output throughput is the node's.
Figures are modelled (the simulator's speed model), not measured on hardware.

Why --dp-size and not separate servers or one replica scaled: it is one
endpoint, as a user deploys it; one process group to launch and tear down; the
router's imbalance is in the measurement; and Ray reserves the same 8 GPUs for
every layout, so trials compare like for like.

Usage::

    python benchmarks/layout_study.py [--concurrency 256] [--num-prompts 512]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import optuna
import yaml

from autotune.spec import load_study_spec
from autotune.study.driver import run_study
from autotune.study.execution.offline import OfflineExecutor

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--num-prompts", type=int, default=512)
    args = ap.parse_args(argv)
    data = yaml.safe_load((ROOT / "studies" / "layout.yaml").read_text())
    data["server"]["model_path"] = str(ROOT / "studies" / "models" / "llama-3.1-70b-class")
    data["workload"].update({"concurrency": [args.concurrency], "num_prompts": args.num_prompts})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "layout.yaml"
        path.write_text(yaml.safe_dump(data))
        spec = load_study_spec(path)
        run_study(spec, executor=OfflineExecutor())
        study = optuna.load_study(study_name=spec.name, storage=spec.storage_url)
        print(f"Layouts of {data['server']['model_path'].rsplit('/', 1)[-1]} on 8 x {data['hardware']['gpu']} "
              f"({data['hardware']['interconnect']}), concurrency {args.concurrency} (modelled by the simulator)")
        seen = set()
        for t in sorted(study.trials, key=lambda t: -(t.value or 0)):
            lay = t.params.get("layout")
            if lay in seen:
                continue
            seen.add(lay)
            pred = t.user_attrs.get("prediction", {})
            if t.state.name != "COMPLETE":
                print(f"  {lay:<8} {t.state.name}: {t.user_attrs.get('reason', '')[:120]}")
                continue
            print(f"  {lay:<8} {t.value:9.1f} output tok/s per node   median TPOT {t.user_attrs.get('median_tpot_ms', 0):6.1f}"
                  f" ms   KV tokens per replica {pred.get('kv_tokens', 0):>9,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
