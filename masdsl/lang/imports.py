"""`import "x.py"`: load a user's Python file so its decorators add to the registry.

A file is imported once per process (keyed by its resolved path). A file that raises becomes an
`ImportFileError` carrying the user's own traceback lines, never ours.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "bad.py").write_text("x = 1\\nraise ValueError('boom')\\n")
>>> try:
...     import_file(d / "bad.py")
... except ImportFileError as e:
...     print(e.line, e.summary)
2 ValueError: boom
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType

from masdsl.errors import UserError

_LOADED: dict[str, ModuleType] = {}


class ImportFileError(UserError):
    """A user's Python file failed to import; `details` holds its traceback (its frames only)."""

    def __init__(self, path: str, summary: str, details: str = "", line: int | None = None):
        self.path, self.summary, self.details, self.line = path, summary, details, line
        super().__init__(f"{path}: {summary}")

    def __reduce__(self):
        return (ImportFileError, (self.path, self.summary, self.details, self.line))


def import_file(path: str | Path) -> ModuleType:
    """Import a Python file by path (once per process); raise `ImportFileError` if it fails."""
    resolved = str(Path(path).resolve())
    if resolved in _LOADED:
        return _LOADED[resolved]
    if not Path(resolved).is_file():
        raise ImportFileError(str(path), "file not found")
    name = "masdsl_user_" + Path(resolved).stem + "_" + hashlib.sha1(resolved.encode()).hexdigest()[:8]
    spec = importlib.util.spec_from_file_location(name, resolved)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - anything the user's code raises is reported
        sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == resolved]
        line = getattr(exc, "lineno", None) if isinstance(exc, SyntaxError) else (frames[-1].lineno if frames else None)
        details = "".join(f"  {path}, line {f.lineno}: {(f.line or '').strip()}\n" for f in frames)
        summary = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]
        raise ImportFileError(str(path), summary, details, line) from None
    _LOADED[resolved] = module
    return module
