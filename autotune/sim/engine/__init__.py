"""The simulated server's token engine: SGLang's continuous batching in modelled time.

Modules:

* :mod:`~autotune.sim.engine.core` - :class:`~autotune.sim.engine.core.Engine`: submit, generate, step, stop;
* :mod:`~autotune.sim.engine.api` - the plain data of its public API (chunks, step results, the stop error);
* :mod:`~autotune.sim.engine.scheduler` - admission, chunked prefill, decode batches, retraction;
* :mod:`~autotune.sim.engine.request` - one request inside the engine and the handle on it;
* :mod:`~autotune.sim.engine.cache` - the prefix cache (SGLang's radix tree in miniature);
* :mod:`~autotune.sim.engine.clock` - the modelled clock (anchoring, lag, reaction rules);
* :mod:`~autotune.sim.engine.factory` - the engine a launch gets, one factory for every driver.
"""
