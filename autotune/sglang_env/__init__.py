"""Real SGLang environments: a venv per version and device, the CPU ``sgl_kernel`` stand-in, tiny models."""

from autotune.sglang_env.install import EnvBuildError, SglangEnv, default_prefix, ensure

__all__ = ["EnvBuildError", "SglangEnv", "default_prefix", "ensure"]
