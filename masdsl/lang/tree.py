"""The lark path of the parser: lark's tree -> AST, and lark's syntax errors as diagnostics.

`masdsl.lang.parse.parse_text` comes here only when the fast parser (`masdsl.lang.fastparse`)
declines a text, which is mostly text with a syntax error: lark's LALR parser
(`masdsl.lang.grammar.parser()`) parses it and `masdsl.lang.syntax` names the mistake.
`ToAst` builds AST nodes and never judges them: every rule about meaning lives in
`masdsl.lang.check`.

>>> module, diags = parse_lark('role a { policy p prompt "hi" }', "w.mas")
>>> module.roles[0].name.name, diags
('a', [])
>>> _, diags = parse_lark("flow { a => b }", "w.mas")
>>> print(diags[0].message, diags[0].span)
`=>` is not an arrow; flow edges use `->` w.mas:1:10
"""

from __future__ import annotations

from lark import Token, Transformer, v_args
from lark.exceptions import UnexpectedInput, VisitError

from masdsl.lang import ast as A
from masdsl.lang.errors import Diagnostic
from masdsl.lang.grammar import parser
from masdsl.lang.lexer import number as _number, unescape
from masdsl.lang.source import SourceFile, Span, span_between
from masdsl.lang.syntax import later_syntax_errors, syntax_diagnostic


# ---- tree -> AST -------------------------------------------------------------------------

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
                                                 "teams", "alphas", "successes", "trains", "imports", "sandboxes")}
        kinds = {A.WorkflowDecl: "workflows", A.EnvDecl: "envs", A.DataDecl: "data", A.PolicyDecl: "policies",
                 A.RoleDecl: "roles", A.FlowDecl: "flows", A.TrainDecl: "trains", A.ImportDecl: "imports",
                 A.SandboxDecl: "sandboxes"}
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
    def sandbox_decl(self, meta, c):
        return A.SandboxDecl(c[0], self._s(meta))

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

    @v_args(meta=True)
    def role_advantage(self, meta, c):
        return A.RoleAdvantage(self._id(c[0]), self._s(meta))

    @v_args(meta=True)
    def role_metric(self, meta, c):
        return A.RoleMetric(self._id(c[0]), c[1], self._s(meta))

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


def parse_lark(text: str, path: str = "<string>") -> tuple[A.Module | None, list[Diagnostic]]:
    """Parse with lark: the `Module`, or the syntax errors (one per broken statement)."""
    src = SourceFile(path, text)
    try:
        tree = parser().parse(text)
    except UnexpectedInput as exc:
        first = syntax_diagnostic(exc, src)
        return None, [first] + later_syntax_errors(text, src, first)
    try:
        return ToAst(src).transform(tree), []
    except VisitError as exc:  # an AST builder bug, not a user mistake
        raise exc.orig_exc from None
