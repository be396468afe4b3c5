"""Free functions over a compiled `Workflow`: the turns each role can take, the AT-GRPO groups
the trainer will form, and renderings of the flow (ascii, mermaid, dot).

>>> wf = demo_workflow()
>>> role_turns(wf)
{'coder': [0, 1], 'tester': [0, 1]}
>>> [(g.role, g.turn, g.size, g.advantage) for g in predicted_groups(wf, 4)]
[('coder', 0, 4, 'grpo'), ('coder', 1, 4, 'grpo'), ('tester', 0, 4, 'grpo'), ('tester', 1, 4, 'grpo')]
>>> print(to_mermaid(wf).splitlines()[5])
  n0 --> n2
>>> 'coder -> tester' in to_dot(wf).replace('"', '')
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import networkx as nx

from masdsl.lang.workflow import PolicySpec, RoleSpec, Workflow

MAX_STATES = 20000


def _ordered_successors(wf: Workflow, node: str) -> list[str]:
    """Targets an episode may move to: edges in file order up to the first unguarded one."""
    out = []
    for target, guard in wf.successors(node):
        out.append(target)
        if guard is None:
            break
    return out


def role_turns(wf: Workflow) -> dict[str, list[int]]:
    """For each role, the turns (0-based) at which it can act in some episode.

    Explores (node, acts-per-role) states ignoring guard values; a role never acts more than
    `max_turns` times. Beyond `MAX_STATES` states it assumes every turn below the bound.
    """
    roles = sorted({r for _, d in wf.graph.nodes(data=True) for r in d.get("roles", ())})
    index = {r: i for i, r in enumerate(roles)}
    bound = wf.max_turns
    seen_turns: dict[str, set[int]] = {r: set() for r in roles}
    start = ("start", (0,) * len(roles))
    stack, visited = [start], {start}
    while stack:
        if len(visited) > MAX_STATES:
            limit = bound or 1
            return {r: list(range(limit)) if seen_turns[r] else [] for r in roles}
        node, counts = stack.pop()
        for nxt in _ordered_successors(wf, node):
            if nxt == "end":
                continue
            acting = wf.graph.nodes[nxt].get("roles", ())
            if bound is not None and any(counts[index[r]] >= bound for r in acting):
                continue  # truncated: a role would act for the (max_turns + 1)-th time
            new = list(counts)
            for r in acting:
                seen_turns[r].add(counts[index[r]])
                new[index[r]] += 1
            state = (nxt, tuple(new))
            if state not in visited:
                visited.add(state)
                stack.append(state)
    return {r: sorted(t) for r, t in seen_turns.items()}


@dataclass(frozen=True)
class Group:
    role: str
    turn: int
    policy: str
    size: int  # candidates per group (K)
    trains: bool  # False when the role's policy is frozen
    advantage: str = "grpo"  # the role's advantage estimator (its `advantage` line)


def predicted_groups(wf: Workflow, samples: int, policies: Mapping[str, PolicySpec] | None = None) -> list[Group]:
    """The (role, turn) groups one episode can produce with K = `samples` candidates each;
    `policies`: the policies as a run has them (after `policy.<name>.*`), default the file's."""
    policies = wf.policies if policies is None else policies
    out = []
    for role, turns in sorted(role_turns(wf).items()):
        spec = wf.roles.get(role)
        policy = spec.policy if spec else "?"
        frozen = policies[policy].frozen if policy in policies else False
        k = int((spec.sample or {}).get("samples", samples)) if spec else samples  # a role's own K
        advantage = spec.advantage if spec else "grpo"
        out += [Group(role, t, policy, k, not frozen, advantage) for t in turns]
    return out


def samples_of(wf: Workflow) -> int:
    """K: the file's `train { samples: K }` (default 4)."""
    value = wf.train.get("samples", 4)
    return value if isinstance(value, int) and not isinstance(value, bool) else 4


def _guard_text(guard) -> str:
    return getattr(guard, "source", str(guard)) if guard is not None else ""


def _label(wf: Workflow, node: str) -> str:
    return " & ".join(wf.graph.nodes[node].get("roles") or (node,))


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def groups_table(wf: Workflow, samples: int | None = None, policies: Mapping[str, PolicySpec] | None = None) -> str:
    """The AT-GRPO groups per (role, turn) and which roles train which policy; `policies` as in
    `predicted_groups` (`masdsl graph` passes the run plan's, so the table and the placement agree).

    >>> print(groups_table(demo_workflow()).splitlines()[0])
    AT-GRPO groups of one episode (K = 4 candidates each, keyed by task, role, turn):
    """
    k = samples_of(wf) if samples is None else samples
    policies = wf.policies if policies is None else policies
    groups = predicted_groups(wf, k, policies)
    lines = [f"AT-GRPO groups of one episode (K = {k} candidates each, keyed by task, role, turn):"]
    rows = [["role", "turn", "policy", "group size", "trains", "advantage"]]
    rows += [[g.role, str(g.turn), g.policy, str(g.size), "yes" if g.trains else "no (frozen)", g.advantage] for g in groups]
    lines += ["  " + r for r in _table(rows)]
    lines.append(f"groups per episode: at most {len(groups)}" + (" (every group has one candidate: advantage 0)" if k == 1 else ""))
    lines.append("policies (roles sharing a policy share its weights):")
    rows = [["policy", "model", "trained by"]]
    for p in policies.values():
        users = wf.roles_of_policy(p.name)
        rows.append([p.name, p.model + (" + LoRA" if p.lora else ""), "frozen: acts, never trains" if p.frozen else ", ".join(users) or "(unused)"])
    lines += ["  " + r for r in _table(rows)]
    return "\n".join(lines)


def to_ascii(wf: Workflow) -> str:
    """The flow as text: each node with its outgoing edges in the order they are tried.

    >>> print(to_ascii(demo_workflow()))
    workflow demo: a coder and a tester (max_turns 2)
    start
      -> coder
    coder
      -> tester
    tester
      -> end    when coder.ok
      -> coder  otherwise
    """
    head = f"workflow {wf.name}" + (f": {wf.description}" if wf.description else "")
    head += f" (max_turns {wf.max_turns})" if wf.max_turns else ""
    lines = [head]
    for node in wf.graph.nodes:
        succ = wf.successors(node)
        if not succ:
            continue
        lines.append(_label(wf, node))
        width = max(len(_label(wf, t)) for t, _ in succ)
        guarded_before = False
        for target, guard in succ:
            cond = f"when {_guard_text(guard)}" if guard is not None else ("otherwise" if guarded_before else "")
            guarded_before = guarded_before or guard is not None
            lines.append(f"  -> {_label(wf, target).ljust(width)}  {cond}".rstrip())
    return "\n".join(lines)


def _mermaid_text(s: str) -> str:
    return s.replace('"', "#quot;")


def to_mermaid(wf: Workflow) -> str:
    """A mermaid `flowchart` of the flow; guards label their edges."""
    ids = {n: f"n{i}" for i, n in enumerate(wf.graph.nodes)}
    lines = ["flowchart TD"]
    for n in wf.graph.nodes:
        kind = wf.graph.nodes[n].get("kind")
        text = _mermaid_text(_label(wf, n))
        lines.append(f'  {ids[n]}(("{text}"))' if kind in ("start", "end") else f'  {ids[n]}["{text}"]')
    for node in wf.graph.nodes:
        for target, guard in wf.successors(node):
            label = f'|"{_mermaid_text(_guard_text(guard))}"|' if guard is not None else ""
            lines.append(f"  {ids[node]} -->{label} {ids[target]}")
    return "\n".join(lines) + "\n"


def _dot_text(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def to_dot(wf: Workflow) -> str:
    """A Graphviz digraph of the flow; guards label their edges, edges are numbered in order."""
    lines = [f'digraph "{_dot_text(wf.name)}" {{', "  rankdir=TB;", '  node [shape=box, style=rounded, fontname="Helvetica"];']
    for n, d in wf.graph.nodes(data=True):
        shape = ', shape=circle' if d.get("kind") in ("start", "end") else (", peripheries=2" if d.get("kind") == "group" else "")
        lines.append(f'  "{_dot_text(n)}" [label="{_dot_text(_label(wf, n))}"{shape}];')
    for node in wf.graph.nodes:
        succ = wf.successors(node)
        for i, (target, guard) in enumerate(succ):
            label = _guard_text(guard) if guard is not None else ("otherwise" if i and len(succ) > 1 else "")
            attr = f' [label="{_dot_text(label)}"]' if label else ""
            lines.append(f'  "{_dot_text(node)}" -> "{_dot_text(target)}"{attr};')
    lines.append("}")
    return "\n".join(lines) + "\n"


def demo_workflow() -> Workflow:
    """A small hand-built workflow for examples: start -> coder -> tester -> (end | coder)."""
    class _Guard:
        source = "coder.ok"
        span = None

        def evaluate(self, ctx):
            return ctx.fields["coder"]["ok"]

    g = nx.DiGraph()
    g.add_node("start", kind="start", roles=(), span=None)
    g.add_node("end", kind="end", roles=(), span=None)
    for r in ("coder", "tester"):
        g.add_node(r, kind="role", roles=(r,), span=None)
    g.add_edge("start", "coder", order=0, guard=None, span=None)
    g.add_edge("coder", "tester", order=0, guard=None, span=None)
    g.add_edge("tester", "end", order=0, guard=_Guard(), span=None)
    g.add_edge("tester", "coder", order=1, guard=None, span=None)
    roles = {r: RoleSpec(r, "shared", "{{ task.prompt }}") for r in ("coder", "tester")}
    return Workflow("demo", "a coder and a tester", "code", g, roles,
                    {"shared": PolicySpec("shared", "smollm2-135m-instruct")}, {}, max_turns=2)
