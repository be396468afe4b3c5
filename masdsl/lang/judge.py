"""`judge(POLICY, \"\"\"template\"\"\", ...)`: a frozen policy of the workflow scores a role's reply.

Written in a role's `reward` (alone or as a term: `reward 0.5 * judge(critic, "...") + ok`). The
template is a Jinja2 prompt with the variables of a role prompt (docs/language.md, "Prompts")
plus `output` (the candidate's reply) and the role's own fields as bare names; the judge's
reply is turned into a number by `parse`; a reply that does not parse scores `default`.

The checker rule `check_judges` refuses, each at its `.mas` position: a judge outside a role's
`reward` (`judge-outside-reward`), an undeclared policy (`unknown-policy`), a policy the run
would train (`trainable-judge`: a policy is trained when it is not `frozen` and a role uses it,
the run plan's rule), a template that is not a string literal or a bad option (`invalid-value`,
`wrong-arity`), a `parse` that is not a parser (`unknown-parser`), and the template's mistakes
as a prompt's (`template-syntax`, `unknown-variable`, `unknown-field`). The compiler turns each
call into a `JudgeSpec` (`judge_specs`), which `masdsl.runtime.judge` samples and scores.

>>> from masdsl.lang.parse import parse_text
>>> m, _ = parse_text('role a { reward 1 + judge(p, "Rate {{ output }}", default=-1) }', "w.mas")
>>> [c.func.name for c in judge_calls(m.roles[0].items[0].expr)]
['judge']
>>> score_of("The score is \\\\boxed{7}.", "auto"), score_of("7 of 10", "auto"), score_of("no idea", "number")
(7.0, 7.0, None)

A reply that restates an equation (`1 + 6 = 7`) is not read as its score under `auto`: a labelled
score (`Score: 9`) wins, else the first number outside the equation; `number` takes the first
number whatever it is, and `restated` names the equation it came from (the run warns):

>>> score_of("1 + 6 = 7. Score: 9", "auto"), score_of("1 + 6 = 7, so 8", "auto"), score_of("1 + 6 = 7", "auto")
(9.0, 8.0, None)
>>> score_of("1 + 6 = 7", "number"), restated("1 + 6 = 7", 1.0, "number"), restated("1 + 6 = 7", None, "auto")
(1.0, '1 + 6 = 7', '1 + 6 = 7')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from masdsl.errors import did_you_mean
from masdsl.lang import ast as A
from masdsl.lang import templates as T
from masdsl.lang.context import Ctx, ticks
from masdsl.lang.exprs import NotLiteral, literal, subexpressions
from masdsl.lang.workflow import Span

JUDGE = "judge"
# option -> (default, what its value must be); the judge samples greedily, briefly, by default
OPTIONS: dict[str, tuple[Any, str]] = {
    "parse": ("auto", 'a string: "auto", "number" or a registered parser\'s name'),
    "default": (0.0, "a number (the reward of a reply that does not parse)"),
    "max_tokens": (32, "a whole number of at least 1"),
    "temperature": (0.0, "a number of at least 0 (0: greedy)"),
}
SCORE_PARSES = ("auto", "number")  # built in; any registered parser (`boxed`, ...) too
SIGNATURE = 'judge(policy, "template", parse="auto", default=0, max_tokens=32, temperature=0) -> number'
DOC = ("A frozen policy of the workflow scores this role's reply: the template (a Jinja2 prompt: `output`, the "
       "role's fields, `task`, `env`, `turn`, `history`, role names) is sent to the policy, and its reply is read "
       "as a number by `parse` (`auto`: the first `\\boxed{}` that holds a number, else the last labelled "
       "score such as `Score: 7`, else the first number outside a restated equation such as `1 + 6 = 7`; "
       "`number`: the first number; or a registered parser such as `boxed`). A reply that does not parse scores "
       "`default` and is counted in `judge/unparsed`; a score read from a restated equation is counted in "
       "`judge/restated` and warned about. All judge prompts of a tick go to the policy's engine in "
       "one batch; their tokens and time are `judge/tokens` and `time/judge_s`.")
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
_BOXED = re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}")
# `Score: 7`, `score = 7`, `rating is 8/10`, `Grade 3`, `**Score**: 7`: a number the judge labelled as its answer
_LABELLED = re.compile(r"\b(?:score|rating|grade)\b\**\s*(?::|=|is|of)?\s*\**\s*([-+]?(?:\d+\.\d*|\.\d+|\d+))", re.I)
# a restated equation, `1 + 6 = 7` or `2*3=6`: operands, at least one operator, then `=` and a result.
# An operator is needed: `8/10 = 0.8` counts, a bare `8/10` (a score out of 10) or `7-8` (a range) does not
_UNSIGNED = r"(?:\d+(?:\.\d+)?|\.\d+)"
_EQUATION = re.compile(rf"{_UNSIGNED}(?:\s*[-+*/×÷^x]\s*{_UNSIGNED})+\s*=\s*[-+]?{_UNSIGNED}")


@dataclass(frozen=True)
class JudgeSpec:
    """One `judge(...)` call of a role's reward, compiled."""

    key: int  # the call's offset in the `.mas` text: its score is `EvalContext.judged[key]`
    policy: str
    template: str  # Jinja2 source (dedented as a `\"\"\"` prompt is)
    parse: str = "auto"
    default: float = 0.0
    max_tokens: int = 32
    temperature: float = 0.0
    span: Span | None = None


def judge_calls(node: Any) -> Iterator[A.Call]:
    """Every `judge(...)` call in an expression, outermost first."""
    return (n for n in subexpressions(node) if isinstance(n, A.Call) and n.func.name == JUDGE)


def _number(text: str) -> float | None:
    m = _NUMBER.search(text)
    return float(m.group()) if m else None


def _equations(reply: str) -> list[re.Match[str]]:
    return list(_EQUATION.finditer(reply))


def _auto(reply: str) -> float | None:
    """`parse="auto"`: a `\\boxed{}` number, else the last labelled score, else the first number
    outside every restated equation."""
    for inner in _BOXED.findall(reply):
        value = _number(inner)
        if value is not None:
            return value
    labelled = _LABELLED.findall(reply)
    if labelled:
        return float(labelled[-1])
    spans = [m.span() for m in _equations(reply)]
    for m in _NUMBER.finditer(reply):
        if not any(a <= m.start() < b for a, b in spans):
            return float(m.group())
    return None


def restated(reply: str, value: float | None, parse: str) -> str | None:
    """The restated equation of `reply` that its score came from, or (under `auto`, when no boxed
    or labelled score decided) whose numbers were passed over; None when the reply restates none
    or its score did not come from one (`number` reads an operand of `1 + 6 = 7`: 1; a parser's
    value counts as read from the equation when the reply holds it nowhere else)."""
    equations = _equations(reply)
    if not equations:
        return None
    if parse == "auto":
        if any(_number(inner) is not None for inner in _BOXED.findall(reply)) or _LABELLED.search(reply):
            return None  # a boxed or labelled score: the equation played no part
        hit = equations[:1]
    elif parse == "number":
        first = _NUMBER.search(reply)
        hit = [m for m in equations if first is not None and m.start() <= first.start() < m.end()]
    else:
        outside = {float(n.group()) for n in _NUMBER.finditer(reply)
                   if not any(m.start() <= n.start() < m.end() for m in equations)}
        hit = [] if value is None or value in outside else \
            [m for m in equations if value in {float(n) for n in re.findall(_UNSIGNED, m.group())}]
    return " ".join(hit[0].group().split()) if hit else None


def score_of(reply: str, parse: str, parser: Any = None) -> float | None:
    """The judge's score in `reply`, or None when it does not parse. `parser`: the registered
    parser's function when `parse` names one (its value read as a number: a bool counts 1/0)."""
    if parse == "auto":
        return _auto(reply)
    if parse == "number":
        return _number(reply)
    try:
        value = parser(reply)
    except Exception:  # noqa: BLE001 - a parser that raises has not parsed the reply
        return None
    if value is None or isinstance(value, (list, dict)):
        return None
    if isinstance(value, (bool, int, float)):
        return float(value)
    return _number(str(value)) if _NUMBER.fullmatch(str(value).strip()) else None


# ---- the checker ---------------------------------------------------------------------------

def _misplaced(c: Ctx) -> Iterator[tuple[A.Call, str]]:
    """Judge calls anywhere but a role's `reward`, with where they are."""
    for r in c.module.roles:
        for item in r.items:
            if not isinstance(item, A.RoleReward):
                line = f"role `{r.name.name}`'s `{type(item).__name__[4:].lower()}` line"
                yield from ((call, line) for call in judge_calls(getattr(item, "expr", None)))
    for kind, stmts in (("`team`", c.module.teams), ("`success`", c.module.successes), ("`alpha`", c.module.alphas)):
        for s in stmts:
            yield from ((call, kind) for call in judge_calls(s.expr))
    for f in c.module.flows:
        for item in f.items:
            expr = item.guard if isinstance(item, A.Edge) else item.expr
            yield from ((call, "a flow guard") for call in judge_calls(expr))


def check_judges(c: Ctx) -> None:
    """Every `judge(...)`: in a role's `reward`, naming a frozen policy, with a checked template
    and known options."""
    for call, where in _misplaced(c):
        c.error("judge-outside-reward", f"`judge` is used in {where}", call.func.span, label="not a role's reward",
                notes=("a judge scores one role's reply, so it may only appear in that role's `reward`",),
                help="move it into the `reward` of the role whose reply it scores")
    for role, r in c.roles.items():
        for rw in r.of(A.RoleReward):
            for call in judge_calls(rw.expr):
                _check_call(c, role, call)


def _check_call(c: Ctx, role: str, call: A.Call) -> None:
    if len(call.args) != 2:
        c.error("wrong-arity", f"`judge` takes 2 positional arguments (a policy and a template), got {len(call.args)}",
                call.span, label="expected judge(POLICY, \"template\", ...)", notes=(f"signature: {SIGNATURE}",))
        return
    _check_policy(c, call.args[0])
    _check_template(c, role, call.args[1])
    for k in call.kwargs:
        _check_option(c, k)


def _check_policy(c: Ctx, node: A.Expr) -> None:
    policies = {p.name.name: p for p in c.module.policies}
    if not isinstance(node, A.Name):
        c.error("invalid-value", "the first argument of `judge` must be a policy name", node.span,
                label="not a name", help=f"for example `judge({next(iter(policies), 'critic')}, \"...\")`")
        return
    decl = policies.get(node.name)
    if decl is None:
        c.error("unknown-policy", f"`judge` uses unknown policy `{node.name}`", node.span, label="not a declared policy",
                notes=(f"policies: {ticks(policies)}",),
                help=did_you_mean(node.name, policies) or f'declare it: `policy {node.name} {{ model: "...", frozen: true }}`')
        return
    frozen = decl.block.get("frozen")
    if frozen is not None and isinstance(frozen.value, A.Value) and frozen.value.value is True:
        return
    users = [(r, i) for r in c.module.roles for i in r.of(A.RolePolicy) if i.name.name == node.name]
    if users:
        r, item = users[0]
        c.error("trainable-judge", f"the judge policy `{node.name}` is trained: role `{r.name.name}` uses it and it is not frozen",
                node.span, label="a judge must not change while it scores",
                related=((item.name.span, f"role `{r.name.name}` trains it here"), (decl.name.span, "declared here")),
                help=f"add `frozen: true` to policy `{node.name}`, or judge with a policy of its own that no role uses")


def _check_template(c: Ctx, role: str, node: A.Expr) -> None:
    if not (isinstance(node, A.Const) and isinstance(node.value, str)):
        c.error("invalid-value", "the template of `judge` must be a string literal", node.span,
                label="not a string", help='write the prompt in quotes: `"""Rate: {{ output }}"""`')
        return
    fields: dict[str, set[str] | None] = {"task": c.task_fields, "env": c.env_fields, "turn": None, "role": None,
                                          "history": None}
    for name, f in c.role_fields.items():
        fields.setdefault(name, set(f))
    for name in c.role_fields.get(role, {}):
        fields.setdefault(name, None)  # the role's own fields, bare; `output` is the reply judged
    c.diags += T.check_template(template_text(node, c.text), node.span.file, fields, c.text,
                                what=f"judge template of `{role}`")


def _check_option(c: Ctx, k: A.Kwarg) -> None:
    name = k.name.name
    if name not in OPTIONS:
        c.error("wrong-arity", f"`judge` has no option `{name}`", k.name.span, label="unknown option",
                notes=(f"options: {ticks(OPTIONS)}",), help=did_you_mean(name, OPTIONS))
        return
    try:
        value = literal(k.value)
    except NotLiteral:
        value = None
    if not _valid(name, value):
        c.error("invalid-value", f"`{name}` of `judge` must be {OPTIONS[name][1]}", k.value.span,
                label="not a literal" if value is None else f"got {value!r}")
    elif name == "parse" and value not in SCORE_PARSES:
        spec = c.registry.functions.get(value)
        if (spec is None or spec.kind != "parser") and not c.unknown_excused(value, "parser"):
            parsers = sorted(n for n, s in c.registry.functions.items() if s.kind == "parser")
            c.error("unknown-parser", f"`parse=\"{value}\"` of `judge` is not a parser", k.value.span,
                    label="not a registered parser", notes=(f"score parsers: {ticks(SCORE_PARSES)}, or {ticks(parsers)}",),
                    help=did_you_mean(value, [*SCORE_PARSES, *parsers], fmt='`parse="{}"`'))


def _valid(name: str, value: Any) -> bool:
    if name == "parse":
        return isinstance(value, str)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if name == "max_tokens":
        return isinstance(value, int) and value >= 1
    return name == "default" or value >= 0


def template_text(node: A.Const, text: str) -> T.TemplateText:
    """The template of a judge's string literal, with its line map (as a role prompt's)."""
    raw = text[node.span.start : node.span.end]
    if raw.startswith('"""'):
        return T.prompt_text(raw, node.span.start)
    return T.TemplateText(node.value, (node.span.start + 1,) * (node.value.count("\n") + 1))


# ---- the compiler and the run plan -----------------------------------------------------------

def judge_specs(expr: A.Expr | None, text: str) -> tuple[JudgeSpec, ...]:
    """The `JudgeSpec` of each judge call of a checked reward expression."""
    out = []
    for call in judge_calls(expr):
        opts = {k.name.name: literal(k.value) for k in call.kwargs}
        out.append(JudgeSpec(call.span.start, call.args[0].name, template_text(call.args[1], text).text,
                             str(opts.get("parse", "auto")), float(opts.get("default", 0.0)),
                             int(opts.get("max_tokens", 32)), float(opts.get("temperature", 0.0)), call.span))
    return tuple(out)


def judge_problems(roles: Mapping[str, Any], policies: Mapping[str, Any]) -> list[str]:
    """What the run plan refuses once the overrides apply (`policy.P.frozen=false`): a judge
    policy that a role trains. `roles`: the workflow's `RoleSpec`s, `policies`: the effective specs."""
    out = []
    for role in roles.values():
        for j in getattr(role, "judges", ()):
            spec = policies.get(j.policy)
            users = [r.name for r in roles.values() if r.policy == j.policy]
            if spec is not None and not spec.frozen and users:
                out.append(f"{j.span}: the judge policy `{j.policy}` of role `{role.name}` would be trained (role "
                           f"{', '.join(f'`{u}`' for u in users)} uses it and it is not frozen): keep `frozen: true`")
    return out
