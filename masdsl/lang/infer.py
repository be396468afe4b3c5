"""Names and types of expressions, for the checker: `infer(ctx, node, scope) -> type`.

Types are the registry's value types: "bool", "number", "str", "list", "any". A name or call
that is wrong appends a diagnostic and gives "any", so one mistake is reported once.

>>> from masdsl.lang.parse import parse_text
>>> from masdsl.lang.context import Ctx
>>> from masdsl.envs.registry import Registry
>>> module, _ = parse_text("team turn + 1 > 2 and task.x", "w.mas")
>>> c = Ctx(module, "", None, Registry())
>>> infer(c, module.teams[0].expr, Scope()), c.diags
('bool', [])
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from masdsl.lang import ast as A
from masdsl.lang.context import bind
from masdsl.errors import did_you_mean

NUMBER, BOOL, STR, LIST, ANY = "number", "bool", "str", "list", "any"
_NUMERIC = {NUMBER, BOOL, ANY}


@dataclass(frozen=True)
class Scope:
    role: str | None = None  # the role whose `reward` / `parse` this is: bare fields allowed
    in_parse: bool = False  # inside `parse`: `output` is the raw completion


def infer(c, node: A.Expr, scope: Scope) -> str:
    if isinstance(node, A.Const):
        v = node.value
        return BOOL if isinstance(v, bool) else NUMBER if isinstance(v, (int, float)) else STR
    if isinstance(node, A.ListExpr):
        for item in node.items:
            infer(c, item, scope)
        return LIST
    if isinstance(node, A.Name):
        return _name(c, node, scope)
    if isinstance(node, A.Attr):
        return _attr(c, node)
    if isinstance(node, A.Call):
        return _call(c, node, scope)
    if isinstance(node, A.Unary):
        t = infer(c, node.operand, scope)
        if node.op == "not":
            return BOOL
        if t not in _NUMERIC:
            c.error("type-mismatch", f"`-` needs a number, not a {t}", node.span)
        return NUMBER
    return _binop(c, node, scope)


def _name(c, node: A.Name, scope: Scope) -> str:
    n = node.name
    if n == "turn":
        return NUMBER
    fields = c.role_fields.get(scope.role, {}) if scope.role else {}
    if n == "output" and (scope.in_parse or scope.role):
        return STR
    if n in fields:
        return fields[n]
    if n in c.roles:
        c.error("unknown-name", f"role `{n}` is not a value", node.span, label="a role, not a field",
                help=f"name one of its fields, for example `{n}.output`")
        return ANY
    if n in ("task", "env"):
        c.error("unknown-name", f"`{n}` is not a value", node.span, help=f"read one of its fields: `{n}.NAME`")
        return ANY
    known = ["turn"] + (list(fields) if scope.role else [])
    where = f"in role `{scope.role}`" if scope.role else "here"
    c.error("unknown-name", f"unknown name `{n}`", node.span, label=f"not defined {where}",
            notes=(("bare names are `turn` and the role's own fields: " + ", ".join(f"`{k}`" for k in known))
                   if scope.role else "outside a role, read fields as `ROLE.FIELD`, `task.x` or `env.x`",),
            help=did_you_mean(n, known + list(c.roles)))
    return ANY


def _attr(c, node: A.Attr) -> str:
    obj, key = node.obj.name, node.attr.name
    if obj == "task" or obj == "env":
        known = c.task_fields if obj == "task" else c.env_fields
        if known is not None and key not in known:
            src = "rows of the workflow's data" if obj == "task" else f"environment `{c.env_name}`"
            c.error("unknown-field", f"`{obj}` has no field `{key}`", node.attr.span, label=f"not a field of {src}",
                    notes=(f"fields of `{obj}`: " + ", ".join(f"`{k}`" for k in sorted(known)),),
                    help=did_you_mean(key, known, fmt=f"`{obj}.{{}}`"))
        return ANY
    if obj not in c.roles:
        c.error("unknown-role", f"unknown role `{obj}`", node.obj.span, label="not a declared role",
                help=did_you_mean(obj, list(c.roles) + ["task", "env"]))
        return ANY
    fields = c.role_fields.get(obj, {})
    if key not in fields:
        c.error("unknown-field", f"role `{obj}` has no field `{key}`", node.attr.span,
                label=f"`{obj}` has no `parse {key} = ...`",
                notes=(f"fields of `{obj}`: " + ", ".join(f"`{k}`" for k in fields),),
                help=did_you_mean(key, fields, fmt=f"`{obj}.{{}}`"))
        return ANY
    return fields[key]


def _call(c, node: A.Call, scope: Scope) -> str:
    if node.func.name == "judge":  # the language's own (masdsl.lang.judge): its arguments are checked there
        return NUMBER
    for a in node.args:
        infer(c, a, scope)
    for k in node.kwargs:
        infer(c, k.value, scope)
    name = node.func.name
    spec = c.registry.functions.get(name)
    if spec is None:
        if c.unknown_excused(name, "function"):
            return ANY
        c.error("unknown-function", f"unknown function `{name}`", node.func.span, label="not a registered function",
                help=did_you_mean(name, c.registry.functions))
        return ANY
    envs = tuple(getattr(spec, "envs", ()) or ()) or ((spec.env,) if spec.env else ())
    if envs and c.env_name is not None and c.env_name not in envs and c.served_env not in (*envs, "*"):
        which = " or ".join(f"`{e}`" for e in envs)
        c.error("wrong-env", f"`{name}` reads the state of environment {which}, but this workflow uses `{c.env_name}`",
                node.func.span, label=f"needs `env {envs[0]}`" + (" (or another listed env)" if len(envs) > 1 else ""))
    why = bind(spec.fn, len(node.args), [k.name.name for k in node.kwargs], skip=1 if spec.env else 0)
    if why:
        lo, hi = spec.min_args, spec.max_args
        want = f"{lo}" if lo == hi else f"{lo} to {hi}" if hi is not None else f"at least {lo}"
        c.error("wrong-arity", f"`{name}` takes {want} argument{'s' if hi != 1 else ''}, got {len(node.args) + len(node.kwargs)}",
                node.span, label=why, help=_state_help(spec, c.env_name))
    return spec.returns


def _state_help(spec, env_name: str | None) -> str | None:
    """For a function whose first parameter is `state` but that was registered without `env=`:
    how to register it so that the runtime passes the env's state (else None)."""
    if spec.env or env_name is None:
        return None
    try:
        first = next(iter(inspect.signature(spec.fn).parameters), None)
    except (TypeError, ValueError):  # a builtin without a signature
        return None
    if first != "state":
        return None
    return (f"a function that reads the env's state is registered with `@function(\"{spec.name}\", "
            f"env=\"{env_name}\")`: the runtime then passes the state first, and the `.mas` file leaves it out")


def _binop(c, node: A.BinOp, scope: Scope) -> str:
    lt, rt = infer(c, node.left, scope), infer(c, node.right, scope)
    op = node.op
    if op in ("and", "or", "==", "!="):
        return BOOL
    if op in ("<", "<=", ">", ">="):
        if not (lt in _NUMERIC and rt in _NUMERIC or ANY in (lt, rt) or lt == rt == STR):
            c.error("type-mismatch", f"`{op}` cannot compare a {lt} with a {rt}", node.op_span)
        return BOOL
    if op == "+" and lt == rt and lt in (STR, LIST):
        return lt
    if lt not in _NUMERIC or rt not in _NUMERIC:
        bad = node.left if lt not in _NUMERIC else node.right
        c.error("type-mismatch", f"`{op}` needs numbers, not a {lt if bad is node.left else rt}", bad.span)
        return ANY
    return ANY if ANY in (lt, rt) else NUMBER
