"""Go to definition: a role, policy or parse field to its declaration; a registered function,
parser, data source or env to its Python source (built in or imported with `import "x.py"`)."""

from __future__ import annotations

import inspect

from lsprotocol import types as T
from pygls.uris import from_fs_path

from masdsl.lsp.index import Index
from masdsl.lsp.state import DocState


def python_location(obj) -> T.Location | None:
    """Where a Python function or class is defined."""
    obj = inspect.unwrap(obj)
    try:
        path = inspect.getsourcefile(obj)
        _, line = inspect.getsourcelines(obj)
    except (OSError, TypeError):
        return None
    if path is None:
        return None
    line = max(0, line - 1)
    return T.Location(from_fs_path(path), T.Range(T.Position(line, 0), T.Position(line, 0)))


def definition(state: DocState, index: Index, offset: int, uri: str) -> T.Location | None:
    o = index.at(offset)
    if o is None:
        return None
    if o.kind in ("role", "policy", "field"):
        d = index.decl(o.kind, o.name, o.owner if o.kind == "field" else None)
        if d is None:
            return None
        (l0, c0), (l1, c1) = state.lines.line_col(d.start), state.lines.line_col(d.end)
        return T.Location(uri, T.Range(T.Position(l0, c0), T.Position(l1, c1)))
    reg = state.registry
    table = {"function": reg.functions, "data-source": reg.data_sources, "env": reg.envs}.get(o.kind)
    spec = table.get(o.name) if table is not None else None
    if spec is None:
        return None
    return python_location(getattr(spec, "fn", None) or spec.factory)
