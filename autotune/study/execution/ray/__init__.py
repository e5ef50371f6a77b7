"""Trials as Ray tasks, in parallel on a node's GPUs and across nodes (imported only when a study uses Ray).

- ``executor``: ``RayExecutor``: first-fit admission, the report hub, worker deaths as results.
- ``cluster``: connecting to Ray: an existing cluster, or a local instance bound to loopback.
- ``capacity``: how many more trials fit: first-fit packing of per-trial needs onto nodes (no Ray import).
- ``task``: what runs on the Ray side: the trial task and the report hub actor.
- ``guard``: a per-trial guard that ends every process a trial started once its worker is gone.
"""
