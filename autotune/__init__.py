"""autotune: find the best launch settings for an SGLang server by experiment.

The public surface is small on purpose; everything else is an implementation
module that may change between releases. The floors, bottom up (docs/ARCHITECTURE.md):

- ``errors``, ``outcome``, ``objective``, ``redact``, ``limits``: the exception root, failure kinds, the
  objective and SLO, the one rule for secrets, every input limit (and how an error echoes a value).
- ``files``, ``safe_yaml``: a file read bounded; YAML with an alias and a depth budget.
- ``sglang/``: engine knowledge, no processes (flags, knobs, the memory model, models, hardware).
- ``load/``: the load generator (bench_serving's metrics from one asyncio client).
- ``spec``: the study file's model (``load_study_spec``); reads no node.
- ``node/``: the node's GPUs and topology (``hardware: auto``), and the study file as commands load it.
- ``space``, ``space_prune``: the search space -> ``ServerConfig``; what cannot matter, out of it.
- ``ray_address``, ``storage_check``: a Ray address and a storage URL checked before Ray or optuna gets them.
- ``launch/``: server processes and their teardown. ``sim/``: the simulated SGLang server.
  ``sglang_env/``: real SGLang environments.
- ``trial/``: what a trial is and how it is measured (live and offline evaluators).
- ``preflight``: every process-free check of a study, before Ray, SGLang or storage.
- ``study/``: the ask/tell driver, its search, execution and storage.
- ``results/``: status, best, export, report, dashboard (reads the study). ``doctor/``: the node checked.
- ``cli/``: the ``autotune`` command, thin over the floors below.
- ``testing/``: servers and studies the tests and benchmarks run against (nothing here imports it).
"""

from autotune.errors import (
    AutotuneError,
    ConfigError,
    ExportError,
    LaunchError,
    LoadGenError,
    ServerNotReady,
)

__version__ = "0.1.0"

__all__ = [
    "AutotuneError",
    "ConfigError",
    "ExportError",
    "LaunchError",
    "LoadGenError",
    "ServerNotReady",
    "__version__",
]
