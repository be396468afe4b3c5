"""Syntax errors: a lark parse failure -> one named, located `Diagnostic`; recovery so every
broken top-level statement is reported.

Named mistakes come from `SYNTAX_EXAMPLES` (lark's error-by-example idea: a snippet that fails
in the same parser state names the slip) and from a few textual rules (`=>`, unterminated
strings, a `{` never closed, `when` with nothing after it).

>>> from masdsl.lang.parse import parse_text
>>> _, diags = parse_text("flow {\\n  coder tester\\n}", "w.mas")
>>> print(diags[0].message, diags[0].span)
missing `->` between two nodes of a flow edge w.mas:2:9
"""

from __future__ import annotations

import dataclasses
import functools
import re

from lark import Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from masdsl.lang.errors import Diagnostic
from masdsl.lang.grammar import parser
from masdsl.lang.source import SourceFile, Span
from masdsl.lang.vocabulary import STATEMENTS


TERMINAL_NAMES = {
    "NAME": "a name", "NUMBER": "a number", "STRING": "a string", "LONG_STRING": "a string",
    "COMP_OP": "a comparison", "$END": "end of file", "_SEMI": "`;`",
}
MAX_SYNTAX_ERRORS = 100  # a file's syntax errors shown at most
TOP_KEYWORDS = STATEMENTS

# `match_examples`: a malformed snippet -> the mistake it shows (Lark's error-by-example).
SYNTAX_EXAMPLES: dict[str, tuple[list[str], str, str]] = {
    "missing-arrow": (
        ["flow { a b }", "flow { max_turns 2 a b }", "flow { a -> b c d }", "flow { a & b c }", "flow { start -> a\n a b }"],
        "missing `->` between two nodes of a flow edge",
        "an edge is written `from -> to`, for example `coder -> tester`",
    ),
    "missing-when-expr": (
        ["flow { a -> b when }", "flow { a -> b when -> c }", "flow { a -> b when\n c -> d }"],
        "missing expression after `when`",
        "a guard is an expression, for example `when passes(coder.code, task.tests)`",
    ),
    "missing-edge-target": (
        ["flow { a -> }", "flow { a -> & b }", "flow { a -> when x }"],
        "missing node after `->`",
        "an edge is written `from -> to`, for example `coder -> end`",
    ),
    "missing-colon": (
        ["train { steps 3 }", "policy p { model \"x\" }", "role a { sample { top_p 1 } }"],
        "missing `:` between a key and its value",
        "block entries are written `key: value`, for example `steps: 3`",
    ),
    "missing-estimator": (
        ["role a { advantage }", "role a { advantage \"rloo\" }", "role a { advantage 1 }"],
        "missing estimator name after `advantage`",
        "name one without quotes: `advantage grpo`, `drgrpo`, `rloo` or `grpo_agent_norm`",
    ),
    "missing-reward-expr": (
        ["role a { reward }", "team }", "success }", "role a { parse x = }"],
        "missing expression",
        None,
    ),
}


def _scan_braces(text: str, stop: int) -> list[int]:
    """Offsets of the `{` still open at `stop`, skipping strings and comments."""
    stack, i = [], 0
    open_until = {'"': -1, "'": -1}  # a quote before this offset opens no string (its line has no end for it)
    while i < min(stop, len(text)):
        ch = text[i]
        if ch == "#":
            j = text.find("\n", i)
            i = len(text) if j < 0 else j
        elif text.startswith('"""', i):
            j = text.find('"""', i + 3)
            i = len(text) if j < 0 else j + 3
            continue
        elif ch in "\"'":
            m = _SHORT_STRING[ch].match(text, i) if i >= open_until[ch] else None
            if m is None and i >= open_until[ch]:  # every later `ch` of this line is escaped alike: unclosed too
                j = text.find("\n", i)
                open_until[ch] = len(text) if j < 0 else j
            i = m.end() if m else i + 1
            continue
        elif ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            stack.pop()
        i += 1
    return stack


_EXPR_START = {"NAME", "NUMBER", "STRING", "LPAR"}
_STMT_START = {"WORKFLOW", "ROLE", "FLOW"}


def _expected(accepts) -> str:
    accepts = set(accepts or ())
    if _EXPR_START <= accepts:
        return "expected an expression"
    if _STMT_START <= accepts:
        return "expected a statement such as `role`, `flow` or `policy`"
    names = []
    for t in sorted(accepts or ()):
        if t.startswith("__") or t in ("WS", "COMMENT"):
            continue
        pat = parser().get_terminal(t).pattern if t in parser()._terminals_dict else None
        name = TERMINAL_NAMES.get(t) or (f"`{pat.value}`" if pat is not None and pat.type == "str" else f"`{t.lower()}`")
        if name not in names:
            names.append(name)
    if not names:
        return ""
    if len(names) > 6:
        return "expected " + ", ".join(names[:6]) + " or more"
    return "expected " + (names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1])


_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def _word_before(text: str, pos: int) -> tuple[str, int]:
    """The name that ends `text[:pos]` but for white space, and where it starts (read backwards:
    a regex search for it retries at every offset of a long word, quadratic time)."""
    end = len(text[:pos].rstrip())
    start = end
    while start > 0 and text[start - 1] in _WORD_CHARS:
        start -= 1
    while start < end and text[start].isdigit():
        start += 1
    return (text[start:end], start) if start < end else ("", pos)


def _at_line_start(text: str, pos: int) -> bool:
    return text[text.rfind("\n", 0, pos) + 1 : pos].strip() == ""


def _missing_brace(src: SourceFile, pos: int, open_at: int) -> Diagnostic:
    line = src.line_col(open_at)[0]
    return Diagnostic(
        "syntax", "missing `}`", src.point(pos), label="expected `}` before this",
        related=((src.span(open_at, open_at + 1), "this `{` is not closed"),),
        help=f"close the block opened on line {line} with `}}`",
    )


def _token_text(tok: Token) -> str:
    return "end of file" if tok.type == "$END" else f"`{tok}`"


@functools.lru_cache(maxsize=1)
def _example_states() -> list[tuple[int, frozenset, str]]:
    out = []
    for key, (snippets, _, _) in SYNTAX_EXAMPLES.items():
        for snippet in snippets:
            try:
                parser().parse(snippet)
            except (UnexpectedToken, UnexpectedEOF) as ut:
                out.append((ut.state.position if ut.state else -1, frozenset(ut.accepts or ut.expected or ()), key))
            except UnexpectedInput:
                continue
    return out


def match_example(exc: UnexpectedInput) -> str | None:
    """The `SYNTAX_EXAMPLES` key whose snippet fails in the same parser state as `exc`.

    Like lark's `match_examples`, but compares only the state on top of the stack, so an
    example written as a short snippet also matches the same slip deep inside a long file.
    """
    state = getattr(exc, "state", None)
    if state is None:
        return None
    accepts = frozenset(getattr(exc, "accepts", None) or getattr(exc, "expected", None) or ())
    for position, ex_accepts, key in _example_states():
        if position == state.position and ex_accepts == accepts:
            return key
    return None


def syntax_diagnostic(exc: UnexpectedInput, src: SourceFile) -> Diagnostic:
    """Turn a lark parse error into one named, located `Diagnostic`."""
    text = src.text
    if isinstance(exc, UnexpectedCharacters):
        pos = exc.pos_in_stream
        ch = text[pos]
        if ch in "\"'":
            start = pos - 2 if text[max(0, pos - 2) : pos + 1] == '"""' else pos
            what = "triple-quoted string" if start != pos else "string"
            close = '"""' if start != pos else ch
            return Diagnostic("syntax", f"unterminated {what}", src.span(start, start + len(close)),
                              label=f"this {what} is never closed",
                              help=f"end it with `{close}` on the same line" if start == pos else f"end it with `{close}`")
        return Diagnostic("syntax", f"unexpected character `{ch}`", src.point(pos),
                          label=_expected(exc.allowed) + " here" if exc.allowed else "")
    tok = exc.token if isinstance(exc, (UnexpectedToken, UnexpectedEOF)) else None
    pos = len(text) if tok is None or tok.type == "$END" else tok.start_pos
    accepts = getattr(exc, "accepts", None) or getattr(exc, "expected", None) or set()
    open_braces = _scan_braces(text, pos)
    if text.startswith("=>", pos):
        return Diagnostic("syntax", "`=>` is not an arrow; flow edges use `->`", src.span(pos, pos + 2),
                          label="expected `->`", help="write the edge as `from -> to`")
    dangling = re.search(r"\bwhen[ \t]*(?:#[^\n]*)?\n[^\n]*$", text[:pos])
    if dangling and tok is not None and tok.type in ("AMPERSAND", "ARROW", "$END", "RBRACE", "NAME"):
        at = dangling.start()
        return Diagnostic("syntax", "missing expression after `when`", src.span(at, at + 4),
                          label="nothing follows `when` on this line", help=SYNTAX_EXAMPLES["missing-when-expr"][2])
    word, wpos = _word_before(text, pos)
    if open_braces:
        at_eof = tok is None or tok.type == "$END"
        kw_here = str(tok) in TOP_KEYWORDS and _at_line_start(text, pos)
        kw_before = word in TOP_KEYWORDS and _at_line_start(text, wpos)
        stop = pos if at_eof or kw_here else wpos
        if (at_eof or kw_here or kw_before) and src.line_col(open_braces[-1])[0] < src.line_col(stop)[0] or at_eof:
            return _missing_brace(src, stop, open_braces[-1])
    label_key = match_example(exc)
    span = src.point(pos) if tok is None or tok.type == "$END" else src.span(tok.start_pos, tok.end_pos)
    expected = _expected(accepts)
    if label_key:
        _, message, hint = SYNTAX_EXAMPLES[label_key]
        return Diagnostic("syntax", message, span, label=(expected + " here") if expected else "", help=hint)
    what = _token_text(tok) if tok is not None else "end of file"
    return Diagnostic("syntax", f"unexpected {what}", span, label=(expected + " here") if expected else "")


_STMT_LINE = re.compile(r"^[ \t]*(%s)\b" % "|".join(TOP_KEYWORDS), re.M)


def statement_starts(text: str) -> list[int]:
    """Offsets where a top-level statement begins: a statement keyword first on its line,
    outside any `{ }` block, string or comment (one pass over the text).

    >>> statement_starts('env code\\nrole a {\\n  policy p\\n}\\nflow { }\\n')
    [0, 9, 31]
    """
    out, depth, i, n = [], 0, 0, len(text)
    line_start = True
    while i < n:
        ch = text[i]
        if line_start and depth == 0:
            m = _STMT_LINE.match(text, i)
            if m:
                out.append(m.start(1))
        line_start = ch == "\n"
        if ch == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith('"""', i):
            j = text.find('"""', i + 3)
            i = n if j < 0 else j + 3
            continue
        if ch in "\"'":
            m = _SHORT_STRING[ch].match(text, i)
            if m is None:  # unterminated: the string runs to the end of the line
                j = text.find("\n", i)
                i = n if j < 0 else j
            else:
                i = m.end()
            continue
        if ch == "{":
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
        i += 1
    return out


_SHORT_STRING = {q: re.compile(r"%s(?:[^%s\\\n]|\\.)*%s" % (q, q, q)) for q in "\"'"}


class _Statement(SourceFile):
    """One top-level statement, `file.text[a:b]`, and a little white space standing for the rest
    of the file, read as a file of its own whose lines, columns and spans are those of `file`.
    (Parsing the whole text again, the rest blanked, once per statement took quadratic time.)"""

    def __init__(self, file: SourceFile, a: int, b: int):
        text = file.text
        # the rest, blank, as the rules (`when` at the end, ...) see it: no, one or several line
        # ends, and whether the file ends with one
        first = text.find("\n", b)
        if first < 0:
            tail = " " if b < len(text) else ""
        else:
            more = text.find("\n", first + 1) >= 0
            tail = (" " if first > b else "") + "\n" + (" \n" if more else "") + ("" if text.endswith("\n") else " ")
        self.path, self.text, self.file, self.a = file.path, text[a:b] + tail, file, a
        self.line_starts = file.line_starts

    def line_col(self, offset: int) -> tuple[int, int]:
        return self.file.line_col(offset + self.a)

    def offset(self, line: int, col: int) -> int:
        return self.file.offset(line, col) - self.a

    def span(self, start: int, end: int) -> Span:
        return self.file.span(start + self.a, end + self.a)


def later_syntax_errors(text: str, src: SourceFile, first: Diagnostic) -> list[Diagnostic]:
    """Recovery: after the first syntax error, parse each later top-level statement on its own
    so every broken statement is reported, one error each."""
    starts = statement_starts(text) + [len(text)]
    out: list[Diagnostic] = []
    for a, b in zip(starts, starts[1:]):
        if a <= first.span.start:
            continue
        if len(out) == MAX_SYNTAX_ERRORS - 1:  # the rest is noise (and parsing it all takes a while)
            out[-1] = dataclasses.replace(out[-1], notes=out[-1].notes + (
                f"masdsl stops after {MAX_SYNTAX_ERRORS} syntax errors; later statements were not checked",))
            break
        chunk = _Statement(src, a, b)
        try:
            parser().parse(chunk.text)
        except UnexpectedInput as exc:
            d = syntax_diagnostic(exc, chunk)
            if d.message == "unexpected end of file" and b < len(text):  # the chunk ends, the file does not
                word = _WORD.match(text, b).group(0)
                d = dataclasses.replace(d, message=f"unexpected `{word}`", span=src.span(b, b + len(word)))
            out.append(d)
    return out


_WORD = re.compile(r"\w+")
