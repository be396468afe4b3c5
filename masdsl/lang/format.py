"""`masdsl fmt`: one canonical layout for `.mas` text, comments kept, meaning unchanged.

The layout: one top-level statement per line at column 0; the items of `role { }` and
`flow { }` one per line, indented two spaces; a literal block (`policy`, `sample`, `train`)
on one line, `{ key: value, ... }`, unless it holds a comment or is over 80 characters, then
one entry per line; single spaces around operators, `->`, `&` and after `,` and `:`; none
inside brackets, around `.` or around `=` of a keyword argument; `;` dropped; at most one
blank line kept between statements; trailing comments on consecutive lines aligned.
String literals (prompts included) are copied byte for byte.

Lark drops comments, so the text is tokenised again here (strings first, so a `#` inside a
string is not a comment) and the parse tree only says where lines break. The output is parsed
again and must give the same tree (`FormatError` otherwise), so formatting never changes what
a file means.

>>> print(format_text("role a{policy p;prompt 'hi'   # greet\\n}"), end="")
role a {
  policy p
  prompt 'hi'  # greet
}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lark import Token, Tree
from lark.exceptions import UnexpectedInput

from masdsl.lang.grammar import parser

INDENT = "  "
BLOCK_WIDTH = 80
LINE_WIDTH = 100
_TOKEN = re.compile(r'(?P<s>"""[\s\S]*?"""|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\')|(?P<c>#[^\n]*)|(?P<w>\s+)'
                    r'|(?P<t>[A-Za-z_]\w*|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?|->|==|!=|<=|>=|.)')
_OPEN, _CLOSE = {"(", "["}, {")", "]", ",", ":", "."}


class FormatError(Exception):
    """The text does not parse (`masdsl check` names the error), or formatting would change it."""


@dataclass
class _Tok:
    text: str
    start: int
    comment: bool = False

    @property
    def end(self) -> int:
        return self.start + len(self.text)


@dataclass
class _Plan:
    """What the parse tree says about the tokens, by start offset."""

    breaks: dict[int, int] = field(default_factory=dict)  # token starts a line: its depth
    opens: set[int] = field(default_factory=set)  # `{` that opens a multi-line block
    closes: set[int] = field(default_factory=set)  # `}` that closes one
    call_parens: set[int] = field(default_factory=set)  # `(` right after a function name
    unary: set[int] = field(default_factory=set)  # `-` that negates
    plus_minus: set[int] = field(default_factory=set)  # binary `+` and `-`: a long line breaks before them
    kwarg_eq: set[int] = field(default_factory=set)  # `=` of a keyword argument
    drop: set[int] = field(default_factory=set)  # `;` and the commas between block entries
    comma_after: set[int] = field(default_factory=set)  # end offsets of entries followed by `,`


def _tokens(text: str) -> list[_Tok]:
    out = []
    for m in _TOKEN.finditer(text):
        if m.lastgroup != "w":
            out.append(_Tok(m.group(), m.start(), comment=m.lastgroup == "c"))
    return out


def _parse(text: str) -> Tree:
    try:
        return parser().parse(text)
    except UnexpectedInput as exc:
        raise FormatError(f"line {exc.line}: the file does not parse; run `masdsl check` for the error") from None


def _strip(t) -> object:
    """A tree without positions, to compare two parses."""
    if isinstance(t, Tree):
        return (str(t.data), tuple(_strip(c) for c in t.children))
    return (t.type, str(t)) if isinstance(t, Token) else t


class _Planner:
    def __init__(self, text: str, toks: list[_Tok]):
        self.text, self.toks, self.p = text, toks, _Plan()
        self.starts = [t.start for t in toks if not t.comment]

    def tokens_in(self, a: int, b: int) -> list[_Tok]:
        return [t for t in self.toks if a <= t.start < b]

    def plan(self, tree: Tree) -> _Plan:
        for stmt in tree.children:
            self.line(stmt, 0)
            self.walk(stmt, 0)
        self.p.drop |= {t.start for t in self.toks if t.text == ";"}
        return self.p

    def line(self, node, depth: int) -> None:
        self.p.breaks[node.meta.start_pos if isinstance(node, Tree) else node.start_pos] = depth

    def walk(self, node, depth: int) -> None:
        if not isinstance(node, Tree):
            return
        kind = str(node.data)
        if kind in ("role_decl", "flow_decl"):
            self.multiline(node, depth, [c for c in node.children if isinstance(c, Tree)])
            return
        if kind == "block":
            self.block(node, depth)
            return
        if kind == "call_args":
            self.p.call_parens.add(node.meta.start_pos)
        elif kind == "kwarg":
            eq = self.tokens_in(node.children[0].end_pos, node.meta.end_pos)
            self.p.kwarg_eq.add(next(t.start for t in eq if t.text == "="))
        elif kind == "binop":
            self.p.plus_minus |= {c.start_pos for c in node.children if getattr(c, "type", None) in ("PLUS", "MINUS")}
        elif kind in ("neg", "number") and getattr(node.children[0], "type", None) == "MINUS":
            self.p.unary.add(node.children[0].start_pos)
        for c in node.children:
            self.walk(c, depth)

    def multiline(self, node: Tree, depth: int, items: list) -> None:
        """A `{ }` whose items go one per line at depth + 1, its `}` on a line of its own."""
        close = node.meta.end_pos - 1
        brace = next(t.start for t in self.tokens_in(node.meta.start_pos, close) if t.text == "{")
        self.p.opens.add(brace)
        self.p.closes.add(close)
        self.p.breaks[close] = depth
        for it in items:
            self.line(it, depth + 1)
            self.walk(it, depth + 1)

    def block(self, node: Tree, depth: int) -> None:
        entries = [c for c in node.children if isinstance(c, Tree)]
        inside = self.tokens_in(node.meta.start_pos, node.meta.end_pos)
        for t in inside:
            if t.text == "," and not any(e.meta.start_pos <= t.start < e.meta.end_pos for e in entries):
                self.p.drop.add(t.start)
        self.p.comma_after |= {e.meta.end_pos for e in entries[:-1]}
        flat = " ".join(t.text for t in inside)
        if entries and (any(t.comment for t in inside) or len(flat) > BLOCK_WIDTH):
            self.multiline(node, depth, entries)
            return
        for e in entries:
            self.walk(e, depth)


@dataclass
class _Line:
    depth: int
    code: str = ""
    comment: str = ""
    cont: bool = False  # a continuation line, after a comment cut a statement
    cuts: list[int] = field(default_factory=list)  # offsets in `code` where a long line may break
    pad: str | None = None  # the indentation of a broken line's continuation
    gap: int = 2  # spaces before the trailing comment


class _Printer:
    def __init__(self, text: str, toks: list[_Tok], plan: _Plan):
        self.text, self.toks, self.p = text, toks, plan
        self.lines: list[_Line] = []
        self.depth, self.prev, self.parens, self.cut = 0, None, 0, False

    def newline(self, depth: int, start: int, cont: bool = False) -> None:
        prev_end = self.prev.end if self.prev is not None else None
        if (prev_end is not None and self.text.count("\n", prev_end, start) >= 2 and self.prev.text != "{"
                and start not in self.p.closes and not cont):
            self.lines.append(_Line(0))
        self.lines.append(_Line(depth, cont=cont))

    def comment(self, t: _Tok) -> None:
        same_line = self.prev is not None and "\n" not in self.text[self.prev.end:t.start]
        if same_line and self.lines and self.lines[-1].code:
            self.lines[-1].comment = t.text.rstrip()
        else:
            if not self.lines or self.lines[-1].code or self.lines[-1].comment:
                self.newline(self.depth, t.start)
            self.lines[-1].comment = t.text.rstrip()
        self.cut, self.prev = True, t

    def token(self, t: _Tok) -> None:
        if t.start in self.p.drop:
            return
        if t.start in self.p.closes:
            self.depth -= 1
        if t.start in self.p.breaks:
            self.depth = self.p.breaks[t.start]
            self.newline(self.depth, t.start)
        elif self.cut or not self.lines:
            self.newline(self.depth + 2, t.start, cont=bool(self.lines))
        elif self.lines[-1].code and self.space(t):
            if self.parens == 0 and (t.start in self.p.plus_minus or t.text in ("and", "or")):
                self.lines[-1].cuts.append(len(self.lines[-1].code))
            self.lines[-1].code += " "
        self.lines[-1].code += t.text
        if t.end in self.p.comma_after:
            self.lines[-1].code += ","
        self.parens += (t.text in "([") - (t.text in ")]") if len(t.text) == 1 else 0
        if t.start in self.p.opens:
            self.depth += 1
        self.cut, self.prev = False, t

    def space(self, t: _Tok) -> bool:
        a = self.prev.text
        if t.text in _CLOSE or a in _OPEN or a == ".":
            return False
        if t.start in self.p.call_parens or self.prev.start in self.p.unary:
            return False
        if t.start in self.p.kwarg_eq or self.prev.start in self.p.kwarg_eq:
            return False
        return not (a == "{" and t.text == "}")

    def render(self) -> str:
        for t in self.toks:
            (self.comment if t.comment else self.token)(t)
        lines = [part for ln in self.lines for part in _wrap(ln)]
        _align(lines)
        out = []
        for ln in lines:
            pad = INDENT * ln.depth if ln.pad is None else ln.pad
            code = pad + ln.code if ln.code else ""
            gap = " " * ln.gap if code else pad
            out.append((code + gap + ln.comment if ln.comment else code).rstrip())
        return "\n".join(out).strip("\n") + "\n" if out else ""


def _width(ln: _Line) -> int:
    pad = INDENT * ln.depth if ln.pad is None else ln.pad
    return len(pad + ln.code)


def _wrap(ln: _Line) -> list[_Line]:
    """A line over `LINE_WIDTH` breaks before its outermost `+`, `-`, `and`, `or` (as late as
    fits); the continuations line up after the statement's first word."""
    pad = INDENT * ln.depth
    if "\n" in ln.code or not ln.cuts or len(pad + ln.code) <= LINE_WIDTH:
        return [ln]
    cont = pad + " " * (ln.code.find(" ") + 1)
    parts, start, last = [], 0, 0
    for cut in ln.cuts + [len(ln.code)]:
        if len(cont if parts else pad) + cut - start > LINE_WIDTH and last > start:
            parts.append(ln.code[start:last])
            start = last + 1
        last = cut
    parts.append(ln.code[start:])
    out = [_Line(ln.depth, parts[0], cont=ln.cont, pad=ln.pad)]
    out += [_Line(ln.depth, p, pad=cont) for p in parts[1:]]
    out[-1].comment = ln.comment
    return out


def _align(lines: list[_Line]) -> None:
    """Trailing comments on consecutive lines start in one column (two spaces after the longest
    code); a run ends at a line without one."""
    run: list[_Line] = []
    for ln in lines + [_Line(0)]:
        if ln.code and ln.comment and "\n" not in ln.code:
            run.append(ln)
            continue
        col = max((_width(r) for r in run), default=0) + 2
        for r in run:
            r.gap = col - _width(r)
        run = []


def format_text(text: str) -> str:
    """The canonical layout of `.mas` text (raises `FormatError` when it does not parse)."""
    tree = _parse(text)
    toks = _tokens(text)
    out = _Printer(text, toks, _Planner(text, toks).plan(tree)).render()
    if _strip(_parse(out)) != _strip(tree):
        raise FormatError("formatting would change the meaning of the file (a bug in masdsl fmt)")
    return out
