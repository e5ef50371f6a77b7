"""The memory model: will a launch fit, and how many KV tokens will it get?

- ``predictor``: ``predict(...) -> Prediction`` in named steps (P and A, f, the KV pool ``rest = A - P x (1 - f)``,
  what must fit in the slack, the verdict),
  ``Calibration``, ``cell_size_bytes``; the one prune rule.
- ``slack``: what is allocated outside weights + KV (CUDA graphs, allreduce buffers, workspaces), each
  estimate cited.
"""
