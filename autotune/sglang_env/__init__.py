"""Real SGLang environments: a venv per version and device, the CPU ``sgl_kernel`` stand-in, tiny models.

Modules: ``install`` (build or reuse a venv: ``autotune sglang-env install``), ``packages`` (what a venv
holds per version and device), ``resolve`` (which python launches a study's SGLang, with which environment),
``tiny_model`` (tiny local models for CPU), ``sgl_kernel_cpu/`` (the CPU ``sgl_kernel`` stand-in).
"""

from autotune.sglang_env.install import EnvBuildError, SglangEnv, default_prefix, ensure

__all__ = ["EnvBuildError", "SglangEnv", "default_prefix", "ensure"]
