"""Checked AST -> `Workflow` (an `nx.DiGraph` plus role, policy, data and train specs).

Assumes the module passed `check` without errors; anything else is a bug (`InternalError`).
Spans are copied onto graph nodes and edges so run-time failures can point at `.mas` lines.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
from pathlib import Path
from typing import Any

import networkx as nx

from masdsl.config_schema import DEFAULT_ADVANTAGE
from masdsl.lang import ast as A
from masdsl.lang.check import template_of
from masdsl.lang.check_flow import flow_edges
from masdsl.lang.context import Ctx
from masdsl.lang.exprs import CompiledExpr, called_names, literal, source_of
from masdsl.lang.judge import judge_specs
from masdsl.lang.workflow import DataSpec, ParseSpec, PolicySpec, RoleSpec, Workflow


class InternalError(Exception):
    """The compiler met something the checker should have rejected: a bug in masdsl."""


def _graph(flow: A.FlowDecl, expr) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_node("start", kind="start", roles=(), span=None)
    g.add_node("end", kind="end", roles=(), span=None)
    order: dict[str, int] = {}
    for src, dst, guard, _edge in flow_edges(flow):
        for n in (src, dst):
            if n.key not in g:
                roles = tuple(r.name for r in n.roles)
                g.add_node(n.key, kind="role" if len(roles) == 1 else "group", roles=roles, span=n.span)
        if g.has_edge(src.key, dst.key):
            raise InternalError(f"duplicate edge {src.key} -> {dst.key}")
        g.add_edge(src.key, dst.key, order=order.get(src.key, 0), guard=expr(guard) if guard is not None else None,
                   span=_edge.span)
        order[src.key] = order.get(src.key, 0) + 1
    return g


def _role(c: Ctx, r: A.RoleDecl, expr) -> RoleSpec:
    name = r.name.name
    prompt_item = r.of(A.RolePrompt)[0]
    if prompt_item.file:
        path = c.resolve(prompt_item.text.value)
        prompt = path.read_text(encoding="utf-8", errors="replace")
    else:
        prompt = template_of(prompt_item.text, c.text).text
    system = r.of(A.RoleSystem)
    sample = r.of(A.RoleSample)
    rewards = r.of(A.RoleReward)
    advantage = r.of(A.RoleAdvantage)
    parses = tuple(ParseSpec(p.name.name, expr(p.expr, name), p.span, _empty(c, p.expr)) for p in r.of(A.RoleParse))
    return RoleSpec(
        name=name, policy=r.of(A.RolePolicy)[0].name.name, prompt=prompt,
        system=template_of(system[0].text, c.text).text if system else None,
        sample=A.to_python(sample[0].block) if sample else {}, parses=parses,
        reward=expr(rewards[0].expr, name) if rewards else None, span=r.span, prompt_span=prompt_item.text.span,
        judges=judge_specs(rewards[0].expr, c.text) if rewards else (),
        advantage=advantage[0].name.name if advantage else DEFAULT_ADVANTAGE,
        metrics=tuple((m.name.name, expr(m.expr, name)) for m in r.of(A.RoleMetric)),
    )


def _empty(c: Ctx, node: A.Expr) -> Any:
    """The registered `empty` value of the parser a `parse` expression calls (else None)."""
    spec = c.registry.functions.get(node.func.name) if isinstance(node, A.Call) else None
    return copy.deepcopy(spec.empty) if spec is not None else None


def _policy(p: A.PolicyDecl) -> PolicySpec:
    d = A.to_python(p.block)
    model, lora, frozen = d.pop("model"), d.pop("lora", None), bool(d.pop("frozen", False))
    chat = d.pop("chat_template_kwargs", None)
    lr, every, until = d.pop("lr", None), d.pop("train_every", 1), d.pop("frozen_until", 0)
    return PolicySpec(p.name.name, str(model), lora, frozen, d, p.span, chat_template_kwargs=chat,
                      lr=float(lr) if lr is not None else None, train_every=every, frozen_until=until)


def _data(c: Ctx, d: A.DataDecl) -> DataSpec:
    if d.path is not None:
        return DataSpec(d.split.name, None, (), {}, c.resolve(d.path.value), d.span)
    args = tuple(literal(a) for a in d.call.args)
    kwargs = {k.name.name: literal(k.value) for k in d.call.kwargs}
    return DataSpec(d.split.name, d.call.func.name, args, kwargs, None, d.span, c.base_dir)


def _train_defaults(m: A.Module) -> dict[str, Any]:
    """The run configuration's defaults from the file: the `train { }` block, with the
    `sandbox { }` statement as its `sandbox` section (the checker refuses a key set in both)."""
    train = A.to_python(m.trains[0].block) if m.trains else {}
    if m.sandboxes:
        train["sandbox"] = {**train.get("sandbox", {}), **A.to_python(m.sandboxes[0].block)}
    return train


def build_workflow(c: Ctx, name: str, path: Path | None = None) -> Workflow:
    """Build the `Workflow` of a checked module (`c` is the checker's context)."""
    if any(d.is_error for d in c.diags):
        raise InternalError("build_workflow called on a module with errors")
    m = c.module
    imports = tuple(str(c.resolve(i.path.value)) for i in m.imports)

    functions: set[str] = set()

    def expr(node, role=None):
        names = [n for n in called_names(node) if n in c.registry.functions]
        functions.update(names)
        return CompiledExpr(node, source_of(node, c.text), role, imports,
                            {n: c.registry.functions[n] for n in names})

    flow = m.flows[0]
    turns = [i for i in flow.items if isinstance(i, A.MaxTurns)]
    env = m.envs[0]
    env_args = {k.name.name: literal(k.value) for k in env.call.kwargs} if env.call else {}
    if env.call and env.call.args:
        spec = c.registry.envs[env.name.name]
        bound = inspect.signature(spec.factory).bind_partial(*[literal(a) for a in env.call.args])
        env_args = {**bound.arguments, **env_args}
    wf_decl = m.workflows[0] if m.workflows else None
    graph, roles = _graph(flow, expr), {r.name.name: _role(c, r, expr) for r in m.roles}
    team = expr(m.teams[0].expr) if m.teams else None
    functions.update(j.parse for r in roles.values() for j in r.judges if j.parse in c.registry.functions)
    success = expr(m.successes[0].expr) if m.successes else None
    data = {d.split.name: _data(c, d) for d in m.data}
    return Workflow(
        name=wf_decl.name.name if wf_decl else name,
        description=wf_decl.description.value.strip() if wf_decl and wf_decl.description else "",
        env=env.name.name,
        graph=graph,
        roles=roles,
        policies={p.name.name: _policy(p) for p in m.policies},
        data=data,
        env_args=env_args,
        max_turns=literal(turns[0].expr) if turns else None,
        team=team,
        alpha=float(literal(m.alphas[0].expr)) if m.alphas else 1.0,
        success=success,
        train=_train_defaults(m),
        imports=tuple(Path(i) for i in imports),
        path=path,
        source=c.text,
        file_hash=hashlib.sha256(c.text.encode("utf-8")).hexdigest(),
        registry=c.registry.part(envs=[env.name.name], data_sources=[d.source for d in data.values() if d.source],
                                 functions=functions),
    )
