"""Models as SGLang sizes them: the profile read from a Hugging Face directory and the per-family rules
(the KV cell, the pools SGLang keeps beside it, the weights per GPU).

- ``profile``: ``ModelProfile`` and ``load_model_profile(path)`` (config.json, then the most exact size on disk).
- ``families``: which SGLang family an architecture belongs to, and its KV layout read from config.json.
- ``layout``: what a model's KV cache looks like to SGLang's pool configurator (one record per checkpoint).
- ``gqa``: MHA / GQA and hybrid sliding-window KV cells.
- ``mla``: MLA and DSA (sparse-attention indexer) KV cells.
- ``dsv4``: DeepSeek V4's compressed KV pools.
- ``mamba``: hybrid linear-attention / Mamba models: the recurrent-state pool.
- ``quant``: quantized checkpoints: which linears are quantized, bytes per weight once loaded.
- ``safetensors``: exact checkpoint sizes from the shard headers, without reading a tensor.
- ``weights``: weight bytes per component, and what one GPU loads of them.
- ``dp_attention``: the weights DP attention keeps whole per attention-TP group.
- ``sizing``: the family dispatch the memory model and the simulator call (KV bytes per token per GPU,
  the memory reserved before the pool, weight bytes per GPU).
"""
