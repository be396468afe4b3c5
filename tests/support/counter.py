"""A tiny counter env, hand-built workflows and replay files for the runtime tests (their
conftest's `h` fixture hands them this module).

`CounterEnv` state is an immutable tuple (total, log); a role's parsed `n` is added to the
total and (role, n) appended to the log, so tests can see exactly which moves were applied,
in which order, to which state.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import networkx as nx

from masdsl.config import resolve_config
from masdsl.lang.workflow import EvalContext, ParseSpec, PolicySpec, RoleSpec, Span, Workflow

SPAN = Span("t.mas", 7, 3, 7, 9, 0, 0)


@dataclass
class PyExpr:
    """A test expression: `fn(ctx)` with a source text and a span, like a compiled Expr."""

    source: str
    fn: Callable[[EvalContext], Any]
    span: Span = SPAN

    def evaluate(self, ctx: EvalContext) -> Any:
        return self.fn(ctx)


def _rt_int(output):
    m = re.fullmatch(r"\s*(-?\d+)\s*", output)
    return int(m.group(1)) if m else None


def int_parse(name: str = "n") -> ParseSpec:
    """`parse n = rt_int(output)` as the compiler builds it: a failed parse gives `empty`, -100."""
    return ParseSpec(name, PyExpr("rt_int(output)", lambda c: _rt_int(c.output)), empty=-100)


def own_n() -> PyExpr:
    """Reward = the role's own parsed n."""
    return PyExpr("n", lambda c: c.fields[c.role]["n"])


def total() -> PyExpr:
    return PyExpr("env.total", lambda c: c.env_view["total"])


@dataclass
class CounterEnv:
    limits = None  # the sandbox defaults for any code this env runs (masdsl.envs.base.Env)
    fail_apply: bool = False
    applied: Counter = field(default_factory=Counter)

    def reset(self, task):
        return (0, ())

    def apply(self, state, role, fields):
        if self.fail_apply:
            raise RuntimeError("env exploded")
        self.applied[role] += 1
        n = fields["n"] if fields.get("ok") else 0
        return (state[0] + n, state[1] + ((role, n),))

    def view(self, state):
        return {"total": state[0], "log": list(state[1])}

    def success(self, state):
        return state[0] >= 10


def role(name: str, *, prompt: str = "task {{ task.id }} turn {{ turn }} total {{ env.total }}", reward=None,
         policy: str = "p", **kw) -> RoleSpec:
    return RoleSpec(name, policy, prompt, parses=(int_parse(),), reward=reward if reward is not None else own_n(), span=SPAN, **kw)


def workflow(roles: list[RoleSpec], edges: list[tuple], *, max_turns=None, team=None, alpha=1.0, success=None) -> Workflow:
    """edges: (src, dst) or (src, dst, guard); nodes "a&b" are parallel groups."""
    g = nx.DiGraph()
    g.add_node("start", kind="start", roles=(), span=None)
    g.add_node("end", kind="end", roles=(), span=None)
    order: Counter = Counter()
    for edge in edges:
        src, dst, guard = (*edge, None)[:3]
        for n in (src, dst):
            if n not in g:
                rs = tuple(n.split("&"))
                g.add_node(n, kind="group" if len(rs) > 1 else "role", roles=rs, span=SPAN)
        g.add_edge(src, dst, order=order[src], guard=guard, span=SPAN)
        order[src] += 1
    policies = {r.policy: PolicySpec(r.policy, "tiny") for r in roles}
    return Workflow("toy", "", "rt_counter", g, {r.name: r for r in roles}, policies, {}, max_turns=max_turns,
                    team=team, alpha=alpha, success=success)


def replay_file(path, rows: dict[tuple[str, str, int], list[str]]):
    with open(path, "w") as f:
        for (task, r, turn), outputs in rows.items():
            f.write(json.dumps({"task_id": task, "role": r, "turn": turn, "outputs": outputs}) + "\n")
    return path


def config(*overrides: str):
    return resolve_config(overrides=list(overrides))
