"""Incremental parsing for the language server: reparse only the statements an edit touched.

A `.mas` file is a sequence of top-level statements (`_stmt*` in `masdsl/lang/mas.lark`), so
the parse of the file is the parse of its statements side by side. `IncrementalParser.update`
finds the edited region by comparing the old and new text, reparses the statements it touches
(plus one neighbour on each side, so a statement split or joined by the edit is seen whole)
with the fast parser, in place (its spans count from the start of the file), moves the spans
of the statements after it in place (each statement keeps the list of its `Span` objects, so a
keystroke costs a pass over those, not a copy of the syntax tree), and keeps the others as they
were. An edit among the edges of a `flow { }` (one statement, however long) reparses only the
edges it touches, with a clean one on each side, the same way. The result is the same `Module`
`masdsl.lang.parse.parse_text` builds from the whole text (tests hold it to that on random
edits); a region that fails to parse gives syntax diagnostics for that region (from lark,
which names syntax errors).

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
import re
from bisect import bisect_left, bisect_right

from masdsl.lang import ast as A
from masdsl.lang.errors import Diagnostic
from masdsl.lang.fastparse import module_of, parse_flow_items, parse_statements
from masdsl.lang.vocabulary import KEYWORDS
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


def move_in_place(groups: list[list[Span]], dline: int, doff: int) -> None:
    """Move every span of these groups `dline` lines and `doff` characters down the file, in
    place: they are the (frozen) spans of this parser's own statements, made for it alone."""
    for group in groups:
        for s in group:
            _SET_START(s, s.start + doff)
            _SET_END(s, s.end + doff)
            if dline:
                _SET_LINE(s, s.line + dline)
                _SET_END_LINE(s, s.end_line + dline)


# the slots' own setters: what a frozen dataclass's __setattr__ refuses, and faster than object.__setattr__
_SET_START, _SET_END, _SET_LINE, _SET_END_LINE = (Span.__dict__[f].__set__ for f in ("start", "end", "line", "end_line"))


def span_groups(stmt) -> list[list[Span]]:
    """A statement's spans grouped as `parse_statements` groups them (a flow: its own, then by item)."""
    if isinstance(stmt, A.FlowDecl):
        return [[stmt.span]] + [spans_in(item) for item in stmt.items]
    return [spans_in(stmt)]


def spans_in(node) -> list[Span]:
    """Every distinct `Span` object in an AST node."""
    out, seen, stack = [], set(), [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Span):
            if id(n) not in seen:
                seen.add(id(n))
                out.append(n)
        elif isinstance(n, tuple):
            stack.extend(n)
        elif n is not None:
            names = _FIELDS.get(type(n))
            if names is None:
                cls = type(n)
                names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else ()
            stack.extend(getattr(n, f) for f in names)
    return out


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


build_module = module_of  # (path, statements, text) -> Module, as `parse_text` groups them


# where a flow item the fast parser reads begins: a name that is not a keyword, or `max_turns`
_ITEM_START = re.compile(r"(?!(?:%s)\b)[A-Za-z_]" % "|".join(sorted(KEYWORDS - {"max_turns"})))


def _dirty(starts: list[int], first: int, b: int, delta: int, text: str) -> tuple[int, int, int]:
    """(lo, k, hi): statements (or flow items) `first`..`k` touch the dirty area ending at `b`
    (old offsets), or start on its last line (their columns moved); `lo`..`hi` add a clean
    neighbour on each side."""
    n = len(starts)
    k = bisect_right(starts, b)  # first one starting after b
    while k < n and "\n" not in text[b + delta : starts[k] + delta]:
        k += 1
    return max(0, first - 1), k, min(k + 1, n)


class IncrementalParser:
    """The statements of one document, kept between edits. `update(text)` -> (Module | None, syntax diags)."""

    def __init__(self, path: str):
        self.path = path
        self.text: str | None = None
        self.stmts: list = []  # of the last text that parsed, or the good part of a broken one
        self.spans: list[list[list[Span]]] = []  # each statement's Span objects, in groups (moved in place)
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
        j = bisect_right(starts, a) - 1  # an edit among the items of one flow: reparse those items
        if not self.broken and j >= 0 and isinstance(self.stmts[j], A.FlowDecl) and b < self.stmts[j].span.end:
            if self._update_flow(j, old, text, a, b):
                return build_module(self.path, self.stmts, text), []
        first = bisect_left([st.span.end for st in self.stmts], a)  # first statement ending at/after a
        lo, k, hi = _dirty(starts, first, b, delta, text)
        r0 = starts[lo] if first > 0 else 0
        r1_old = starts[hi] if hi < n else len(old)
        r1 = r1_old + delta
        region, diags = self._parse_region(text, r0, r1)
        dline = text.count("\n", 0, r1) - old.count("\n", 0, r1_old)
        self.text = text
        if region is None:  # keep what is known good; only the dirty area stays broken
            for g in self.spans[k:]:
                move_in_place(g, dline, delta)
            self.stmts, self.spans = self.stmts[:first] + self.stmts[k:], self.spans[:first] + self.spans[k:]
            self.broken, self.syntax, self.last_reparsed = [(a, b + delta)], diags, 0
            return None, diags
        for g in self.spans[hi:]:
            move_in_place(g, dline, delta)
        self.stmts = self.stmts[:lo] + [st for st, _ in region] + self.stmts[hi:]
        self.spans = self.spans[:lo] + [sp for _, sp in region] + self.spans[hi:]
        self.broken, self.syntax, self.last_reparsed = [], [], len(region)
        return build_module(self.path, self.stmts, text), []

    def _update_flow(self, j: int, old: str, text: str, a: int, b: int) -> bool:
        """Reparse only the items of flow `j` around the dirty area [a, b) (old offsets), with a
        clean item on each side; False (nothing changed) when that cannot be done."""
        flow, groups, delta = self.stmts[j], self.spans[j], len(text) - len(old)
        items, n = flow.items, len(flow.items)
        starts = [it.span.start for it in items]
        first = bisect_left([it.span.end for it in items], a)
        lo, _, hi = _dirty(starts, first, b, delta, text)
        if first == 0 or hi >= n or not _ITEM_START.match(text, starts[hi] + delta):
            return False
        r0, r1_old = starts[lo], starts[hi]
        got = parse_flow_items(text, self.path, r0, r1_old + delta)
        if got is None:
            return False
        dline = text.count("\n", 0, r1_old + delta) - old.count("\n", 0, r1_old)
        move_in_place(groups[1 + hi :], dline, delta)
        for g in self.spans[j + 1 :]:
            move_in_place(g, dline, delta)
        sp = flow.span
        span = Span(sp.file, sp.line, sp.col, sp.end_line + dline, sp.end_col, sp.start, sp.end + delta)
        self.stmts[j] = A.FlowDecl(items[:lo] + tuple(it for it, _ in got) + items[hi:], span)
        self.spans[j] = [[span]] + groups[1 : 1 + lo] + [g for _, g in got] + groups[1 + hi :]
        self.text, self.last_reparsed = text, len(got)
        return True

    def _parse_region(self, text: str, r0: int, r1: int) -> tuple[list | None, list[Diagnostic]]:
        """(statement, its spans) of `text[r0:r1]`, or None and the syntax errors there."""
        got = parse_statements(text, self.path, r0, r1)
        if got is not None:
            return got, []
        from masdsl.lang.tree import parse_lark  # start-up: lark, only once a region does not parse fast

        module, diags = parse_lark(text[r0:r1], self.path)
        line0 = text.count("\n", 0, r0)
        col0 = r0 - (text.rfind("\n", 0, r0) + 1)

        def fn(sp: Span) -> Span:
            return _shift_span(sp, line0, col0, r0)

        if module is None:
            return None, [shift(d, fn) for d in diags]
        moved = [shift(st, fn) for st in statements(module)]
        return [(st, span_groups(st)) for st in moved], []

    def _full(self, text: str) -> tuple[A.Module | None, list[Diagnostic]]:
        self.text = text
        region, diags = self._parse_region(text, 0, len(text))
        if region is None:
            self.stmts, self.spans, self.broken, self.syntax = [], [], [(0, len(text))], diags
            self.last_reparsed = 0
            return None, diags
        self.stmts, self.spans = [st for st, _ in region], [sp for _, sp in region]
        self.broken, self.syntax, self.last_reparsed = [], [], len(self.stmts)
        return build_module(self.path, self.stmts, text), []
