"""What masdsl hides of vLLM's logs: expected warnings of the in-place weight reload, and
(unless `masdsl --verbose`) the start-up notices of this process (`quiet_startup`).

vLLM's reload logs "<Module>: Failed to load weights" for every module that received no weight
under its own name. Two kinds are expected after each `update_weights`, and printed on every
update they would mislead:

- LM heads tied to an embedding (a tied head gets no weight of its own; the worker re-processes
  it itself, see `weights.refresh_tied_heads`);
- modules with buffers but no parameters (rotary embeddings' cos/sin cache, derived from the
  config and never trained; vLLM keeps the old copy).

A push of only the modules that changed (a merged LoRA adapter: `lora_merge.merged_state(...,
changed_only=True)`) leaves every other module unloaded by design: vLLM keeps their weights as
they were, says "Failed to load weights" for each and lists their names in one more warning
("Following weights were not loaded from checkpoint"); `expected_reload_warnings(partial=True)`
hides those too.

`expected_reload_warnings` installs the filter on vLLM's reload logger for the duration of one
reload and removes it after: it runs inside vLLM's worker process (`WeightSyncExtension`), and no
other logger or message is touched. vLLM's own log level is set through its environment
(`environment.py`), which also wraps an engine's construction in `quiet_startup`: the Triton
notice vLLM logs at import (before its logging is configured, so no level applies) and the
FutureWarnings of torch deprecations vLLM hits, in this process and only for that block.

>>> import logging
>>> record = logging.LogRecord(RELOAD_LOGGER, logging.WARNING, "", 0, "%s: Failed to load weights", ("Head",), None)
>>> logger = logging.getLogger(RELOAD_LOGGER)
>>> with expected_reload_warnings({"Head"}):
...     logger.filter(record)
False
>>> bool(logger.filter(record)), logger.filters
(True, [])
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Any, Iterable, Iterator

RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"  # vLLM's in-place reload
INPLACE_LOGGER = "vllm.model_executor.model_loader.reload.inplace"  # its list of names not loaded
_NOT_LOADED = "Following weights were not loaded from checkpoint: %s"
# loggers that speak at `import vllm`, before vLLM configures its logging ("Triton is installed,
# but doesn't include CPU backend")
STARTUP_LOGGERS = ("vllm.triton_utils.importing",)
_FAILED = "%s: Failed to load weights"


class ExpectedReloadWarnings(logging.Filter):
    """Drops "<name>: Failed to load weights" for the module class names in `names` (None: every
    module class, and the list of names not loaded: a partial push)."""

    def __init__(self, names: set[str] | None) -> None:
        super().__init__()
        self.names = names

    def filter(self, record: logging.LogRecord) -> bool:
        if self.names is None and record.msg == _NOT_LOADED:
            return False
        failed = record.msg == _FAILED
        return not (failed and isinstance(record.args, tuple) and record.args
                    and (self.names is None or record.args[0] in self.names))


def quiet_module_names(heads: Iterable[Any], model: Any = None) -> set[str]:
    """Class names whose reload warning is expected: the given tied `heads`, and the modules of
    `model` with buffers but no parameters."""
    names = {type(h).__name__ for h in heads}
    for module in model.modules() if model is not None else ():
        if next(module.parameters(recurse=False), None) is None and next(module.buffers(recurse=False), None) is not None:
            names.add(type(module).__name__)
    return names


@contextlib.contextmanager
def expected_reload_warnings(names: set[str], partial: bool = False) -> Iterator[None]:
    """For the block, hide the reload's "Failed to load weights" of the module classes `names`;
    `partial` (a push of some modules only): of every module, and the list of names not loaded.

    >>> record = logging.LogRecord(INPLACE_LOGGER, logging.WARNING, "", 0, _NOT_LOADED, ({"x.weight"},), None)
    >>> with expected_reload_warnings(set(), partial=True):
    ...     logging.getLogger(INPLACE_LOGGER).filter(record)
    False
    >>> bool(logging.getLogger(INPLACE_LOGGER).filter(record))
    True
    """
    if not names and not partial:
        yield
        return
    quiet = ExpectedReloadWarnings(None if partial else names)
    loggers = [logging.getLogger(RELOAD_LOGGER)] + ([logging.getLogger(INPLACE_LOGGER)] if partial else [])
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)


def quiet_engine_process() -> None:
    """In an engine process vLLM spawned while masdsl was quiet (`environment.QUIET_ENGINE_ENV`,
    read by `masdsl/__init__.py`): `STARTUP_LOGGERS` at ERROR for the process's life. vLLM logs
    the Triton notice at import, before its logging is configured, so neither `VLLM_LOGGING_LEVEL`
    nor anything vLLM does later applies to it."""
    for name in STARTUP_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


@contextlib.contextmanager
def quiet_startup(quiet: bool = True) -> Iterator[None]:
    """For the block (when `quiet`): `STARTUP_LOGGERS` at ERROR and FutureWarnings ignored.

    Each logger's own level is set and put back (its effective level also depends on the
    `vllm` parent logger, which vLLM configures at import):

    >>> logger = logging.getLogger(STARTUP_LOGGERS[0])
    >>> before = logger.level
    >>> with quiet_startup():
    ...     logging.getLevelName(logger.level)
    'ERROR'
    >>> logger.level == before
    True
    """
    if not quiet:
        yield
        return
    loggers = [logging.getLogger(name) for name in STARTUP_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
