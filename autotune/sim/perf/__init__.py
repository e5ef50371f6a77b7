"""The simulated server's speed model: how long one engine step takes (docs/simulator-speed.md).

Modules:

* :mod:`~autotune.sim.perf.model` - :class:`~autotune.sim.perf.model.PerfModel`: prefill, decode and speculative steps;
* :mod:`~autotune.sim.perf.forward` - the roofline of one forward pass on one GPU, and an MTP checkpoint's draft head;
* :mod:`~autotune.sim.perf.gpu` - what each GPU kind achieves (bandwidth, GEMM, attention shares, kernel floor);
* :mod:`~autotune.sim.perf.comm` - allreduce and EP all-to-all costs;
* :mod:`~autotune.sim.perf.knobs` - the speed effects of the catalogue's knobs;
* :mod:`~autotune.sim.perf.fitted` - which published sets each fitted constant was fitted on.
"""
