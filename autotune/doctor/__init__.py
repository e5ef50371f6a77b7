"""``autotune doctor``: the node checked before a long study, on the floor of the results (it reads the
study file, the study's storage and the node; nothing below imports it).

- ``checks``: ``run_checks(spec) -> [Check]``: GPUs (NVML), SGLang, the model, disk, ports, storage, Ray.
"""
