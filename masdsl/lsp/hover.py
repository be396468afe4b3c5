"""Hover: a role's policy, fields and sampling; a policy's block; a parse field's parser; a
registered function's signature and doc; a template variable's meaning; a block key's type."""

from __future__ import annotations

import dataclasses
import inspect

from masdsl.config import Config
from masdsl.config_schema import ADVANTAGES
from masdsl.lang import ast as A
from masdsl.lang.check_roles import POLICY_KEYS, SAMPLE_KEYS
from masdsl.lang.judge import DOC as JUDGE_DOC
from masdsl.lang.judge import JUDGE
from masdsl.lang.judge import SIGNATURE as JUDGE_SIGNATURE
from masdsl.lsp.index import Index, Occ
from masdsl.lsp.state import DocState

MEANINGS = {
    "task": "the current task: one row of the workflow's data (`data train ...`)",
    "env": "the environment's view of its state (`Env.view`); fields come from the `env` declaration",
    "turn": "the turn number, from 0",
    "role": "the name of the role whose prompt is being rendered",
    "history": "the list of earlier outputs of this episode",
    "output": "the raw text the role generated (inside `parse`)",
}


def _block(text: str, block: A.Block) -> str:
    return text[block.span.start : block.span.end]


def signature(spec) -> str:
    """`name(a, b=1) -> number`, without the env's state parameter of env-bound functions."""
    try:
        params = list(inspect.signature(spec.fn).parameters.values())
    except (TypeError, ValueError):
        return f"{spec.name}(...)"
    if spec.env:
        params = params[1:]
    return f"{spec.name}({', '.join(str(p) for p in params)}) -> {spec.returns}"


def function_doc(spec) -> str:
    where = f" (env `{', '.join(spec.envs or (spec.env,))}` only)" if spec.env else ""
    return f"```python\n{signature(spec)}\n```\nregistered {spec.kind}{where}\n\n{spec.doc}".rstrip()


def role_doc(state: DocState, name: str) -> str:
    r = state.roles().get(name)
    if r is None:
        return f"role `{name}`"
    pol = next((p.name.name for p in r.of(A.RolePolicy)), None)
    lines = [f"**role `{name}`**", f"- policy `{pol}`" + (f": `{_block(state.text, state.policies()[pol].block)}`"
                                                          if pol in state.policies() else "")]
    for p in r.of(A.RoleParse):
        lines.append(f"- field `{name}.{p.name.name}` = `{state.text[p.expr.span.start:p.expr.span.end]}`")
    lines.append(f"- field `{name}.output` (the raw completion), `{name}.ok` (every parse succeeded)")
    for s in r.of(A.RoleSample):
        lines.append(f"- sample `{_block(state.text, s.block)}`")
    for rw in r.of(A.RoleReward):
        lines.append(f"- reward `{state.text[rw.expr.span.start:rw.expr.span.end]}`")
    for m in r.of(A.RoleMetric):
        lines.append(f"- metric `{m.name.name}` = `{state.text[m.expr.span.start:m.expr.span.end]}` (measured, not rewarded)")
    adv = next((a.name.name for a in r.of(A.RoleAdvantage)), "grpo")
    lines.append(f"- advantage `{adv}`: {ADVANTAGES.get(adv, 'not an estimator')}")
    return "\n".join(lines)


def _key_doc(o: Occ) -> str:
    if o.owner == "sample":
        return f"`sample` option `{o.name}`: {SAMPLE_KEYS.get(o.name, 'not a sample option')}"
    if o.owner and o.owner.startswith("policy"):
        return f"policy key `{o.name}`: {POLICY_KEYS.get(o.name, 'passed to the engine as an option')}"
    section = o.owner.split(".", 1)[1] if o.owner and "." in o.owner else "train"
    fields = {f.name: f for f in dataclasses.fields(Config)}
    schema = fields.get(section)
    if schema is not None and dataclasses.is_dataclass(schema.default_factory):
        f = {x.name: x for x in dataclasses.fields(schema.default_factory)}.get(o.name)
        if f is not None:
            default = f.default if f.default is not dataclasses.MISSING else "..."
            return f"`{section}.{o.name}`: {getattr(f.type, '__name__', f.type)} (default `{default}`)"
    return f"`{section}.{o.name}`"


def hover_text(state: DocState, index: Index, offset: int) -> tuple[str, Occ] | None:
    o = index.at(offset)
    if o is None:
        return None
    if o.kind == "role":
        return role_doc(state, o.name), o
    if o.kind == "policy":
        p = state.policies().get(o.name)
        users = [n for n, r in state.roles().items() if any(x.name.name == o.name for x in r.of(A.RolePolicy))]
        body = f"`{_block(state.text, p.block)}`" if p else "not declared"
        return f"**policy `{o.name}`** {body}\n\nused by: {', '.join(f'`{u}`' for u in users) or 'no role'}", o
    if o.kind == "field":
        decl = index.decl("field", o.name, o.owner)
        if decl is None:
            return f"field `{o.owner}.{o.name}`: " + ("the raw completion" if o.name == "output" else "whether every parse succeeded"), o
        expr = decl.node.expr
        text = f"field `{o.owner}.{o.name}` = `{state.text[expr.span.start:expr.span.end]}`"
        spec = state.registry.functions.get(expr.func.name) if isinstance(expr, A.Call) else None
        return text + (f"\n\n{function_doc(spec)}" if spec else ""), o
    if o.kind == "function" and o.name == JUDGE:  # the language's own, not a registered function
        return f"```\n{JUDGE_SIGNATURE}\n```\n{JUDGE_DOC}", o
    if o.kind in ("function", "data-source", "env"):
        reg = state.registry
        spec = {"function": reg.functions, "data-source": reg.data_sources, "env": reg.envs}[o.kind].get(o.name)
        if spec is None:
            return f"`{o.name}`: not registered", o
        if o.kind == "function":
            return function_doc(spec), o
        fields = ", ".join(f"`{f}`" for f in spec.fields) or "any"
        return f"**{o.kind} `{o.name}`** (fields: {fields})\n\n{spec.doc}".rstrip(), o
    if o.kind == "variable":
        return f"`{o.name}`: {MEANINGS.get(o.name, '')}", o
    if o.kind == "estimator":
        return f"advantage estimator `{o.name}`: {ADVANTAGES.get(o.name, 'not an estimator')}", o
    if o.kind in ("task-field", "env-field"):
        return f"`{o.owner}.{o.name}`: a field of {MEANINGS[o.owner].split(':')[0]}", o
    return _key_doc(o), o
