"""Knowledge of the SGLang engine, with no processes.

- ``versions``: ``SglangVersion``: parsing, ordering, memory regime A/B, flag dialect.
- ``releases``: per-release boundaries of SGLang's automatic values (each read from the release's wheel).
- ``defaults``: SGLang's automatic values per version (chunk size, graph batch sizes, f, max running requests).
- ``logparse``: SGLang startup logs -> events, and the memory facts they show.
- ``flags/``: each release's flags, rendering a config into argv, SGLang's own parser (real and modelled).
- ``knobs/``: ``ServerConfig``, the knob catalogue, where a knob matters, what SGLang refuses.
- ``memory/``: the memory model (``predict``) and what is allocated outside weights + KV.
- ``models/``: model profiles read from config.json, and the per-family sizing rules.
- ``hardware/``: the GPU catalogue, AMD ROCm's differences, running on CPU.
"""
