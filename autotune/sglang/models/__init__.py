"""Per-family memory profiles: the KV cell, the pools SGLang keeps beside it and the weights per GPU.

One module per family (:mod:`.gqa` with sliding window, :mod:`.mla` with DSA, :mod:`.dsv4`,
:mod:`.mamba`), :mod:`.quant` for quantized checkpoints, :mod:`.safetensors` for exact sizes from the
shard headers, :mod:`.weights` for what each rank loads and :mod:`.sizing` for the dispatch the memory
model and the simulator call. :mod:`autotune.sglang.models` builds the profile from them.
"""
