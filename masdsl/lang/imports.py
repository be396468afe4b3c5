"""`import "x.py"`: load a user's Python file so its decorators add to the registry.

A file is imported once per process (keyed by its resolved path). A file that raises becomes an
`ImportFileError` carrying the user's own traceback lines, never ours.

While a file runs, every name it puts in `REGISTRY` is recorded as a `Registration` (which
table, the line of its decorator, what the name held before), so the checker can tell two
files apart that register the same name, and a file that replaces a built-in. Importing a
file again (another workflow of the process) puts its names back: a workflow always sees the
names of the files it imports, whatever another workflow imported in between.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "bad.py").write_text("x = 1\\nraise ValueError('boom')\\n")
>>> try:
...     import_file(d / "bad.py")
... except ImportFileError as e:
...     print(e.line, e.summary)
2 ValueError: boom
>>> _ = (d / "ok.py").write_text(
...     "from masdsl.envs.registry import function\\n\\n@function('demo_twice')\\ndef twice(x):\\n    return 2 * x\\n")
>>> _ = import_file(d / "ok.py")
>>> [(r.kind, r.name, r.line) for r in registrations(d / "ok.py")]
[('function', 'demo_twice', 3)]
>>> _ = REGISTRY.functions.pop("demo_twice")
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

from masdsl.envs.registry import REGISTRY
from masdsl.errors import UserError

_LOADED: dict[str, ModuleType] = {}
TABLES = ("envs", "data_sources", "functions")  # the tables of `Registry` a file can add to
USER_PREFIX = "masdsl_user_"  # module names of imported files start with it


@dataclass(frozen=True)
class Registration:
    """One name a user file put in the registry while it was imported."""

    table: str  # one of TABLES
    name: str
    spec: Any  # the EnvSpec / DataSourceSpec / FunctionSpec it registered
    path: str  # the file (resolved)
    line: int | None  # its decorator's line (None: registered from another module)
    replaced: Any = None  # what the table held under `name` before (None: a new name)

    @property
    def kind(self) -> str:
        if self.table == "functions":
            return getattr(self.spec, "kind", "function")
        return {"envs": "environment", "data_sources": "data source"}[self.table]


_REGISTERED: dict[str, tuple[Registration, ...]] = {}


class ImportFileError(UserError):
    """A user's Python file failed to import; `details` holds its traceback (its frames only)."""

    def __init__(self, path: str, summary: str, details: str = "", line: int | None = None):
        self.path, self.summary, self.details, self.line = path, summary, details, line
        super().__init__(f"{path}: {summary}")

    def __reduce__(self):
        return (ImportFileError, (self.path, self.summary, self.details, self.line))


class _Recorder(dict):
    """A registry table while a user file runs: every `table[name] = spec` is recorded."""

    def __init__(self, table: str, data: dict, path: str, out: list[Registration]):
        super().__init__(data)
        self.table, self.path, self.out = table, path, out

    def __setitem__(self, name: str, spec: Any) -> None:
        frame, line = sys._getframe(1), None
        while frame is not None:
            if frame.f_code.co_filename == self.path:
                line = frame.f_lineno
                break
            frame = frame.f_back
        self.out.append(Registration(self.table, name, spec, self.path, line, self.get(name)))
        super().__setitem__(name, spec)


@contextlib.contextmanager
def _recording(path: str, out: list[Registration]) -> Iterator[None]:
    originals = {t: getattr(REGISTRY, t) for t in TABLES}
    for t, table in originals.items():
        setattr(REGISTRY, t, _Recorder(t, table, path, out))
    try:
        yield
    finally:
        for t, table in originals.items():  # the same dict objects, holding what the file left
            recorded = getattr(REGISTRY, t)
            table.clear()
            table.update(recorded)
            setattr(REGISTRY, t, table)


@contextlib.contextmanager
def _beside(folder: Path) -> Iterator[None]:
    """While a file runs, the modules beside it import (`import helper` of a `helper.py` next to
    it), as for a script; appended, so a file named like a standard module shadows nothing. A run
    folder keeps such modules with the file (`masdsl.runtime.run_files`), so its copy finds them."""
    entry = str(folder)
    added = entry not in sys.path
    if added:
        sys.path.append(entry)
    try:
        yield
    finally:
        if added and entry in sys.path:
            sys.path.remove(entry)


def registrations(path: str | Path) -> tuple[Registration, ...]:
    """What an imported file registered, in order (empty for a file not imported)."""
    return _REGISTERED.get(str(Path(path).resolve()), ())


def is_user_spec(spec: Any) -> bool:
    """Whether a registry entry comes from an imported file."""
    obj = getattr(spec, "fn", None) or getattr(spec, "factory", None)
    return str(getattr(obj, "__module__", "") or "").startswith(USER_PREFIX)


def _is_builtin(spec: Any) -> bool:
    obj = getattr(spec, "fn", None) or getattr(spec, "factory", None)
    module = str(getattr(obj, "__module__", "") or "")
    return module == "masdsl" or module.startswith("masdsl.")


def shadowed_builtin(reg: Registration) -> Any:
    """The built-in spec `reg` replaces (looking through other files that replaced it first), or None."""
    by_spec = {id(r.spec): r for regs in _REGISTERED.values() for r in regs}
    spec, seen = reg.replaced, set()
    while spec is not None and not _is_builtin(spec) and id(spec) in by_spec and id(spec) not in seen:
        seen.add(id(spec))
        spec = by_spec[id(spec)].replaced
    return spec if spec is not None and _is_builtin(spec) else None


def restore_builtins() -> None:
    """Put back every built-in an imported file replaced (the workflow's own imports then apply
    their names again): a workflow that does not import the file gets the built-in."""
    for regs in _REGISTERED.values():
        for r in regs:
            table = getattr(REGISTRY, r.table)
            builtin = shadowed_builtin(r)
            if builtin is not None and is_user_spec(table.get(r.name)):
                table[r.name] = builtin


def import_file(path: str | Path) -> ModuleType:
    """Import a Python file by path (once per process); raise `ImportFileError` if it fails.
    A file imported before puts its registrations back in the registry."""
    resolved = str(Path(path).resolve())
    if resolved in _LOADED:
        for r in _REGISTERED.get(resolved, ()):
            getattr(REGISTRY, r.table)[r.name] = r.spec
        return _LOADED[resolved]
    if not Path(resolved).is_file():
        raise ImportFileError(str(path), "file not found")
    name = USER_PREFIX + Path(resolved).stem + "_" + hashlib.sha1(resolved.encode()).hexdigest()[:8]
    spec = importlib.util.spec_from_file_location(name, resolved)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    out: list[Registration] = []
    try:
        with _recording(resolved, out), _beside(Path(resolved).parent):
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
    _REGISTERED[resolved] = tuple(out)
    return module
