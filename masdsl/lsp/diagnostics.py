"""Checker diagnostics -> LSP diagnostics: code, range, message (label, notes and help
appended), related locations, severity; grouped by the file they point into.

A diagnostic in a prompt file (`prompt file "x.j2"`) is published for that file.
"""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types as T
from pygls.uris import from_fs_path

from masdsl.lang.errors import Diagnostic
from masdsl.lang.workflow import Span
from masdsl.lsp.state import DocState, Lines

DOCS = Path(__file__).resolve().parents[2] / "docs" / "errors.md"


def span_range(span: Span, lines: Lines | None) -> T.Range:
    """The LSP range of a span (UTF-16 columns when the file's text is known)."""
    if lines is None:
        return T.Range(T.Position(span.line - 1, span.col - 1), T.Position(span.end_line - 1, span.end_col - 1))
    (l0, c0), (l1, c1) = lines.line_col(span.start), lines.line_col(span.end)
    return T.Range(T.Position(l0, c0), T.Position(l1, c1))


def _message(d: Diagnostic) -> str:
    parts = [d.message + (f": {d.label}" if d.label and d.label not in d.message else "")]
    parts += [f"note: {n}" for n in d.notes]
    if d.help:
        parts.append(f"help: {d.help}")
    return "\n".join(parts)


def to_lsp(d: Diagnostic, lines_of) -> T.Diagnostic:
    """One diagnostic; `lines_of(file)` gives the `Lines` of a file's text, or None."""
    related = [T.DiagnosticRelatedInformation(T.Location(from_fs_path(s.file) or s.file, span_range(s, lines_of(s.file))), label or "here")
               for s, label in d.related]
    href = f"{DOCS.as_uri()}#{d.code}" if DOCS.is_file() else None
    return T.Diagnostic(
        range=span_range(d.span, lines_of(d.span.file)),
        message=_message(d),
        severity=T.DiagnosticSeverity.Error if d.is_error else T.DiagnosticSeverity.Warning,
        code=d.code,
        code_description=T.CodeDescription(href) if href else None,
        source="masdsl",
        related_information=related or None,
    )


def by_file(state: DocState) -> dict[str, list[T.Diagnostic]]:
    """file path -> its LSP diagnostics (the document's own path always present)."""
    cache: dict[str, Lines | None] = {}

    def lines_of(file: str) -> Lines | None:  # built only for a file that has a diagnostic
        if file not in cache:
            cache[file] = state.lines if file == state.path else Lines(state.sources[file]) if file in state.sources else None
        return cache[file]

    out: dict[str, list[T.Diagnostic]] = {state.path: []}
    for d in state.diagnostics:
        out.setdefault(d.span.file, []).append(to_lsp(d, lines_of))
    return out
