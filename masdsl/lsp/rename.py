"""Rename a role or a policy: its declaration and every use (flow edges, expressions,
`ROLE.field`, `{{ ROLE.field }}` in prompts, `policy NAME` lines)."""

from __future__ import annotations

import re

from lsprotocol import types as T

from masdsl.lang.check_roles import RESERVED
from masdsl.lsp.index import Index
from masdsl.lsp.state import DocState

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class RenameError(ValueError):
    """The position holds nothing renamable, or the new name is not allowed."""


def _range(state: DocState, start: int, end: int) -> T.Range:
    (l0, c0), (l1, c1) = state.lines.line_col(start), state.lines.line_col(end)
    return T.Range(T.Position(l0, c0), T.Position(l1, c1))


def prepare(state: DocState, index: Index, offset: int) -> T.Range | None:
    o = index.at(offset)
    if o is None or o.kind not in ("role", "policy"):
        return None
    return _range(state, o.start, o.end)


def rename(state: DocState, index: Index, offset: int, new_name: str, uri: str) -> T.WorkspaceEdit:
    o = index.at(offset)
    if o is None or o.kind not in ("role", "policy"):
        raise RenameError("only a role or a policy can be renamed")
    if not IDENT.match(new_name) or (o.kind == "role" and new_name in RESERVED):
        raise RenameError(f"`{new_name}` is not a valid {o.kind} name")
    taken = state.roles() if o.kind == "role" else state.policies()
    if new_name in taken and new_name != o.name:
        raise RenameError(f"a {o.kind} named `{new_name}` already exists")
    edits = [T.TextEdit(_range(state, u.start, u.end), new_name) for u in index.uses(o.kind, o.name)]
    return T.WorkspaceEdit(changes={uri: edits})
