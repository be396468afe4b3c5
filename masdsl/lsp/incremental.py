"""Incremental parsing for the language server: reparse only the statements an edit touched.

A `.mas` file is a sequence of top-level statements (`_stmt*` in `masdsl/lang/mas.lark`), so
the parse of the file is the parse of its statements side by side. `IncrementalParser.update`
finds the edited region by comparing the old and new text, reparses the statements it touches
(plus one neighbour on each side, so a statement split or joined by the edit is seen whole),
moves the spans of the statements after it, and keeps the others as they were. The result is
the same `Module` `masdsl.lang.parse.parse_text` builds from the whole text (a test holds it
to that on random edits); a region that fails to parse gives syntax diagnostics for that region.

>>> p = IncrementalParser("w.mas")
>>> m, diags = p.update('role a { policy p }\\nrole b { policy p }\\n')
>>> [r.name.name for r in m.roles], p.last_reparsed
(['a', 'b'], 2)
>>> m, diags = p.update('role a { policy p }\\nrole bee { policy p }\\nrole c { policy p }\\n')
>>> [(r.name.name, r.name.span.line) for r in m.roles], p.last_reparsed
([('a', 1), ('bee', 2), ('c', 3)], 3)
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left, bisect_right

from masdsl.lang import ast as A
from masdsl.lang.errors import Diagnostic
from masdsl.lang.parse import parse_text
from masdsl.lang.workflow import Span

_GROUPS = tuple(f.name for f in dataclasses.fields(A.Module) if f.name not in ("file", "span"))
_FIELDS: dict[type, tuple[str, ...]] = {}


def common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix (binary search over slice compares, done in C)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def common_suffix(a: str, b: str, limit: int) -> int:
    """Length of the longest common suffix, at most `limit`."""
    lo, hi = 0, min(limit, len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid : len(a) - lo] == b[len(b) - mid : len(b) - lo]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _shift_span(s: Span, dline: int, dcol: int, doff: int) -> Span:
    """Move a span parsed from a region starting at line 1, column 1 to where the region is."""
    col = s.col + dcol if s.line == 1 else s.col
    end_col = s.end_col + dcol if s.end_line == 1 else s.end_col
    return Span(s.file, s.line + dline, col, s.end_line + dline, end_col, s.start + doff, s.end + doff)


def _move(s: Span, dline: int, doff: int) -> Span:
    return Span(s.file, s.line + dline, s.col, s.end_line + dline, s.end_col, s.start + doff, s.end + doff)


def shift(node, fn):
    """A copy of an AST node (or tuple of them) with `fn` applied to every `Span` in it."""
    if isinstance(node, Span):
        return fn(node)
    if isinstance(node, tuple):
        return tuple(shift(n, fn) for n in node)
    cls = type(node)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else ()
    if not names:
        return node
    return cls(**{n: shift(getattr(node, n), fn) for n in names})


def statements(module: A.Module) -> list:
    """The module's top-level statements in file order."""
    out = [s for g in _GROUPS for s in getattr(module, g)]
    out.sort(key=lambda s: s.span.start)
    return out


def build_module(path: str, stmts: list, text: str) -> A.Module:
    """A `Module` holding `stmts` grouped the way `parse_text` groups them."""
    groups: dict[str, list] = {g: [] for g in _GROUPS}
    probe = A.Module(path)
    for s in stmts:
        groups[_group_of(s, probe)].append(s)
    lines = text.count("\n")
    last = len(text) - (text.rfind("\n") + 1)
    span = Span(path, 1, 1, lines + 1, last + 1, 0, len(text))
    return A.Module(path, **{g: tuple(v) for g, v in groups.items()}, span=span)


_KIND = {A.WorkflowDecl: "workflows", A.EnvDecl: "envs", A.DataDecl: "data", A.PolicyDecl: "policies",
         A.RoleDecl: "roles", A.FlowDecl: "flows", A.TrainDecl: "trains", A.ImportDecl: "imports"}


def _group_of(stmt, _probe) -> str:
    return _KIND.get(type(stmt)) or {"team": "teams", "alpha": "alphas", "success": "successes"}[stmt.kind]


class IncrementalParser:
    """The statements of one document, kept between edits. `update(text)` -> (Module | None, syntax diags)."""

    def __init__(self, path: str):
        self.path = path
        self.text: str | None = None
        self.stmts: list = []  # of the last text that parsed, or the good part of a broken one
        self.broken: list[tuple[int, int]] = []  # old-text regions that did not parse
        self.syntax: list[Diagnostic] = []
        self.last_reparsed = 0  # statements parsed again by the last update (tests, benchmark)

    def update(self, text: str) -> tuple[A.Module | None, list[Diagnostic]]:
        if self.text is None:
            return self._full(text)
        old, n = self.text, len(self.stmts)
        p = common_prefix(old, text)
        s = common_suffix(old, text, min(len(old), len(text)) - p)
        delta = len(text) - len(old)
        a, b = p, len(old) - s  # the dirty area, in old offsets (a is the same in new ones)
        for b0, b1 in self.broken:  # a region that did not parse stays dirty until it does
            a, b = min(a, b0), max(b, b1)
        starts = [st.span.start for st in self.stmts]
        first = bisect_left([st.span.end for st in self.stmts], a)  # first statement ending at/after a
        k = bisect_right(starts, b)  # first statement starting after b
        while k < n and "\n" not in text[b + delta : starts[k] + delta]:
            k += 1  # it starts on the edited line: its columns moved, so it is dirty too
        lo, hi = max(0, first - 1), min(k + 1, n)  # one clean neighbour each side
        r0 = starts[lo] if first > 0 else 0
        r1_old = starts[hi] if hi < n else len(old)
        r1 = r1_old + delta
        region, diags = self._parse_region(text, r0, r1)
        dline = text.count("\n", 0, r1) - old.count("\n", 0, r1_old)
        moved = (lambda sp: _move(sp, dline, delta))
        self.text = text
        if region is None:  # keep what is known good; only the dirty area stays broken
            kept_after = [shift(st, moved) for st in self.stmts[k:]] if (dline or delta) else self.stmts[k:]
            self.stmts = self.stmts[:first] + kept_after
            self.broken, self.syntax, self.last_reparsed = [(a, b + delta)], diags, 0
            return None, diags
        after = [shift(st, moved) for st in self.stmts[hi:]] if (dline or delta) else self.stmts[hi:]
        self.stmts = self.stmts[:lo] + region + after
        self.broken, self.syntax, self.last_reparsed = [], [], len(region)
        return build_module(self.path, self.stmts, text), []

    def _parse_region(self, text: str, r0: int, r1: int) -> tuple[list | None, list[Diagnostic]]:
        chunk = text[r0:r1]
        module, diags = parse_text(chunk, self.path)
        line0 = text.count("\n", 0, r0)
        col0 = r0 - (text.rfind("\n", 0, r0) + 1)

        def fn(sp: Span) -> Span:
            return _shift_span(sp, line0, col0, r0)

        if module is None:
            return None, [shift(d, fn) for d in diags]
        return [shift(st, fn) for st in statements(module)], []

    def _full(self, text: str) -> tuple[A.Module | None, list[Diagnostic]]:
        module, diags = parse_text(text, self.path)
        self.text = text
        if module is None:
            self.stmts, self.broken, self.syntax = [], [(0, len(text))], diags
            self.last_reparsed = 0
            return None, diags
        self.stmts, self.broken, self.syntax = statements(module), [], []
        self.last_reparsed = len(self.stmts)
        return module, []
