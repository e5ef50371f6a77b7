"""Knowledge of the SGLang engine, with no processes: flag dialects per version,
the memory model, automatic defaults, the startup-log parser, model profiles read
from a Hugging Face ``config.json`` and the GPU catalogue."""
