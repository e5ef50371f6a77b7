"""autotune: find the best launch settings for an SGLang server by experiment.

The public surface is small on purpose; everything else is an implementation
module that may change between releases.
"""

from autotune.errors import (
    AutotuneError,
    ConfigError,
    ExportError,
    LaunchError,
    LoadGenError,
    ServerNotReady,
)

__version__ = "0.1.0"

__all__ = [
    "AutotuneError",
    "ConfigError",
    "ExportError",
    "LaunchError",
    "LoadGenError",
    "ServerNotReady",
    "__version__",
]
