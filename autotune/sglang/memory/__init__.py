"""The memory model: will a launch fit, and how many KV tokens will it get?

- ``predictor``: ``predict(...) -> Prediction`` (SGLang's ``rest = A - P x (1 - f)`` and the slack check),
  ``Calibration``, ``cell_size_bytes``; the one prune rule.
- ``slack``: what is allocated outside weights + KV (CUDA graphs, allreduce buffers, workspaces), each
  estimate cited.
"""
