"""masdsl: declare multi-agent LLM systems in `.mas` files and train them with AT-GRPO.

`masdsl.load` / `masdsl.loads` compile a workflow; `masdsl.train`, `masdsl.evaluate` and
`masdsl.rollout` (with `TrainResult`, `EvalResult`, `Rollout`) are the Python API of
`masdsl/api.py` (docs/api.md), imported on first use so that `import masdsl` stays light.
"""

from __future__ import annotations

import os as _os

from masdsl.version import __version__

__all__ = ["load", "loads", "train", "evaluate", "rollout", "TrainResult", "EvalResult", "Rollout", "__version__"]
_API = ("train", "evaluate", "rollout", "TrainResult", "EvalResult", "Rollout")


def __getattr__(name: str):
    """`masdsl.train` and the rest of the API, imported when first asked for."""
    if name in _API:
        from masdsl import api  # lazy: the API pulls in torch, the runtime and the learner

        return getattr(api, name)
    raise AttributeError(f"module 'masdsl' has no attribute {name!r}")


def load(path):
    """Parse, check and compile a `.mas` file into a `Workflow` (raises `MasError`)."""
    from masdsl.lang import load as _load  # lazy: every `masdsl.*` import runs this file (the CLI too)

    return _load(path)


def loads(text: str, name: str = "<string>", base_dir=None):
    """Like `load`, from text; `name` is the file name shown in errors."""
    from masdsl.lang import loads as _loads  # lazy: every `masdsl.*` import runs this file (the CLI too)

    return _loads(text, name=name, base_dir=base_dir)


if _os.environ.get("MASDSL_QUIET_ENGINE") == "1":  # pragma: no cover - runs in vLLM's engine processes
    # vLLM spawns its engine processes while masdsl builds an engine (quiet: vllm/environment.py);
    # a spawned process re-imports the main script, hence masdsl, before vLLM: the one chance to
    # hide what vLLM logs at import there
    from masdsl.runtime.backends.vllm.logs import quiet_engine_process

    quiet_engine_process()
