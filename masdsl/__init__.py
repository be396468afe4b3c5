"""masdsl: declare multi-agent LLM systems in `.mas` files and train them with AT-GRPO."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["load", "loads", "__version__"]


def load(path):
    """Parse, check and compile a `.mas` file into a `Workflow` (raises `MasError`)."""
    from masdsl.lang import load as _load  # lazy: every `masdsl.*` import runs this file (the CLI too)

    return _load(path)


def loads(text: str, name: str = "<string>", base_dir=None):
    """Like `load`, from text; `name` is the file name shown in errors."""
    from masdsl.lang import loads as _loads  # lazy: every `masdsl.*` import runs this file (the CLI too)

    return _loads(text, name=name, base_dir=base_dir)
