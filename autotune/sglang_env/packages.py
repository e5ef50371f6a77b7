"""What a real-SGLang venv holds, per SGLang version and device.

On a GPU node SGLang installs with its own dependency set (``pip install
sglang==V``). On CPU that set pulls CUDA-only packages and the CPU build of
sgl-kernel is on no registry, so SGLang goes in with ``--no-deps`` and then an
explicit list, found import by import on a 2-core CPU machine
(``docs/gpu-nodes.md``, real SGLang without a GPU): the ordinary registry torch wheel (its
CPU-only build breaks torchvision's ops, which SGLang imports unconditionally),
and the releases each SGLang version was built against. ``datasets`` is there
for SGLang's own ``bench_serving`` (the comparison benchmark).
"""

from __future__ import annotations

from autotune.errors import ConfigError

DEVICES = ("cpu", "cuda")

_COMMON = (
    "torch==2.14.1", "torchvision==0.29.*", "triton", "safetensors", "huggingface_hub",
    "sentencepiece==0.2.1", "numpy", "scipy", "einops", "pillow", "regex", "tiktoken", "fastapi",
    "uvicorn>=0.51", "uvloop", "starlette", "aiohttp", "requests", "python-multipart", "watchfiles",
    "orjson", "msgspec", "pydantic", "pyzmq", "psutil", "pybase64", "setproctitle", "tqdm", "pyyaml",
    "dill", "zstandard", "distro", "ipython", "partial_json_parser", "gguf", "nvidia-ml-py",
    "soundfile==0.13.1", "prometheus-client", "datasets",
)

# The versions whose CPU package sets were proven on this machine kind.
_CPU_EXTRA: dict[str, tuple[str, ...]] = {
    "0.5.23": (
        "transformers==5.19.0", "tokenizers==0.23.2", "openai==2.8.0", "openai-harmony==0.0.4",
        "compressed-tensors==0.18.0", "apache-tvm-ffi==0.1.11", "mistral_common>=1.11.5",
        "smg-grpc-servicer>=0.9.0", "torch_memory_saver>=0.0.9.post1", "xgrammar==0.2.7",
    ),
    "0.5.9": (
        "transformers==4.57.1", "openai==2.6.1", "xgrammar==0.1.27", "llguidance>=0.7.11,<0.8.0",
        "apache-tvm-ffi>=0.1.5,<0.2", "torch_memory_saver==0.0.9", "interegular", "jsonschema",
        "smg-grpc-proto>=0.3.3", "grpcio>=1.78.0", "grpcio-reflection>=1.78.0",
        "grpcio-health-checking>=1.78.0", "compressed-tensors", "openai-harmony",
    ),
}


def cpu_versions() -> tuple[str, ...]:
    return tuple(_CPU_EXTRA)


def install_steps(version: str, device: str) -> list[list[str]]:
    """The ``pip install`` argument lists (after ``pip install``), in order."""
    if device not in DEVICES:
        raise ConfigError(f"--device: {device!r} is not one of {', '.join(DEVICES)}")
    if device == "cuda":
        return [[f"sglang=={version}", "datasets"]]
    if version not in _CPU_EXTRA:
        raise ConfigError(
            f"--version: {version!r} has no proven CPU package set; known: {', '.join(_CPU_EXTRA)}"
        )
    return [["--no-deps", f"sglang=={version}"], [*_COMMON, *_CPU_EXTRA[version]]]
