"""Prompt templates: Jinja2 in a sandbox, checked against the variables a workflow provides.

Templates are parsed here in an `ImmutableSandboxedEnvironment` with `StrictUndefined`, the
settings `masdsl.runtime.prompts` renders them with (a missing value is an error, never an empty
string); this module only checks them, it never renders. Variables: `task`, `env`, `turn`,
`role` (the role's own name), `history` (list of prior outputs), and every role name as a
mapping of that role's latest fields (`{{ coder.code }}`).

`find_undeclared_variables` only sees top-level names, so `task.promt` is caught by walking the
template's `Getattr` nodes. Template lines map back to `.mas` lines through `TemplateText`.
What a check needs of a template text is cached per text (`_facts`), and a template that is
only text and `{{ name }}` / `{{ name.field }}` is read without jinja2 (it is not imported
then: `masdsl check` starts faster).

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
from typing import TYPE_CHECKING, Any, Mapping

from masdsl.errors import did_you_mean
from masdsl.lang.errors import Diagnostic
from masdsl.lang.workflow import Span

if TYPE_CHECKING:  # jinja2 is imported where it is used (~30 ms of `masdsl check` start-up)
    from jinja2.sandbox import ImmutableSandboxedEnvironment

BASE_VARIABLES = ("task", "env", "turn", "role", "history")
GLOBALS = ("cycler", "dict", "joiner", "lipsum", "namespace", "range")  # environment().globals (a test holds it)
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_SIMPLE = re.compile(r"\{\{[ \t]*(%s)(?:\.(%s))?[ \t]*\}\}" % (_NAME, _NAME))
_RESERVED = frozenset("and or not in is if else elif for endfor endif true false none True False None recursive "
                      "with without import from as set block macro call filter include extends raw".split())


@functools.lru_cache(maxsize=1)
def environment() -> ImmutableSandboxedEnvironment:
    """The environment templates are parsed in (its globals are names a template may use)."""
    from jinja2 import StrictUndefined  # start-up: jinja2, only once a template needs it
    from jinja2.sandbox import ImmutableSandboxedEnvironment

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


def _unknown_filters(unknown: tuple, loc: _Locator, what: str) -> list[Diagnostic]:
    """`{{ x|nope }}` and `{% if x is nope %}`: a filter or test jinja2 does not have."""
    out = []
    for kind, name, lineno in unknown:
        known = environment().filters if kind == "filter" else environment().tests
        pattern = (r"\|\s*(%s)" if kind == "filter" else r"\bis\s+(?:not\s+)?(%s)") % re.escape(name)
        out.append(Diagnostic("template-syntax", f"{what} uses the Jinja2 {kind} `{name}`, which does not exist",
                              loc.span(lineno, pattern, 1), label=f"no such {kind}",
                              notes=("`|` applies a filter; a field is read with `.`: `{{ name.field }}`",)
                              if kind == "filter" and "." in name else (),
                              help=did_you_mean(name, known)))
    return out


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> tuple[Any, Any]:
    """The Jinja2 tree of a template text, or its syntax error. Cached: an editor re-checks the
    whole file on every keystroke, and most of its prompts have not changed (the tree is only read)."""
    from jinja2 import TemplateSyntaxError  # start-up: jinja2, only for templates `_simple` cannot read

    try:
        return environment().parse(text), None
    except TemplateSyntaxError as exc:
        return None, exc
    except RecursionError:  # `{{{{...`: jinja2's parser recurses once per bracket
        return None, TemplateSyntaxError("the template nests brackets too deeply", 1)


@dataclass(frozen=True)
class _Facts:
    """What checking a template needs to know of its text."""

    error: tuple[str, int] | None = None  # (message, line) of a Jinja2 syntax error
    unknown: tuple[tuple[str, str, int], ...] = ()  # ("filter" | "test", name, line) jinja2 does not have
    names: frozenset[str] = frozenset()  # the undeclared variables
    attrs: tuple[tuple[str, str, int], ...] = ()  # (variable, field, line) of `x.f` and `x["f"]`, x undeclared


def _simple(text: str) -> _Facts | None:
    """The facts of a template that is only text and `{{ name }}` / `{{ name.field }}`, else None."""
    if "\r" in text:
        return None
    names, attrs, pos = set(), [], 0
    for m in _SIMPLE.finditer(text):
        gap = text[pos : m.start()]
        if "{{" in gap or "{%" in gap or "{#" in gap or gap.endswith("{"):
            return None
        if m.group(1) in _RESERVED or m.group(2) in _RESERVED:
            return None
        if m.group(1) in GLOBALS:  # jinja2 counts its globals as declared
            pos = m.end()
            continue
        names.add(m.group(1))
        if m.group(2):
            attrs.append((m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1))
        pos = m.end()
    tail = text[pos:]
    if "{{" in tail or "{%" in tail or "{#" in tail:
        return None
    return _Facts(names=frozenset(names), attrs=tuple(attrs))


@functools.lru_cache(maxsize=4096)
def _facts(text: str) -> _Facts:
    """The facts of a template text (cached: most prompts do not change between two checks)."""
    simple = _simple(text)
    if simple is not None:
        return simple
    from jinja2 import meta, nodes  # start-up: jinja2, only for templates `_simple` cannot read

    tree, exc = _parsed(text)
    if exc is not None:
        return _Facts(error=(exc.message, exc.lineno or 1))
    unknown = tuple(("filter" if isinstance(n, nodes.Filter) else "test", n.name, n.lineno)
                    for n in tree.find_all((nodes.Filter, nodes.Test))
                    if n.name not in (environment().filters if isinstance(n, nodes.Filter) else environment().tests))
    if unknown:  # jinja2 refuses to analyse a template with an unknown filter or test
        return _Facts(unknown=unknown)
    undeclared = frozenset(meta.find_undeclared_variables(tree))
    attrs = []
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        base = node.node
        if not isinstance(base, nodes.Name) or base.name not in undeclared:
            continue
        if isinstance(node, nodes.Getattr):
            attrs.append((base.name, node.attr, node.lineno))
        elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
            attrs.append((base.name, node.arg.value, node.lineno))
    return _Facts(names=undeclared, attrs=tuple(attrs))


def check_template(t: TemplateText, file: str, fields: Mapping[str, set[str] | None], full_text: str,
                   what: str = "prompt") -> list[Diagnostic]:
    """Diagnostics for one template. `fields`: variable -> its known attributes (None: any).

    `full_text` is the text of `file`, for spans (the `.mas` file, or the prompt file).
    """
    loc = _Locator(t, file, full_text or t.text)
    facts = _facts(t.text)
    if facts.error is not None:
        return [Diagnostic("template-syntax", f"{what} is not a valid Jinja2 template: {facts.error[0]}",
                           loc.span(facts.error[1]), label="the template error is on this line")]
    if facts.unknown:
        return _unknown_filters(facts.unknown, loc, what)
    out = []
    unknown = [n for n in facts.names if n not in fields and n not in GLOBALS]
    names = sorted(set(fields) | set(GLOBALS)) if unknown else []
    for name in sorted(unknown):
        out.append(Diagnostic("unknown-variable", f"{what} uses `{name}`, which the workflow does not provide",
                              loc.find(r"\b%s\b" % re.escape(name)), label="not a template variable",
                              notes=("variables: " + ", ".join(f"`{n}`" for n in sorted(fields)),),
                              help=did_you_mean(name, names)))
    for base, attr, lineno in facts.attrs:
        known = fields.get(base)
        if known is None or attr in known:
            continue
        span = loc.span(lineno, r"\b%s\s*\.\s*(%s)\b" % (re.escape(base), re.escape(attr)), 1)
        listing = ", ".join(f"`{k}`" for k in sorted(known)) or "none"
        near = did_you_mean(attr, known, fmt=f"`{base}.{{}}`")
        out.append(Diagnostic("unknown-field", f"`{base}` has no field `{attr}`", span,
                              label=f"not a field of `{base}`", notes=(f"fields of `{base}`: {listing}",),
                              help=near))
    return out
