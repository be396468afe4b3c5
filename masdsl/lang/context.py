"""What the checker's rules share: `Ctx` (the module, the registry, facts gathered so far, the
diagnostics) and small helpers. The rules live in `check.py`, `check_exprs.py`, `check_flow.py`.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from masdsl.errors import suggest
from masdsl.lang import ast as A
from masdsl.lang.errors import Diagnostic
from masdsl.lang.source import Span

NUMBER, BOOL, STR, LIST, ANY = "number", "bool", "str", "list", "any"


@dataclass
class Ctx:
    """What the rules share: the module, the registry, and facts gathered so far."""

    module: A.Module
    text: str
    base_dir: Path | None
    registry: Any
    diags: list[Diagnostic] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # extra files shown in messages
    roles: dict[str, A.RoleDecl] = field(default_factory=dict)
    role_fields: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> field -> type
    task_fields: set[str] | None = None  # None: unknown, anything goes
    env_name: str | None = None
    env_fields: set[str] | None = None
    # the env an `env http(...)` server serves, whose bound functions may be called: "*" unknown
    served_env: str | None = None
    flow_ok: bool = True
    failed_imports: list[Diagnostic] = field(default_factory=list)  # the error of each import that failed
    unchecked: dict[str, str] = field(default_factory=dict)  # name -> kind, not reported because of them

    def error(self, code: str, message: str, span: Span, **kw) -> None:
        self.diags.append(Diagnostic(code, message, span, **kw))

    def warn(self, code: str, message: str, span: Span, **kw) -> None:
        self.diags.append(Diagnostic(code, message, span, severity="warning", **kw))

    def unknown_excused(self, name: str, kind: str) -> bool:
        """Whether an unknown `name` goes unreported: an `import` failed, and the file may have
        registered it (its own error says so; one cause, one diagnostic)."""
        if self.failed_imports:
            self.unchecked.setdefault(name, kind)
        return bool(self.failed_imports)

    def resolve(self, rel: str) -> Path:
        p = Path(rel)
        return p if p.is_absolute() or self.base_dir is None else self.base_dir / p


def file_beside(written: str, path: Path) -> str | None:
    """`did you mean ...?` for a missing file `path` (written `written` in the `.mas` file): a file
    in its folder whose name differs only in case, else one with the same name before the first
    dot (`x.json` for `x.jsonl`), else the closest spelling; None when the folder has none.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "X.jsonl").write_text("{}"), (folder / "y.json").write_text("{}")
    >>> file_beside("data/x.jsonl", folder / "x.jsonl"), file_beside("y.jsonl", folder / "y.jsonl")
    ('did you mean `data/X.jsonl`?', 'did you mean `y.json`?')
    >>> file_beside("zzz.txt", folder / "zzz.txt") is None
    True
    """
    try:
        names = sorted(p.name for p in itertools.islice(path.parent.iterdir(), 5000) if p.is_file())  # `check` stays fast
    except OSError:  # no such folder: nothing beside it
        return None
    stem = path.name.split(".")[0].lower()
    near = (next((n for n in names if n.lower() == path.name.lower()), None)
            or next((n for n in names if stem and n.split(".")[0].lower() == stem), None)
            or suggest(path.name, names))
    return f"did you mean `{Path(written).with_name(near).as_posix()}`?" if near else None


def ticks(names: Iterable[str]) -> str:
    return ", ".join(f"`{n}`" for n in sorted(names)) or "none"


def bind(fn, args: int, kwargs: list[str], skip: int = 0) -> str | None:
    """None if `fn` accepts `args` positional values and these keyword names, else why not.
    Cached: a large workflow calls the same few functions a thousand times."""
    try:
        return _bind_cached(fn, args, tuple(kwargs), skip)
    except TypeError:  # an unhashable callable
        return _bind(fn, args, kwargs, skip)


@functools.lru_cache(maxsize=4096)
def _bind_cached(fn, args: int, kwargs: tuple[str, ...], skip: int) -> str | None:
    return _bind(fn, args, list(kwargs), skip)


def _bind(fn, args: int, kwargs: list[str], skip: int) -> str | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())[skip:]
    try:
        sig.replace(parameters=params).bind(*range(args), **{k: 0 for k in kwargs})
    except TypeError as exc:
        return str(exc)
    return None


def expect(c: Ctx, node: A.Expr, t: str, allowed: set[str], what: str) -> None:
    if t not in allowed | {"any"}:
        c.error("type-mismatch", f"{what} is a {t}, not a {' or '.join(sorted(allowed))}", node.span,
                label=f"this is a {t}")
