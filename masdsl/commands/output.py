"""How the CLI writes for a person: colour and quiet, decided in this one place.

`masdsl.cli.main` calls `configure(color, quiet)` once per command line, from the global flags:

- `--color=auto|always|never` (default `auto`): `auto` colours a stream only when it is a
  terminal and `NO_COLOR` is unset or empty (https://no-color.org: any non-empty value turns
  colour off); `always` colours even into a pipe (and wins over `NO_COLOR`); `never` never does.
- `-q`/`--quiet`: only warnings, errors and the final results; no progress bars, no
  "loading models ..." lines.

Every command asks here: `use_color(stream)` for plain text (diagnostics), `console()` for a
rich console (tables, progress bars), `quiet()` before it prints progress.

>>> configure("never"); use_color(), console().no_color
(False, True)
>>> configure("always"); use_color(), console().is_terminal
(True, True)
>>> configure(); quiet()
False
>>> quiet_err = console(warnings_only=True)
>>> with quiet_err.capture() as got:
...     quiet_err.print("step 1/3 ..."); quiet_err.print("warning: 40 % cut")
>>> got.get()
'warning: 40 % cut\\n'
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

COLOR_MODES = ("auto", "always", "never")
_STATE: dict[str, Any] = {"color": "auto", "quiet": False}


def configure(color: str = "auto", quiet: bool = False) -> None:
    """Set the colour mode (one of COLOR_MODES) and quiet for the rest of the process."""
    if color not in COLOR_MODES:
        raise ValueError(f"color must be one of {COLOR_MODES}; got {color!r}")
    _STATE.update(color=color, quiet=bool(quiet))


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
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream
        tty = False
    return tty and not no_color_env()


def console(stderr: bool = True, warnings_only: bool = False) -> Any:
    """A rich Console for stderr (progress, tables about the run) or stdout (results).

    `warnings_only`: for code that reports through a console (the trainer's progress bar, its
    log lines, its final table) under `--quiet`: only lines that begin with `warning`/`error`
    and tables get through; no progress bar is drawn."""
    from rich.console import Console  # start-up: rich only for the commands that print with it

    stream = sys.stderr if stderr else sys.stdout
    color = use_color(stream)
    mode = _STATE["color"]
    kind = _warnings_only(Console) if warnings_only else Console
    return kind(stderr=stderr, no_color=not color, color_system="auto" if color else None,
                force_terminal=False if warnings_only else True if mode == "always" else None, highlight=color)


def _warnings_only(base: type) -> type:
    from rich.table import Table  # start-up: as above

    def kept(obj: Any) -> bool:
        return isinstance(obj, Table) or isinstance(obj, str) and obj.lstrip().lower().startswith(("warning", "error"))

    class WarningsOnly(base):  # type: ignore[misc, valid-type]
        """A console that drops everything but warnings, errors and tables (progress, status lines)."""

        def print(self, *objects: Any, **kwargs: Any) -> None:
            if objects and all(kept(o) for o in objects):
                super().print(*objects, **kwargs)

    return WarningsOnly
