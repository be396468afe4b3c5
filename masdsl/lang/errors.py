"""Diagnostics of the `.mas` checker and `MasError`, the exception `load()` raises.

`check()` returns a list of `Diagnostic`s; only the public `load()` raises, with one `MasError`
holding all of them. Two renderings: the long rustc-style form (`render_long`, what
`masdsl check` prints) and the short one-line-per-item form (`render_short`, also
`str(MasError)`), which needs no source text.

>>> from masdsl.lang.source import SourceFile
>>> src = SourceFile("w.mas", "flow {\\n  a -> b\\n}\\n")
>>> d = Diagnostic("unknown-role", "unknown role `b` in flow edge", src.span(14, 15),
...                label="not a role", help="did you mean `a`?")
>>> print(render_short(d))
w.mas:2:8: error: unknown role `b` in flow edge [unknown-role]
w.mas:2:8: help: did you mean `a`?
>>> print(render_long(d, {"w.mas": src.text}))
error[unknown-role]: unknown role `b` in flow edge
 --> w.mas:2:8
  |
2 |   a -> b
  |        ^ not a role
  |
  = help: did you mean `a`?
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal, Mapping, Sequence

from masdsl.errors import UserError
from masdsl.lang.workflow import Span

MAX_SHOWN = 20


@dataclass(frozen=True)
class Diagnostic:
    code: str  # see masdsl.lang.codes
    message: str  # lowercase, no period, identifiers in backticks
    span: Span  # the primary span: the smallest that shows the problem
    label: str = ""  # short text under the ^^^
    related: tuple[tuple[Span, str], ...] = ()  # secondary spans (--- in the rendering)
    notes: tuple[str, ...] = ()
    help: str | None = None  # the only place a fix is suggested
    severity: Literal["error", "warning"] = "error"

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def sort_key(self) -> tuple:
        return (self.span.file, self.span.line, self.span.col, self.severity != "error", self.code)


# ---- rendering ---------------------------------------------------------------------------

_COLORS = {"error": "\x1b[1;31m", "warning": "\x1b[1;33m", "gutter": "\x1b[1;34m", "bold": "\x1b[1m", "reset": "\x1b[0m"}


def _c(kind: str, text: str, color: bool) -> str:
    return f"{_COLORS[kind]}{text}{_COLORS['reset']}" if color else text


def render_short(d: Diagnostic) -> str:
    """One line per item: `file:line:col: severity: message [code]`, then notes and help."""
    where = str(d.span)
    lines = [f"{where}: {d.severity}: {d.message} [{d.code}]"]
    lines += [f"{where}: note: {n}" for n in d.notes]
    if d.help:
        lines.append(f"{where}: help: {d.help}")
    return "\n".join(lines)


def _line_of(text: str, line: int) -> str | None:
    lines = text.split("\n")
    return lines[line - 1].rstrip("\r") if 1 <= line <= len(lines) else None


def _snippet(span: Span, label: str, mark: str, text: str | None, width: int, color: bool, kind: str) -> list[str]:
    pad = " " * width
    bar = _c("gutter", f"{pad} |", color)
    src_line = _line_of(text, span.line) if text is not None else None
    if src_line is None:
        return []
    shown = src_line.expandtabs(4)
    prefix = src_line[: span.col - 1].expandtabs(4)
    if span.end_line == span.line:
        n = max(1, len(src_line[span.col - 1 : span.end_col - 1].expandtabs(4)))
    else:
        n = max(1, len(shown) - len(prefix))
    under = " " * len(prefix) + _c(kind, mark * n + (f" {label}" if label else ""), color)
    return [bar, _c("gutter", f"{span.line:>{width}} |", color) + (f" {shown}" if shown else ""), f"{bar} {under}"]


def render_long(d: Diagnostic, sources: Mapping[str, str] | None = None, color: bool = False) -> str:
    """rustc-style: header, `-->` location, source line with carets, related spans, notes, help."""
    sources = sources or {}
    spans = [d.span] + [s for s, _ in d.related]
    width = max(len(str(s.line)) for s in spans)
    pad = " " * width
    kind = "error" if d.is_error else "warning"
    out = [_c(kind, f"{d.severity}[{d.code}]", color) + _c("bold", f": {d.message}", color)]
    out.append(f"{pad}{_c('gutter', '-->', color)} {d.span}")
    body = _snippet(d.span, d.label, "^", sources.get(d.span.file), width, color, kind)
    for span, label in d.related:
        snip = _snippet(span, label, "-", sources.get(span.file), width, color, "gutter")
        if snip:
            body += [_c("gutter", f"{pad} |", color), f"{pad}{_c('gutter', ':::', color)} {span}"] + snip
    out += body
    if d.notes or d.help:
        out.append(_c("gutter", f"{pad} |", color))
        out += [f"{pad} {_c('gutter', '=', color)} note: {n}" for n in d.notes]
        if d.help:
            out.append(f"{pad} {_c('gutter', '=', color)} help: {d.help}")
    return "\n".join(out)


def _ordered(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    return sorted(diagnostics, key=Diagnostic.sort_key)


def render_all(diagnostics: Sequence[Diagnostic], sources: Mapping[str, str] | None = None,
               color: bool = False, fmt: Literal["long", "short"] = "long") -> str:
    """All diagnostics in (file, line, col) order; after 20 errors, "... and N more"."""
    items = _ordered(diagnostics)
    shown, rest = items[:MAX_SHOWN], len(items) - MAX_SHOWN
    if fmt == "short":
        parts = [render_short(d) for d in shown]
    else:
        parts = [render_long(d, sources, color) + "\n" for d in shown]
    if rest > 0:
        parts.append(f"... and {rest} more")
    return "\n".join(parts).rstrip("\n")


class MasError(UserError):
    """One or more errors in `.mas` files. `str()` is the short form; `render()` the long one.

    >>> import pickle
    >>> from masdsl.lang.workflow import Span
    >>> e = MasError([Diagnostic("syntax", "bad", Span("w.mas", 1, 2, 1, 3, 1, 2))])
    >>> str(pickle.loads(pickle.dumps(e)))
    'w.mas:1:2: error: bad [syntax]'
    """

    def __init__(self, diagnostics: Sequence[Diagnostic], sources: Mapping[str, str] | None = None):
        self.diagnostics = tuple(_ordered(diagnostics))
        self.sources = dict(sources or {})
        super().__init__(self.__str__())

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.is_error)

    def __str__(self) -> str:
        return render_all(self.diagnostics, fmt="short")

    def render(self, color: bool = False) -> str:
        return render_all(self.diagnostics, self.sources, color=color, fmt="long")

    def __reduce__(self):
        return (MasError, (self.diagnostics, self.sources))
