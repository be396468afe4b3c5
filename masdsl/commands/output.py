"""How the CLI writes for a person: colour and quiet, decided in this one place.

`masdsl.cli.main` calls `configure(color, quiet)` once per command line, from the global flags:

- `--color=auto|always|never` (default `auto`): `auto` colours a stream only when it is a
  terminal and `NO_COLOR` is unset or empty (https://no-color.org: any non-empty value turns
  colour off); `always` colours even into a pipe (and wins over `NO_COLOR`); `never` never does.
- `-q`/`--quiet`: only warnings, errors and the final results; no progress bars, no
  "loading models ..." lines.
- `-v`/`--verbose` (`libraries(verbose)`): other libraries' logs as they come. Without it
  their INFO lines and loading bars are hidden (`LIBRARY_ENV`).

A console on a file or pipe (a log) is `WIDE`: rich wraps nothing there, so a long line or the
`mlflow ui ...` command in a table stays one line; the training progress then prints plain
lines instead of a bar (`masdsl.training.display.Progress`).

Every command asks here: `use_color(stream)` for plain text (diagnostics), `console()` for a
rich console (tables, progress bars), `quiet()` before it prints progress.

>>> configure("never"); use_color(), console().no_color
(False, True)
>>> configure("always"); use_color(), console().is_terminal
(True, True)
>>> configure(); quiet()
False
>>> import io; console(stream=io.StringIO()).width == WIDE
True
>>> quiet_err = console(warnings_only=True)
>>> with quiet_err.capture() as got:
...     quiet_err.print("step 1/3 ..."); quiet_err.print("warning: 40 % cut")
>>> got.get()
'warning: 40 % cut\\n'
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, TextIO

from masdsl.runtime import heartbeat

COLOR_MODES = ("auto", "always", "never")
_STATE: dict[str, Any] = {"color": "auto", "quiet": False}
WIDE = 100_000  # a console's width on a file or pipe: no wrapping (tables are as wide as their content)
# Set for the command and the processes it starts (Ray workers, vLLM's engine processes) unless
# -v; a value the user set wins. Read by the libraries at import: the loading bars of
# transformers / huggingface_hub ("Loading weights", "Writing model shards"), transformers'
# logger, MLflow's INFO lines ("Started monitoring system metrics", "Creating initial MLflow
# database tables"), Ray's ("Started a local Ray instance").
LIBRARY_ENV = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error",
               "MLFLOW_LOGGING_LEVEL": "WARNING", "RAY_LOGGER_LEVEL": "warning"}


def configure(color: str = "auto", quiet: bool = False) -> None:
    """Set the colour mode (one of COLOR_MODES) and quiet for the rest of the process."""
    if color not in COLOR_MODES:
        raise ValueError(f"color must be one of {COLOR_MODES}; got {color!r}")
    _STATE.update(color=color, quiet=bool(quiet))
    heartbeat.set_quiet(quiet)


def libraries(verbose: bool = False) -> dict[str, str]:
    """Hide other libraries' INFO lines and loading bars unless `verbose`: `LIBRARY_ENV` for
    what is imported from now on (here and in child processes), the same settings for what this
    process imported already. Returns the variables set.

    >>> import os; saved = {k: os.environ.pop(k, None) for k in LIBRARY_ENV}
    >>> os.environ["MLFLOW_LOGGING_LEVEL"] = "DEBUG"   # the user's own choice wins
    >>> sorted(libraries()), os.environ["MLFLOW_LOGGING_LEVEL"], libraries(verbose=True)
    (['HF_HUB_DISABLE_PROGRESS_BARS', 'RAY_LOGGER_LEVEL', 'TRANSFORMERS_VERBOSITY'], 'DEBUG', {})
    >>> for k, v in saved.items(): _ = os.environ.pop(k) if v is None else os.environ.update({k: v})
    """
    if verbose:
        return {}
    applied = {k: v for k, v in LIBRARY_ENV.items() if k not in os.environ}
    os.environ.update(applied)
    # a library imported already (in-process use, tests) read its variable then: tell it now
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging  # imported already: free

        if "TRANSFORMERS_VERBOSITY" in applied:
            hf_logging.set_verbosity_error()
        if "HF_HUB_DISABLE_PROGRESS_BARS" in applied:
            hf_logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules and "HF_HUB_DISABLE_PROGRESS_BARS" in applied:
        from huggingface_hub.utils import disable_progress_bars  # imported already: free

        disable_progress_bars()
    for module, key in (("mlflow", "MLFLOW_LOGGING_LEVEL"), ("ray", "RAY_LOGGER_LEVEL")):
        if module in sys.modules and key in applied:
            logging.getLogger(module).setLevel(logging.WARNING)
    return applied


def color_mode() -> str:
    return _STATE["color"]


def quiet() -> bool:
    """`-q`/`--quiet`: print no progress, only warnings, errors and results."""
    return _STATE["quiet"]


def no_color_env() -> bool:
    """`NO_COLOR` is set to a non-empty value."""
    return os.environ.get("NO_COLOR", "") != ""


def use_color(stream: TextIO | None = None) -> bool:
    """Whether to colour text written to `stream` (default stderr)."""
    mode = _STATE["color"]
    if mode != "auto":
        return mode == "always"
    stream = sys.stderr if stream is None else stream
    return is_terminal(stream) and not no_color_env()


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether `stream` (default stderr) is a terminal (not a file, a pipe or a closed stream)."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or fake stream
        return False


def console(stderr: bool = True, warnings_only: bool = False, stream: TextIO | None = None) -> Any:
    """A rich Console for stderr (progress, tables about the run) or stdout (results); `stream`
    instead of either (tests). On a file or pipe it is `WIDE`: nothing wraps.

    `warnings_only`: for code that reports through a console (the trainer's progress bar, its
    log lines, its final table) under `--quiet`: only lines that begin with `warning`/`error`,
    tables and rich `Text` (results printed with it: the dashboard command) get through; no
    progress bar is drawn."""
    from rich.console import Console  # start-up: rich only for the commands that print with it

    target = stream if stream is not None else sys.stderr if stderr else sys.stdout
    color = use_color(target)
    mode = _STATE["color"]
    kind = _warnings_only(Console) if warnings_only else Console
    where = {"file": stream} if stream is not None else {"stderr": stderr}  # rich finds sys.stderr when it writes
    return kind(**where, no_color=not color, color_system="auto" if color else None,
                force_terminal=False if warnings_only else True if mode == "always" else None, highlight=color,
                width=None if is_terminal(target) else WIDE)


def _warnings_only(base: type) -> type:
    from rich.table import Table  # start-up: as above
    from rich.text import Text  # start-up: as above

    def kept(obj: Any) -> bool:
        return isinstance(obj, (Table, Text)) or isinstance(obj, str) and obj.lstrip().lower().startswith(("warning", "error"))

    class WarningsOnly(base):  # type: ignore[misc, valid-type]
        """A console that drops everything but warnings, errors, tables and `Text` (progress, status lines)."""

        def print(self, *objects: Any, **kwargs: Any) -> None:
            if objects and all(kept(o) for o in objects):
                super().print(*objects, **kwargs)

    return WarningsOnly
