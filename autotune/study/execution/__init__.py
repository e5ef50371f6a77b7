"""Where trial bodies run: the driver owns the interface, each executor implements it.

- ``executor``: the ``Executor`` interface and ``InlineExecutor`` (in-process, one trial at a time).
- ``offline``: ``OfflineExecutor``, the inline executor over the offline evaluator (no processes).
- ``disk_fault``: a full or read-only disk under the run directory, the node's fault: the study stops cleanly.
- ``ray``: ``RayExecutor`` and what it needs on Ray (cluster, capacity, the trial task, its guard).
"""
