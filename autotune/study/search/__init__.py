"""How the study chooses what to launch next (the driver asks; these answer).

- ``samplers``: the optuna sampler a study searches with (``make_sampler``; ``sampler.kind: auto``
  chosen by the space) and the grid sampler that says when it is done.
- ``policy``: how the search spends its trials: a designed start, then stages that end when they
  stop paying (``SearchPolicy``).
- ``initial_design``: the designed starting points (memory boundaries, speculative probes,
  a space-filling set).
- ``estimate``: the noise-aware value of each configuration (ranks ``best`` and warm start's top).
- ``race``: on a noisy node, each new leader runs again during the search (to three runs, at most ``repeats``).
- ``pruner``: early stopping that stops only clearly worse trials (``make_pruner``).
"""
