"""The expression half of the fast parser (`masdsl.lang.fastparse`): `Reader` holds the tokens
and position, makes spans, and reads strings and expressions (guards, rewards, `team`,
`success`, call arguments); `fastparse` reads statements and literal blocks on top of it.

An expression reader returns (node, first token, last token), the tokens of parentheses around
it included: lark's `propagate_positions` gives a parenthesised expression its own span but
its parent the span with the parentheses.

>>> from masdsl.lang.lexer import tokens
>>> text = "(a) + f(x, k=1)"
>>> node, first, last = Reader(text, "w.mas", tokens(text)).expr()
>>> node.op, str(node.span), node.right.kwargs[0].name.name
('+', 'w.mas:1:1', 'k')
"""

from __future__ import annotations

import re
from bisect import bisect_right

from masdsl.lang import ast as A
from masdsl.lang.lexer import number, unescape
from masdsl.lang.workflow import Span

_COMP = frozenset(("==", "!=", "<=", ">=", "<", ">"))
_NL = re.compile("\n")


class Bail(Exception):
    """Not sure: let lark parse (and name the error)."""


class Reader:
    """Tokens of a text and the position in them; the expression grammar of `grammar/mas.lark`."""

    def __init__(self, text: str, path: str, toks: list, start: int = 0, end: int | None = None):
        self.text, self.path, self.toks, self.i = text, path, toks, 0
        first = text.rfind("\n", 0, start) + 1  # the line table covers the lines of text[start:end] only
        self.line0 = text.count("\n", 0, first)
        self.starts = [first] + [m.end() for m in _NL.finditer(text, start, len(text) if end is None else end)]
        self.made: list[Span] = []  # the spans made since the statement began
        self.groups: list[list[Span]] = []  # those of the last flow, by item

    # ---- helpers ----------------------------------------------------------------------------
    def span(self, a: int, b: int) -> Span:
        """The span from the start of token `a` to the end of token `b`."""
        s, e, ls = self.toks[a][2], self.toks[b][3], self.starts
        l0, l1 = bisect_right(ls, s), bisect_right(ls, e)
        sp = Span(self.path, self.line0 + l0, s - ls[l0 - 1] + 1, self.line0 + l1, e - ls[l1 - 1] + 1, s, e)
        self.made.append(sp)
        return sp

    def take(self, kind: str) -> int:
        i = self.i
        if self.toks[i][0] != kind:
            raise Bail
        self.i = i + 1
        return i

    def ident(self) -> A.Ident:
        i = self.take("N")
        return A.Ident(self.toks[i][1], self.span(i, i))

    def at(self, kind: str, value: str | None = None) -> bool:
        t = self.toks[self.i]
        return t[0] == kind and (value is None or t[1] == value)

    def string(self) -> A.StrLit:
        i = self.i
        kind, val = self.toks[i][0], self.toks[i][1]
        if kind == "L":
            self.i = i + 1
            return A.StrLit(val[3:-3], self.span(i, i), long=True)
        if kind != "S":
            raise Bail
        self.i = i + 1
        return A.StrLit(unescape(val[1:-1]), self.span(i, i))

    # ---- expressions: (node, first token, last token), its parentheses' tokens included ------
    def expr(self, op: str = "or") -> tuple:
        """`or` over `and` over `not_expr`, left-associative."""
        left = self.expr("and") if op == "or" else self.not_expr()
        while self.at("N", op):
            self.i += 1
            right = self.expr("and") if op == "or" else self.not_expr()
            sp = self.span(left[1], right[2])
            left = (A.BinOp(op, left[0], right[0], sp, sp), left[1], right[2])
        return left

    def not_expr(self) -> tuple:
        if self.at("N", "not"):
            a = self.i
            self.i += 1
            inner = self.not_expr()
            return A.Unary("not", inner[0], self.span(a, inner[2])), a, inner[2]
        left = self.binary(0)
        if self.toks[self.i][0] in _COMP:
            op = self.i
            self.i += 1
            right = self.binary(0)
            node = A.BinOp(self.toks[op][1], left[0], right[0], self.span(left[1], right[2]), self.span(op, op))
            return node, left[1], right[2]
        return left

    def binary(self, level: int) -> tuple:
        """`arith` (level 0: + -) and `term` (level 1: * / %), left-associative."""
        left = self.binary(1) if level == 0 else self.unary()
        ops = ("+", "-") if level == 0 else ("*", "/", "%")
        while self.toks[self.i][0] in ops:
            op = self.i
            self.i += 1
            right = self.binary(1) if level == 0 else self.unary()
            node = A.BinOp(self.toks[op][1], left[0], right[0], self.span(left[1], right[2]), self.span(op, op))
            left = (node, left[1], right[2])
        return left

    def unary(self) -> tuple:
        if self.at("-"):
            a = self.i
            self.i += 1
            inner = self.unary()
            return A.Unary("-", inner[0], self.span(a, inner[2])), a, inner[2]
        return self.postfix()

    def postfix(self) -> tuple:
        a = self.i
        kind, val = self.toks[a][0], self.toks[a][1]
        if kind == "N":
            if val in ("true", "false"):
                self.i += 1
                return A.Const(val == "true", self.span(a, a)), a, a
            if val == "not":  # a name to lark after `-` or an operator: rare, left to it
                raise Bail
            nxt = self.toks[a + 1][0]
            if nxt == "(":
                func = self.ident()
                args, kwargs, b = self.call_args()
                return A.Call(func, args, kwargs, self.span(a, b)), a, b
            if nxt == ".":
                obj = self.ident()
                self.i += 1
                attr = self.ident()
                return A.Attr(obj, attr, self.span(a, a + 2)), a, a + 2
            self.i += 1
            return A.Name(val, self.span(a, a)), a, a
        if kind == "D":
            self.i += 1
            return A.Const(number(val), self.span(a, a)), a, a
        if kind == "S" or kind == "L":
            s = self.string()
            return A.Const(s.value, s.span), a, a
        if kind == "(":
            self.i += 1
            inner = self.expr()
            b = self.take(")")
            return inner[0], a, b
        if kind != "[":
            raise Bail
        self.i += 1
        items = []
        while not self.at("]"):
            items.append(self.expr()[0])
            if not self.at("]"):
                self.take(",")
        self.i += 1
        return A.ListExpr(tuple(items), self.span(a, self.i - 1)), a, self.i - 1

    def call_args(self) -> tuple:
        """`( args )`: (positional, keyword arguments, index of the `)`)."""
        self.take("(")
        args, kwargs, toks = [], [], self.toks
        while toks[self.i][0] != ")":
            t = toks[self.i]
            if t[0] == "N" and toks[self.i + 1][0] == "=":
                if t[1] in ("not", "true", "false"):
                    raise Bail
                k = self.i
                name = self.ident()
                self.i += 1
                v = self.expr()
                kwargs.append(A.Kwarg(name, v[0], self.span(k, v[2])))
            else:
                args.append(self.expr()[0])
            if toks[self.i][0] != ")":
                self.take(",")
        self.i += 1
        return tuple(args), tuple(kwargs), self.i - 1
