"""Prompt templates: Jinja2 in a sandbox, checked against the variables a workflow provides.

Templates are parsed here in an `ImmutableSandboxedEnvironment` with `StrictUndefined`, the
settings `masdsl.runtime.prompts` renders them with (a missing value is an error, never an empty
string); this module only checks them, it never renders. Variables: `task`, `env`, `turn`,
`role` (the role's own name), `history` (list of prior outputs), and every role name as a
mapping of that role's latest fields (`{{ coder.code }}`).

`find_undeclared_variables` only sees top-level names, so `task.promt` is caught by walking the
template's `Getattr` nodes. Template lines map back to `.mas` lines through `TemplateText`.

>>> t = prompt_text('"' * 3 + '\\n    Solve {{ task.question }}\\n  ' + '"' * 3, 10)
>>> t.text
'Solve {{ task.question }}'
>>> [d.message for d in check_template(t, "w.mas", {"task": {"prompt"}}, "")]
['`task` has no field `question`']
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Mapping

from jinja2 import StrictUndefined, TemplateSyntaxError, meta, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from masdsl.lang.errors import Diagnostic, did_you_mean
from masdsl.lang.workflow import Span

BASE_VARIABLES = ("task", "env", "turn", "role", "history")


@functools.lru_cache(maxsize=1)
def environment() -> ImmutableSandboxedEnvironment:
    """The environment templates are parsed in (its globals are names a template may use)."""
    return ImmutableSandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=False, autoescape=False)


@dataclass(frozen=True)
class TemplateText:
    text: str  # the template source (dedented for `\"\"\"` prompts)
    line_offsets: tuple[int, ...]  # offset in the file of each template line's first character


def prompt_text(raw: str, offset: int, long: bool = True) -> TemplateText:
    """Dedent a prompt literal; `raw` is the literal as written (with quotes), at `offset`.

    The first line is dropped when blank (text starting on the line after `\"\"\"`), and the
    last when it only holds the indentation of the closing quotes.
    """
    q = 3 if long else 1
    body, base = raw[q:-q] if len(raw) >= 2 * q else raw, offset + q
    lines, starts, pos = body.split("\n"), [], base
    for line in lines:
        starts.append(pos)
        pos += len(line) + 1
    if len(lines) > 1 and not lines[0].strip():
        lines, starts = lines[1:], starts[1:]
    if len(lines) > 1 and not lines[-1].strip():
        lines, starts = lines[:-1], starts[:-1]
    indents = [len(l) - len(l.lstrip(" \t")) for l in lines if l.strip()]
    d = min(indents) if indents and long else 0
    out = [l[d:] if l.strip() else "" for l in lines]
    return TemplateText("\n".join(out), tuple(s + (d if l.strip() else 0) for s, l in zip(starts, lines)))


def file_text(text: str) -> TemplateText:
    """A prompt file: the template is the file itself."""
    starts, pos = [], 0
    for line in text.split("\n"):
        starts.append(pos)
        pos += len(line) + 1
    return TemplateText(text, tuple(starts))


class _Locator:
    def __init__(self, t: TemplateText, file: str, full_text: str):
        self.t, self.file, self.full = t, file, full_text
        self.lines = t.text.split("\n")

    def span(self, lineno: int, pattern: str | None = None, group: int = 0) -> Span:
        lineno = max(1, min(lineno, len(self.lines)))
        line = self.lines[lineno - 1]
        m = re.search(pattern, line) if pattern else None
        if m:
            a, b = m.start(group), m.end(group)
        else:
            a = len(line) - len(line.lstrip())
            b = max(a + 1, len(line.rstrip()))
        start = self.t.line_offsets[lineno - 1] + a
        return _span_in(self.full, self.file, start, start + (b - a))

    def find(self, pattern: str, group: int = 0) -> Span:
        for i, line in enumerate(self.lines, 1):
            if re.search(pattern, line):
                return self.span(i, pattern, group)
        return self.span(1)


def _span_in(text: str, file: str, start: int, end: int) -> Span:
    line = text.count("\n", 0, start) + 1
    col = start - (text.rfind("\n", 0, start) + 1) + 1
    end_line = text.count("\n", 0, end) + 1
    end_col = end - (text.rfind("\n", 0, end) + 1) + 1
    return Span(file, line, col, end_line, end_col, start, end)


def _unknown_filters(tree, loc: _Locator, what: str) -> list[Diagnostic]:
    """`{{ x|nope }}` and `{% if x is nope %}`: a filter or test jinja2 does not have."""
    out = []
    for node in tree.find_all((nodes.Filter, nodes.Test)):
        kind, known = ("filter", environment().filters) if isinstance(node, nodes.Filter) else ("test", environment().tests)
        if node.name in known:
            continue
        pattern = (r"\|\s*(%s)" if kind == "filter" else r"\bis\s+(?:not\s+)?(%s)") % re.escape(node.name)
        out.append(Diagnostic("template-syntax", f"{what} uses the Jinja2 {kind} `{node.name}`, which does not exist",
                              loc.span(node.lineno, pattern, 1), label=f"no such {kind}",
                              notes=("`|` applies a filter; a field is read with `.`: `{{ name.field }}`",)
                              if kind == "filter" and "." in node.name else (),
                              help=did_you_mean(node.name, known)))
    return out


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> tuple[Any, TemplateSyntaxError | None]:
    """The Jinja2 tree of a template text, or its syntax error. Cached: an editor re-checks the
    whole file on every keystroke, and most of its prompts have not changed (the tree is only read)."""
    try:
        return environment().parse(text), None
    except TemplateSyntaxError as exc:
        return None, exc


def check_template(t: TemplateText, file: str, fields: Mapping[str, set[str] | None], full_text: str,
                   what: str = "prompt") -> list[Diagnostic]:
    """Diagnostics for one template. `fields`: variable -> its known attributes (None: any).

    `full_text` is the text of `file`, for spans (the `.mas` file, or the prompt file).
    """
    loc = _Locator(t, file, full_text or t.text)
    tree, exc = _parsed(t.text)
    if exc is not None:
        return [Diagnostic("template-syntax", f"{what} is not a valid Jinja2 template: {exc.message}",
                           loc.span(exc.lineno or 1), label="the template error is on this line")]
    out = _unknown_filters(tree, loc, what)
    if out:  # jinja2 refuses to analyse a template with an unknown filter or test
        return out
    names = sorted(set(fields) | set(environment().globals))
    undeclared = meta.find_undeclared_variables(tree)
    for name in sorted(undeclared - set(fields) - set(environment().globals)):
        out.append(Diagnostic("unknown-variable", f"{what} uses `{name}`, which the workflow does not provide",
                              loc.find(r"\b%s\b" % re.escape(name)), label="not a template variable",
                              notes=("variables: " + ", ".join(f"`{n}`" for n in sorted(fields)),),
                              help=did_you_mean(name, names)))
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        base = node.node
        if not isinstance(base, nodes.Name) or base.name not in undeclared or fields.get(base.name) is None:
            continue
        if isinstance(node, nodes.Getattr):
            attr = node.attr
        elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
            attr = node.arg.value
        else:
            continue
        known = fields[base.name]
        if attr in known:
            continue
        span = loc.span(node.lineno, r"\b%s\s*\.\s*(%s)\b" % (re.escape(base.name), re.escape(attr)), 1)
        listing = ", ".join(f"`{k}`" for k in sorted(known)) or "none"
        near = did_you_mean(attr, known, fmt=f"`{base.name}.{{}}`")
        out.append(Diagnostic("unknown-field", f"`{base.name}` has no field `{attr}`", span,
                              label=f"not a field of `{base.name}`", notes=(f"fields of `{base.name}`: {listing}",),
                              help=near))
    return out
