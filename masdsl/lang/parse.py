"""Text -> lark tree -> AST. Syntax errors become `Diagnostic`s with named, human messages.

The grammar is `grammar/mas.lark`, shipped inside the package as `masdsl/lang/mas.lark` and
loaded with `Lark.open_from_package` (LALR, contextual lexer, positions kept). `ToAst` builds
AST nodes and never judges them: every rule about meaning lives in `masdsl.lang.check`.

>>> module, diags = parse_text('role a { policy p prompt "hi" }', "w.mas")
>>> module.roles[0].name.name, diags
('a', [])
>>> _, diags = parse_text("flow { a => b }", "w.mas")
>>> print(diags[0].message, diags[0].span)
`=>` is not an arrow; flow edges use `->` w.mas:1:10
"""

from __future__ import annotations

import dataclasses
import functools
import re

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from masdsl.lang import ast as A
from masdsl.lang.errors import Diagnostic
from masdsl.lang.source import SourceFile, Span, span_between


@functools.lru_cache(maxsize=1)
def parser() -> Lark:
    """The LALR parser for `.mas` text, built once (lark caches the tables on disk)."""
    return Lark.open_from_package(
        "masdsl.lang", "mas.lark", parser="lalr", lexer="contextual",
        propagate_positions=True, maybe_placeholders=True, cache=True,
    )


# ---- tree -> AST -------------------------------------------------------------------------

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


def unescape(body: str) -> str:
    r"""Decode the escapes of a one-line string literal.

    >>> unescape(r'a\nb\"c\u00e9\q')
    'a\nb"cé\\q'
    """

    def repl(m: re.Match) -> str:
        s = m.group(1)
        if s[0] == "u" and len(s) == 5:
            return chr(int(s[1:], 16))
        return _ESCAPES.get(s, "\\" + s)

    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", repl, body)


def _number(text: str) -> int | float:
    return float(text) if any(c in text for c in ".eE") else int(text)


class ToAst(Transformer):
    """Builds `masdsl.lang.ast` nodes from the lark tree, with spans on every node."""

    def __init__(self, src: SourceFile):
        super().__init__()
        self.src, self.path = src, src.path

    def _s(self, item) -> Span:
        """The span of a token or a lark `Meta` (lark already counts lines and columns)."""
        return Span(self.path, item.line, item.column, item.end_line, item.end_column, item.start_pos, item.end_pos)

    def _id(self, tok: Token) -> A.Ident:
        return A.Ident(str(tok), self._s(tok))

    # statements
    def start(self, items):
        groups: dict[str, list] = {k: [] for k in ("workflows", "envs", "data", "policies", "roles", "flows",
                                                 "teams", "alphas", "successes", "trains", "imports")}
        kinds = {A.WorkflowDecl: "workflows", A.EnvDecl: "envs", A.DataDecl: "data", A.PolicyDecl: "policies",
                 A.RoleDecl: "roles", A.FlowDecl: "flows", A.TrainDecl: "trains", A.ImportDecl: "imports"}
        for it in items:
            key = kinds.get(type(it)) or {"team": "teams", "alpha": "alphas", "success": "successes"}[it.kind]
            groups[key].append(it)
        span = self.src.span(0, len(self.src.text))
        return A.Module(self.src.path, **{k: tuple(v) for k, v in groups.items()}, span=span)

    @v_args(meta=True)
    def workflow_decl(self, meta, c):
        return A.WorkflowDecl(self._id(c[0]), c[1], self._s(meta))

    @v_args(meta=True)
    def env_decl(self, meta, c):
        call = None
        if c[1] is not None:
            args, kwargs, span = c[1]
            call = A.Call(self._id(c[0]), args, kwargs, span_between(self._s(c[0]), span))
        return A.EnvDecl(self._id(c[0]), call, self._s(meta))

    @v_args(meta=True)
    def data_decl(self, meta, c):
        if isinstance(c[1], A.StrLit):
            return A.DataDecl(self._id(c[0]), None, c[1], self._s(meta))
        return A.DataDecl(self._id(c[0]), c[1], None, self._s(meta))

    @v_args(meta=True)
    def policy_decl(self, meta, c):
        return A.PolicyDecl(self._id(c[0]), c[1], self._s(meta))

    def _expr_stmt(kind):  # noqa: N805 - a factory for three methods
        @v_args(meta=True)
        def method(self, meta, c):
            return A.ExprStmt(kind, c[0], self._s(meta))

        return method

    team_decl = _expr_stmt("team")
    alpha_decl = _expr_stmt("alpha")
    success_decl = _expr_stmt("success")

    @v_args(meta=True)
    def train_decl(self, meta, c):
        return A.TrainDecl(c[0], self._s(meta))

    @v_args(meta=True)
    def import_decl(self, meta, c):
        return A.ImportDecl(c[0], self._s(meta))

    # roles
    @v_args(meta=True)
    def role_decl(self, meta, c):
        return A.RoleDecl(self._id(c[0]), tuple(c[1:]), self._s(meta))

    @v_args(meta=True)
    def role_policy(self, meta, c):
        return A.RolePolicy(self._id(c[0]), self._s(meta))

    @v_args(meta=True)
    def role_system(self, meta, c):
        return A.RoleSystem(c[0], self._s(meta))

    @v_args(meta=True)
    def role_prompt(self, meta, c):
        return A.RolePrompt(c[0], self._s(meta))

    @v_args(meta=True)
    def role_prompt_file(self, meta, c):
        return A.RolePrompt(c[0], self._s(meta), file=True)

    @v_args(meta=True)
    def role_sample(self, meta, c):
        return A.RoleSample(c[0], self._s(meta))

    @v_args(meta=True)
    def role_parse(self, meta, c):
        return A.RoleParse(self._id(c[0]), c[1], self._s(meta))

    @v_args(meta=True)
    def role_reward(self, meta, c):
        return A.RoleReward(c[0], self._s(meta))

    # flow
    @v_args(meta=True)
    def flow_decl(self, meta, c):
        return A.FlowDecl(tuple(c), self._s(meta))

    @v_args(meta=True)
    def max_turns(self, meta, c):
        return A.MaxTurns(c[0], self._s(meta))

    @v_args(meta=True)
    def edge(self, meta, c):
        nodes = tuple(x for x in c if isinstance(x, A.Node))
        guard = c[-1] if not isinstance(c[-1], (A.Node, Token)) and c[-1] is not None else None
        return A.Edge(nodes, guard, self._s(meta))

    def guard(self, c):
        return c[0]

    @v_args(meta=True)
    def node(self, meta, c):
        return A.Node(tuple(self._id(t) for t in c), self._s(meta))

    # literal blocks
    @v_args(meta=True)
    def block(self, meta, c):
        return A.Block(tuple(c), self._s(meta))

    @v_args(meta=True)
    def entry(self, meta, c):
        return A.Entry(self._id(c[0]), _as_value(c[1]), self._s(meta))

    @v_args(meta=True)
    def list(self, meta, c):
        return A.ListValue(tuple(_as_value(x) for x in c if x is not None), self._s(meta))

    @v_args(meta=True)
    def number(self, meta, c):
        value = _number(str(c[-1]))
        return A.Value(-value if len(c) == 2 else value, self._s(meta))

    @v_args(meta=True)
    def string(self, meta, c):
        tok = c[0]
        if tok.type == "LONG_STRING":
            return A.StrLit(str(tok)[3:-3], self._s(meta), long=True)
        return A.StrLit(unescape(str(tok)[1:-1]), self._s(meta))

    # expressions
    @v_args(meta=True)
    def num(self, meta, c):
        return A.Const(_number(str(c[0])), self._s(meta))

    @v_args(meta=True)
    def str(self, meta, c):
        return A.Const(c[0].value, self._s(meta))

    @v_args(meta=True)
    def true(self, meta, c):
        return A.Const(True, self._s(meta))

    @v_args(meta=True)
    def false(self, meta, c):
        return A.Const(False, self._s(meta))

    @v_args(meta=True)
    def name(self, meta, c):
        return A.Name(str(c[0]), self._s(meta))

    @v_args(meta=True)
    def attr(self, meta, c):
        return A.Attr(self._id(c[0]), self._id(c[1]), self._s(meta))

    @v_args(meta=True)
    def call(self, meta, c):
        args, kwargs, _ = c[1]
        return A.Call(self._id(c[0]), args, kwargs, self._s(meta))

    @v_args(meta=True)
    def call_args(self, meta, c):
        items = [x for x in c if x is not None]
        args = tuple(x for x in items if not isinstance(x, A.Kwarg))
        kwargs = tuple(x for x in items if isinstance(x, A.Kwarg))
        return args, kwargs, self._s(meta)

    @v_args(meta=True)
    def kwarg(self, meta, c):
        return A.Kwarg(self._id(c[0]), c[1], self._s(meta))

    @v_args(meta=True)
    def list_expr(self, meta, c):
        return A.ListExpr(tuple(x for x in c if x is not None), self._s(meta))

    @v_args(meta=True)
    def _binary(self, meta, c, op=None):
        if op is None:
            left, tok, right = c
            return A.BinOp(str(tok), left, right, self._s(meta), self._s(tok))
        return A.BinOp(op, c[0], c[1], self._s(meta), self._s(meta))

    def or_op(self, meta_c):  # pragma: no cover - replaced below
        raise NotImplementedError

    @v_args(meta=True)
    def compare(self, meta, c):
        return A.BinOp(str(c[1]), c[0], c[2], self._s(meta), self._s(c[1]))

    binop = compare

    @v_args(meta=True)
    def or_op(self, meta, c):  # noqa: F811
        return A.BinOp("or", c[0], c[1], self._s(meta), self._s(meta))

    @v_args(meta=True)
    def and_op(self, meta, c):
        return A.BinOp("and", c[0], c[1], self._s(meta), self._s(meta))

    @v_args(meta=True)
    def not_op(self, meta, c):
        return A.Unary("not", c[0], self._s(meta))

    @v_args(meta=True)
    def neg(self, meta, c):
        return A.Unary("-", c[1], self._s(meta))


def _as_value(x) -> A.AnyValue:
    if isinstance(x, (A.Value, A.ListValue, A.Block)):
        return x
    if isinstance(x, A.StrLit):
        return A.Value(x.value, x.span)
    return A.Value(x.value, x.span)  # a Const from `true` / `false`


# ---- syntax errors -----------------------------------------------------------------------

TERMINAL_NAMES = {
    "NAME": "a name", "NUMBER": "a number", "STRING": "a string", "LONG_STRING": "a string",
    "COMP_OP": "a comparison", "$END": "end of file", "_SEMI": "`;`",
}
TOP_KEYWORDS = ("workflow", "env", "data", "policy", "role", "flow", "team", "alpha", "success", "train", "import")

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
    "missing-reward-expr": (
        ["role a { reward }", "team }", "success }", "role a { parse x = }"],
        "missing expression",
        None,
    ),
}


def _scan_braces(text: str, stop: int) -> list[int]:
    """Offsets of the `{` still open at `stop`, skipping strings and comments."""
    stack, i = [], 0
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
            m = re.compile(r"%s(?:[^%s\\\n]|\\.)*%s" % (ch, ch, ch)).match(text, i)
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


def _word_before(text: str, pos: int) -> tuple[str, int]:
    m = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*$", text[:pos])
    return (m.group(1), m.start(1)) if m else ("", pos)


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


def _masked(text: str, blank: str, start: int, end: int) -> str:
    """`text` with everything outside [start, end) blanked, newlines kept (positions unchanged)."""
    return blank[:start] + text[start:end] + blank[end:]


def _later_syntax_errors(text: str, src: SourceFile, first: Diagnostic) -> list[Diagnostic]:
    """Recovery: after the first syntax error, parse each later top-level statement on its own
    (the rest of the text blanked) so every broken statement is reported, one error each."""
    starts = statement_starts(text) + [len(text)]
    blank = re.sub(r"[^\n]", " ", text)
    out = []
    for a, b in zip(starts, starts[1:]):
        if a <= first.span.start:
            continue
        try:
            parser().parse(_masked(text, blank, a, b))
        except UnexpectedInput as exc:
            d = syntax_diagnostic(exc, SourceFile(src.path, _masked(text, blank, a, b)))
            if d.message == "unexpected end of file" and b < len(text):  # the chunk ends, the file does not
                word = re.match(r"\w+", text[b:]).group(0)
                d = dataclasses.replace(d, message=f"unexpected `{word}`", span=src.span(b, b + len(word)))
            out.append(d)
    return out


def parse_text(text: str, path: str = "<string>") -> tuple[A.Module | None, list[Diagnostic]]:
    """Parse `.mas` text into a `Module`, or return its syntax errors (one per broken statement)."""
    src = SourceFile(path, text)
    try:
        tree = parser().parse(text)
    except UnexpectedInput as exc:
        first = syntax_diagnostic(exc, src)
        return None, [first] + _later_syntax_errors(text, src, first)
    try:
        return ToAst(src).transform(tree), []
    except VisitError as exc:  # an AST builder bug, not a user mistake
        raise exc.orig_exc from None
