"""What the node itself says, and the study file as the commands load it on this node.

- ``nvml``: the GPUs as NVML reports them. ``amd``: as AMD SMI reports them.
- ``topology``: ``nvidia-smi topo -m``: how the GPUs are linked.
- ``auto``: ``hardware: auto``: the hardware block filled in from the node (or a GPU's figures).
- ``study_file``: ``load_study``: the study file with its hardware resolved here, then validated by
  ``autotune.spec`` (which reads no node).

``autotune doctor``'s checks live in :mod:`autotune.doctor.checks`, on the floor of the results.
"""
