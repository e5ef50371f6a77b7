"""The study: the ask/tell loop that is the only writer of optuna storage (docs/ARCHITECTURE.md).

- ``driver``: ``StudyDriver`` / ``run_study``: the loop as named phases (budget, confirmation, next
  launch, finish), interrupted trials marked and requeued.
- ``candidates``: from an optuna trial to a checked launch (SGLang's refusals, the memory
  prediction, the one prune rule) and its ``TrialRequest``.
- ``prediction``: ``Predictor``: the memory model for a study's candidates, with its calibration.
- ``record``: what a finished trial carries, teaches the memory model, and the failures it adds.
- ``phases``: staged search and the confirmation of the winner; the ranking of trials.
- ``infeasible``: infeasible regions learnt from failures (the same crash never paid for twice).
- ``reuse``: a launch already measured answered from its stored result. ``rerun``: which failures run again.
- ``calibration``: P, A, KV tokens and graph memory from a log, stored with the study;
  ``log_check``: does the log belong to this study.
- ``warm_start``: what earlier studies carry into this one.
- ``plan``: ``autotune plan``: the memory verdicts without a launch.
- ``attrs``: the keys of what a trial and the study carry (the results layer reads them).
- ``observer``: the ``Progress`` hooks and the trial counts the views read.
- ``search/``: samplers, the search policy and designed start, the noise-aware estimate, racing, the pruner.
- ``execution/``: where trial bodies run (inline, offline, Ray).
- ``storage/``: opening, checking, reading the study's storage; riding out restarts; the driver's lock;
  the study's identity (a study resumed or shown from another study file of the same name is refused).
"""
