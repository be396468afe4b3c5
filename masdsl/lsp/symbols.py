"""Document symbols: the workflow's statements, with roles' parse fields and the flow's edges."""

from __future__ import annotations

from lsprotocol import types as T

from masdsl.lang import ast as A
from masdsl.lsp.state import DocState

K = T.SymbolKind


def _sym(state: DocState, name: str, kind: T.SymbolKind, node, sel=None, children=None, detail=None) -> T.DocumentSymbol:
    def rng(span):
        (l0, c0), (l1, c1) = state.lines.line_col(span.start), state.lines.line_col(span.end)
        return T.Range(T.Position(l0, c0), T.Position(l1, c1))

    return T.DocumentSymbol(name=name, kind=kind, range=rng(node.span), selection_range=rng((sel or node).span),
                            detail=detail, children=children or None)


def _first_line(state: DocState, node) -> str:
    return state.text[node.span.start : node.span.end].split("\n", 1)[0].strip()


def document_symbols(state: DocState) -> list[T.DocumentSymbol]:
    m = state.module
    if m is None:
        return []
    out = []
    for w in m.workflows:
        out.append(_sym(state, w.name.name, K.Module, w, w.name, detail="workflow"))
    for e in m.envs:
        out.append(_sym(state, e.name.name, K.Namespace, e, e.name, detail="env"))
    for d in m.data:
        out.append(_sym(state, f"data {d.split.name}", K.File, d, d.split, detail=_first_line(state, d)))
    for p in m.policies:
        out.append(_sym(state, p.name.name, K.Class, p, p.name, detail="policy"))
    for r in m.roles:
        fields = [_sym(state, x.name.name, K.Field, x, x.name, detail="parse") for x in r.of(A.RoleParse)]
        pol = next((x.name.name for x in r.of(A.RolePolicy)), None)
        out.append(_sym(state, r.name.name, K.Object, r, r.name, fields, detail=f"role, policy {pol}"))
    for f in m.flows:
        edges = [_sym(state, _first_line(state, e), K.Event, e) for e in f.edges]
        out.append(_sym(state, "flow", K.Struct, f, children=edges))
    for s in m.teams + m.alphas + m.successes:
        out.append(_sym(state, s.kind, K.Property, s, detail=_first_line(state, s)))
    for t in m.trains:
        out.append(_sym(state, "train", K.Struct, t))
    out.sort(key=lambda s: (s.range.start.line, s.range.start.character))
    return out
