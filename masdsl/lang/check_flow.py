"""Checker rules for the `flow { }` block: node names, edges, reachability, cycles, guards."""

from __future__ import annotations

from dataclasses import dataclass, field

from masdsl.lang import ast as A
from masdsl.lang.context import Ctx, expect as _expect
from masdsl.errors import did_you_mean, suggest
from masdsl.lang.exprs import NotLiteral, literal
from masdsl.lang.infer import Scope, infer


def flow_edges(flow: A.FlowDecl) -> list[tuple[A.Node, A.Node, A.Expr | None, A.Edge]]:
    """Every edge of the flow in file order; a chain's guard belongs to its last edge."""
    out = []
    for e in flow.edges:
        for i in range(len(e.nodes) - 1):
            out.append((e.nodes[i], e.nodes[i + 1], e.guard if i == len(e.nodes) - 2 else None, e))
    return out


def max_turns_of(c: Ctx, flow: A.FlowDecl) -> int | None:
    items = [i for i in flow.items if isinstance(i, A.MaxTurns)]
    for dup in items[1:]:
        c.error("duplicate-statement", "`max_turns` is set twice", dup.span, related=((items[0].span, "first here"),))
    if not items:
        return None
    try:
        value = literal(items[0].expr)
    except NotLiteral:
        value = None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        c.error("invalid-value", "`max_turns` must be a whole number of at least 1", items[0].expr.span)
        return 1
    return value


def _check_nodes(c: Ctx, flow: A.FlowDecl) -> None:
    declared = {r.name.name: r for r in c.module.roles}
    for e in flow.edges:
        for node in e.nodes:
            names = [r.name for r in node.roles]
            for ident in node.roles:
                n = ident.name
                if n in ("start", "end"):
                    if len(node.roles) > 1:
                        c.error("invalid-edge", f"`{n}` cannot be part of a parallel group", ident.span)
                        c.flow_ok = False
                    continue
                if n not in declared:
                    near = suggest(n, declared)
                    c.error("unknown-role", f"unknown role `{n}` in flow edge", ident.span,
                            label="not a declared role",
                            related=((declared[near].name.span, "a role with a similar name is declared here"),) if near else (),
                            help=did_you_mean(n, declared))
                    c.flow_ok = False
                elif names.count(n) > 1 and names.index(n) != node.roles.index(ident):
                    c.error("duplicate-name", f"role `{n}` appears twice in one parallel group", ident.span)
                    c.flow_ok = False


@dataclass
class FlowGraph:
    """The flow's nodes (in first-seen order, with the span where each is first named) and edges
    (in file order, with the span of their target): plain dicts, so checking needs no networkx."""

    nodes: dict[str, object] = field(default_factory=dict)
    edges: dict[tuple[str, str], object] = field(default_factory=dict)
    succ: dict[str, list[str]] = field(default_factory=dict)
    pred: dict[str, list[str]] = field(default_factory=dict)

    def add_edge(self, u: str, v: str, span) -> None:
        self.edges[(u, v)] = span
        self.succ.setdefault(u, []).append(v)
        self.pred.setdefault(v, []).append(u)

    def reach(self, node: str, forward: bool = True) -> set[str]:
        """`node` and every node it leads to (or, backwards, that leads to it)."""
        adj, seen, stack = self.succ if forward else self.pred, {node}, [node]
        while stack:
            for n in adj.get(stack.pop(), ()):
                if n not in seen:
                    seen.add(n)
                    stack.append(n)
        return seen

    def acyclic(self) -> bool:
        indegree = {n: len(self.pred.get(n, ())) for n in self.nodes}
        ready = [n for n, d in indegree.items() if d == 0]
        done = 0
        while ready:
            done += 1
            for m in self.succ.get(ready.pop(), ()):
                indegree[m] -= 1
                if indegree[m] == 0:
                    ready.append(m)
        return done == len(self.nodes)

    def a_cycle(self) -> list[tuple[str, str]]:
        """The cycle `networkx.find_cycle` names (the same graph, built in the same order)."""
        import networkx as nx  # start-up: networkx (~150 ms), only to name a cycle in an error

        g = nx.DiGraph()
        g.add_nodes_from(self.nodes)
        g.add_edges_from(self.edges)
        return nx.find_cycle(g)


def _check_edges(c: Ctx, flow: A.FlowDecl) -> FlowGraph:
    g = FlowGraph()
    seen: dict[tuple[str, str], A.Node] = {}
    fallback: dict[str, A.Node] = {}
    for src, dst, guard, _ in flow_edges(flow):
        if dst.key == "start":
            c.error("invalid-edge", "an edge cannot enter `start`", dst.span, label="`start` only has outgoing edges")
            continue
        if src.key == "end":
            c.error("invalid-edge", "an edge cannot leave `end`", src.span, label="`end` only has incoming edges")
            continue
        key = (src.key, dst.key)
        if key in seen:
            c.error("duplicate-name", f"edge `{src.key} -> {dst.key}` is declared twice", dst.span,
                    related=((seen[key].span, "first declared here"),), help="merge the guards with `or`")
            continue
        seen[key] = dst
        if src.key in fallback:
            c.warn("shadowed-edge", f"edge `{src.key} -> {dst.key}` can never be taken", dst.span,
                   related=((fallback[src.key].span, "an earlier edge without a guard always wins"),),
                   help="put edges with a `when` before the unguarded fallback")
        elif guard is None:
            fallback[src.key] = dst
        for n in (src, dst):
            g.nodes.setdefault(n.key, n.span)
        g.add_edge(src.key, dst.key, dst.span)
    return g


def _check_guard(c: Ctx, guard: A.Expr) -> None:
    """A guard is a bool; a number (a 0/1 score such as `correct(a, b)`) is refused with the
    comparison to write instead, so a threshold is always explicit."""
    t = infer(c, guard, Scope())
    if t != "number":
        _expect(c, guard, t, {"bool"}, "a guard")
        return
    src = " ".join(c.text[guard.span.start:guard.span.end].split())
    c.error("type-mismatch", "a guard is a number, not a bool", guard.span, label="this is a number",
            notes=("a guard decides whether the edge is taken: it must be true or false",),
            help=f"write `{src} == 1`, or compare it with a threshold (`> 0.5`)")


def check_flow(c: Ctx) -> None:
    """Roles exist; `start` reaches every node and every node reaches `end`; a cycle needs
    `max_turns`; guards are booleans."""
    if not c.module.flows:
        return
    flow = c.module.flows[0]
    turns = max_turns_of(c, flow)
    _check_nodes(c, flow)
    for _, _, guard, _ in flow_edges(flow):
        if guard is not None:
            _check_guard(c, guard)
    if not c.flow_ok:
        return
    g = _check_edges(c, flow)
    if "start" not in g.nodes or not g.succ.get("start"):
        c.error("missing-statement", "the flow has no edge from `start`", flow.span, help="add `start -> ROLE`")
        return
    if "end" not in g.nodes:
        c.error("no-path-to-end", "no edge of the flow reaches `end`", flow.span, help="add `ROLE -> end`")
        return
    reach, back = g.reach("start"), g.reach("end", forward=False)
    for node, span in g.nodes.items():
        if node not in reach:
            c.error("unreachable", f"`{node}` cannot be reached from `start`", span,
                    label="no path from `start` leads here")
        elif node not in back:
            c.error("no-path-to-end", f"`{node}` has no path to `end`", span,
                    label="every path from here runs forever", help=f"add an edge `{node} -> end` (with a `when` guard)")
    if turns is None and not g.acyclic():
        u, v = g.a_cycle()[-1][:2]
        c.error("unbounded-cycle", "the flow has a cycle but no `max_turns`", g.edges[u, v],
                label=f"the edge `{u} -> {v}` closes a cycle", help="add `max_turns N` inside `flow { }`")
