"""The devices SGLang runs on, as autotune needs them.

- ``gpus``: the GPU catalogue (``GpuKind``, ``get_gpu``, custom GPUs described by their figures).
- ``rocm``: what SGLang does differently on AMD Instinct GPUs, each rule cited.
- ``cpu``: what real SGLang needs to run on CPU (``server.device: cpu``).
"""
