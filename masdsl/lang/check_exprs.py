"""Checker rules for expressions: `parse` calls, rewards, `team`, `success`, `alpha`."""

from __future__ import annotations

from masdsl.lang import ast as A
from masdsl.lang.context import Ctx, expect as _expect, ticks as _ticks
from masdsl.errors import did_you_mean
from masdsl.lang.exprs import NotLiteral, literal
from masdsl.lang.infer import Scope, infer


def check_parses(c: Ctx) -> None:
    """`parse FIELD = parser(args)`: a registered parser; the field takes the parser's type."""
    parsers = c.registry.parsers()
    for name, r in c.roles.items():
        for p in r.of(A.RoleParse):
            e = p.expr
            if not isinstance(e, A.Call):
                c.error("unknown-parser", "`parse` needs a parser call", e.span, label="not a call",
                        help="for example `parse code = code_block(output, \"python\")`")
                continue
            spec = c.registry.functions.get(e.func.name)
            if spec is None and c.unknown_excused(e.func.name, "parser"):
                continue
            if spec is None or spec.kind != "parser":
                what = "a function, not a parser" if spec else "not a registered parser"
                c.error("unknown-parser", f"unknown parser `{e.func.name}`", e.func.span, label=what,
                        notes=(f"parsers: {_ticks(parsers)}",), help=did_you_mean(e.func.name, parsers))
                continue
            infer(c, e, Scope(role=name, in_parse=True))
            if p.name.name in c.role_fields[name]:
                c.role_fields[name][p.name.name] = spec.returns


def check_exprs(c: Ctx) -> None:
    """Rewards, metrics and `team` are numbers; `success` a bool or number; `alpha` a literal in [0, 10]."""
    for name, r in c.roles.items():
        for rw in r.of(A.RoleReward):
            _expect(c, rw.expr, infer(c, rw.expr, Scope(role=name)), {"number", "bool"}, "a reward")
        for m in r.of(A.RoleMetric):
            _expect(c, m.expr, infer(c, m.expr, Scope(role=name)), {"number", "bool"}, f"metric `{m.name.name}`")
    for t in c.module.teams:
        _expect(c, t.expr, infer(c, t.expr, Scope()), {"number", "bool"}, "`team`")
    for s in c.module.successes:
        _expect(c, s.expr, infer(c, s.expr, Scope()), {"number", "bool"}, "`success`")
    for a in c.module.alphas:
        try:
            value = literal(a.expr)
        except NotLiteral:
            value = None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            c.error("invalid-value", "`alpha` must be a number", a.expr.span, label="not a number literal")
        elif not 0 <= value <= 10:
            c.error("invalid-value", f"`alpha` must be between 0 and 10, got {value}", a.expr.span,
                    label="out of range", notes=("reward = alpha * team + local",))
