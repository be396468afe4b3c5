"""Checker rules for `import "x.py"` (docs/language.md, "import").

- the file exists ([missing-file]) and imports cleanly ([import-error], with its traceback);
- no two imported files register the same name, nor one file twice ([duplicate-registration]:
  the registry keeps one entry per name, so the other would be replaced without a word);
- a file that replaces a built-in (`pass_rate`, `code`, ...) gets a [shadowed-builtin] warning;
- when an import fails, the names it may have registered are not reported as unknown
  (`Ctx.unknown_excused`); `note_unchecked` lists them on the import's own error instead.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from masdsl.envs.registry import load_builtins
from masdsl.lang import ast as A
from masdsl.lang.context import Ctx, file_beside
from masdsl.lang.imports import ImportFileError, Registration, import_file, registrations, restore_builtins, shadowed_builtin
from masdsl.lang.source import SourceFile, Span

DECORATORS = {"envs": "env", "data_sources": "data_source", "function": "function", "parser": "parser"}


def check_imports(c: Ctx) -> None:
    """Import every file in order; then compare what they registered."""
    if c.module.imports:
        load_builtins()  # built-ins first: an imported file may replace one, never the reverse
    restore_builtins()  # a built-in replaced by a file this workflow does not import comes back
    owners: dict[tuple[str, str], tuple[A.ImportDecl, Registration]] = {}
    done: set[str] = set()
    for imp in c.module.imports:
        path = c.resolve(imp.path.value)
        if not path.is_file():
            c.error("missing-file", f"import file `{imp.path.value}` does not exist", imp.path.span,
                    label="no such file", notes=(f"looked for {path}",), help=file_beside(imp.path.value, path))
            c.failed_imports.append(c.diags[-1])
            continue
        try:
            import_file(path)
        except ImportFileError as exc:
            notes = [f"{exc.path}" + (f", line {exc.line}" if exc.line else "") + f": {exc.summary}"]
            if exc.details:
                notes.append("traceback (your file):\n" + exc.details.rstrip())
            c.error("import-error", f"importing `{imp.path.value}` raised an error", imp.path.span,
                    label=exc.summary, notes=tuple(notes))
            c.failed_imports.append(c.diags[-1])
            continue
        if str(path.resolve()) in done:
            continue
        done.add(str(path.resolve()))
        for reg in registrations(path):
            first = owners.get((reg.table, reg.name))
            if first is None:
                owners[(reg.table, reg.name)] = (imp, reg)
                _shadow(c, imp, reg)
            else:
                _duplicate(c, imp, reg, *first)


def note_unchecked(c: Ctx) -> None:
    """Add to each failed import's error the names left unchecked because of it."""
    if not c.unchecked:
        return
    note = "not checked until it imports: " + ", ".join(f"{kind} `{n}`" for n, kind in sorted(c.unchecked.items()))
    for d in c.failed_imports:
        i = next(i for i, x in enumerate(c.diags) if x is d)
        c.diags[i] = dataclasses.replace(d, notes=d.notes + (note,))


def _where(c: Ctx, imp: A.ImportDecl, reg: Registration) -> Span | None:
    """The registration's decorator line in the Python file (the name's string when it is on it)."""
    if reg.line is None:
        return None
    shown = str(c.resolve(imp.path.value))
    if shown not in c.sources:
        try:
            c.sources[shown] = Path(reg.path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    src = SourceFile(shown, c.sources[shown])
    text, start = src.line_text(reg.line), src.offset(reg.line, 1)
    m = re.search(r"([\"'])%s\1" % re.escape(reg.name), text)
    if m:
        return src.span(start + m.start(), start + m.end())
    indent = len(text) - len(text.lstrip())
    return src.span(start + indent, start + len(text.rstrip()))


def _at(c: Ctx, imp: A.ImportDecl, reg: Registration, label: str) -> tuple[tuple[Span, str], ...]:
    span = _where(c, imp, reg)
    return ((span, label),) if span is not None else ()


def _decorator(reg: Registration) -> str:
    return DECORATORS.get(reg.kind if reg.table == "functions" else reg.table, "function")


def _duplicate(c: Ctx, imp: A.ImportDecl, reg: Registration, first_imp: A.ImportDecl, first: Registration) -> None:
    name, here, there = reg.name, imp.path.value, first_imp.path.value
    same = reg.path == first.path
    notes = []
    if first.kind != reg.kind:
        notes.append(f"`{there}` registers it as a {first.kind}, `{here}` as a {reg.kind} "
                     f"(functions and parsers share one set of names)")
    for r, i in ((first, first_imp), (reg, imp)):
        if r.line is None:
            notes.append(f"`{i.path.value}` registers `{name}` from a module it imports")
    related = _at(c, first_imp, first, "first registered here") + _at(c, imp, reg, "registered again here")
    if same:
        c.error("duplicate-registration", f"{reg.kind} `{name}` is registered twice in `{here}`", imp.path.span,
                label=f"registers `{name}` twice", related=related,
                notes=tuple(notes) + ("the second registration silently replaces the first",),
                help="rename or remove one of the two")
        return
    c.error("duplicate-registration", f"{reg.kind} `{name}` is registered by both `{there}` and `{here}`",
            imp.path.span, label=f"registers `{name}` again", related=related,
            notes=tuple(notes) + (f"the registry keeps one `{name}`: `{here}`, imported last, would silently "
                                  f"replace the one of `{there}`",),
            help=f"rename one of them (for example `@{_decorator(reg)}(\"{name}_2\")`), or import only one of the files")


def _shadow(c: Ctx, imp: A.ImportDecl, reg: Registration) -> None:
    if shadowed_builtin(reg) is None:
        return
    name = reg.name
    c.warn("shadowed-builtin", f"`{imp.path.value}` replaces the built-in {reg.kind} `{name}`", imp.path.span,
           label=f"replaces `{name}`", related=_at(c, imp, reg, f"registers its own `{name}`"),
           notes=("workflows that import this file get its version; the others keep the built-in",),
           help=f"if you meant a new {reg.kind}, give it another name (for example `@{_decorator(reg)}(\"my_{name}\")`)")
