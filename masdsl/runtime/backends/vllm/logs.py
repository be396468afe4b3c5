"""The one log filter masdsl installs in vLLM: expected warnings of the in-place weight reload.

vLLM's reload logs "<Module>: Failed to load weights" for every module that received no weight
under its own name. Two kinds are expected after each `update_weights`, and printed on every
update they would mislead:

- LM heads tied to an embedding (a tied head gets no weight of its own; the worker re-processes
  it itself, see `weights.refresh_tied_heads`);
- modules with buffers but no parameters (rotary embeddings' cos/sin cache, derived from the
  config and never trained; vLLM keeps the old copy).

`expected_reload_warnings` installs the filter on vLLM's reload logger for the duration of one
reload and removes it after: it runs inside vLLM's worker process (`WeightSyncExtension`), and no
other logger or message is touched. vLLM's own log level is set through its environment
(`environment.py`).

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
from typing import Any, Iterable, Iterator

RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"  # vLLM's in-place reload
_FAILED = "%s: Failed to load weights"


class ExpectedReloadWarnings(logging.Filter):
    """Drops "<name>: Failed to load weights" for the module class names in `names`."""

    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.names = names

    def filter(self, record: logging.LogRecord) -> bool:
        failed = record.msg == _FAILED
        return not (failed and record.args and record.args[0] in self.names)


def quiet_module_names(heads: Iterable[Any], model: Any = None) -> set[str]:
    """Class names whose reload warning is expected: the given tied `heads`, and the modules of
    `model` with buffers but no parameters."""
    names = {type(h).__name__ for h in heads}
    for module in model.modules() if model is not None else ():
        if next(module.parameters(recurse=False), None) is None and next(module.buffers(recurse=False), None) is not None:
            names.add(type(module).__name__)
    return names


@contextlib.contextmanager
def expected_reload_warnings(names: set[str]) -> Iterator[None]:
    """For the block, hide the reload's "Failed to load weights" of the module classes `names`."""
    if not names:
        yield
        return
    logger = logging.getLogger(RELOAD_LOGGER)
    quiet = ExpectedReloadWarnings(names)
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)
