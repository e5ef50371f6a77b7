"""The launch knobs: what a launch is set with, where each knob matters, and what SGLang refuses.

- ``config``: ``ServerConfig`` and ``SpeculativeConfig``, the canonical knobs of one launch.
- ``catalogue``: one ``Knob`` per knob (spellings, type, where it matters, memory and speed effects).
- ``rules``: where a knob cannot matter (``dead_reason``), SGLang's overrides and refusals (``resolve``).
- ``speculative``: speculative-decoding settings checked (and adjusted) the way SGLang will.
"""
