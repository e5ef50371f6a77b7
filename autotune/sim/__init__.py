"""The simulated SGLang server: ``python -m autotune.sim`` (see docs/ARCHITECTURE.md).

It stands in for ``python -m sglang.launch_server`` on machines without GPUs and in every
test: the same flags (per version dialect), the same startup log lines and failures at
the same phase, the same endpoints and response shapes, in *modelled* time scaled by
``--sim-time-scale``.

Modules:

* :mod:`~autotune.sim.args` - SGLang's parser for the version plus ``--sim-*`` flags;
* :mod:`~autotune.sim.hardware` - the memory truth (P, A, KV tokens, slack consumers);
* :mod:`~autotune.sim.startup` - startup phases, log lines, failure texts;
* :mod:`~autotune.sim.http` - aiohttp endpoints (``/generate``, OpenAI, info, ``/sim/stats``);
* :mod:`~autotune.sim.engine` - continuous batching in modelled time (its own map);
* :mod:`~autotune.sim.perf` - the speed model: how long one engine step takes (its own map);
* :mod:`~autotune.sim.weight_load` - how long loading the weights from disk takes;
* :mod:`~autotune.sim.faults` - ``--sim-fault`` injection;
* :mod:`~autotune.sim.child` - the stand-in scheduler child process;
* :mod:`~autotune.sim.tokenizer` - one token per whitespace-separated word.

Nothing is imported here, so ``python -m autotune.sim.child`` starts fast.
"""
