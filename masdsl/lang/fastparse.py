"""The fast parser of `.mas` text: recursive descent from tokens straight to the AST, no lark.

`parse_fast(text, path)` gives the `Module` lark's parser and `masdsl.lang.tree.ToAst` would
build (same nodes, same spans), or None when it is not sure: a syntax error, or one of the
corners where lark's contextual lexer reads a word as a keyword or a name differently than a
plain reading would (a keyword used as a name in some places, `rolea {` read as `role a {`).
`masdsl.lang.parse.parse_text` then asks lark, which names the error. A test checks both
parsers agree on every text it accepts (tests/lang/test_fastparse.py). It is about 5 times
faster than lark's parser and tree transformer, and needs no lark import: what `masdsl check`
and a keystroke in `masdsl lsp` pay on a large file.

Spans follow lark's `propagate_positions`: a rule spans its first token to its last, and a
parenthesised expression keeps its own span while its parent's span takes in the parentheses.

>>> m = parse_fast('role a { policy p prompt "hi" }', "w.mas")
>>> m.roles[0].name.name, str(m.roles[0].span)
('a', 'w.mas:1:1')
>>> parse_fast("flow { a => b }", "w.mas") is None
True
"""

from __future__ import annotations

from masdsl.lang import ast as A
from masdsl.lang.fastexpr import Bail, Reader
from masdsl.lang.lexer import number, tokens
from masdsl.lang.vocabulary import KEYWORDS, ROLE_ITEMS, STATEMENTS
from masdsl.lang.workflow import Span

_TOP = STATEMENTS
_ROLE_ITEMS = ROLE_ITEMS
_GROUPS = {A.WorkflowDecl: "workflows", A.EnvDecl: "envs", A.DataDecl: "data", A.PolicyDecl: "policies",
           A.RoleDecl: "roles", A.FlowDecl: "flows", A.TrainDecl: "trains", A.ImportDecl: "imports",
           A.SandboxDecl: "sandboxes"}
_EXPR_GROUPS = {"team": "teams", "alpha": "alphas", "success": "successes"}


def parse_fast(text: str, path: str = "<string>") -> A.Module | None:
    """The `Module` of `text`, or None (a syntax error, or a case left to lark)."""
    stmts = parse_statements(text, path)
    return None if stmts is None else module_of(path, [st for st, _ in stmts], text)


def module_of(path: str, stmts: list, text: str) -> A.Module:
    """The `Module` of top-level statements (in file order) of `text`, grouped by kind."""
    groups: dict[str, list] = {k: [] for k in ("workflows", "envs", "data", "policies", "roles", "flows",
                                             "teams", "alphas", "successes", "trains", "imports", "sandboxes")}
    for st in stmts:
        groups[_GROUPS.get(type(st)) or _EXPR_GROUPS[st.kind]].append(st)
    span = Span(path, 1, 1, text.count("\n") + 1, len(text) - (text.rfind("\n") + 1) + 1, 0, len(text))
    return A.Module(path, **{k: tuple(v) for k, v in groups.items()}, span=span)


def parse_statements(text: str, path: str, start: int = 0, end: int | None = None) -> list[tuple] | None:
    """The top-level statements of `text[start:end]` (spans count from the start of `text`),
    each with its `Span` objects in groups (what `masdsl lsp` moves in place when text before
    them changes): one group, or for a flow its own span then one group per item. None when
    `parse_fast` would give None."""
    return _run(text, path, start, end, lambda p: p.statements())


def parse_flow_items(text: str, path: str, start: int, end: int) -> list[tuple] | None:
    """The flow items (edges, `max_turns`) of `text[start:end]`, each with its spans; or None."""
    return _run(text, path, start, end, lambda p: list(zip(*p.flow_items("$"))))


def _run(text: str, path: str, start: int, end: int | None, what) -> list[tuple] | None:
    toks = tokens(text, start, end)
    if toks is None:
        return None
    try:
        return what(_Parser(text, path, toks, start, end))
    except (Bail, RecursionError):
        return None


class _Parser(Reader):
    """The statement grammar of `grammar/mas.lark`."""

    # ---- statements -------------------------------------------------------------------------
    def statements(self) -> list[tuple]:
        out, toks = [], self.toks
        while toks[self.i][0] != "$":
            t = toks[self.i]
            if t[0] != "N" or t[1] not in _TOP:
                raise Bail
            self.made, self.i = [], self.i + 1
            st = getattr(self, "s_" + t[1])(self.i - 1)
            out.append((st, self.groups if t[1] == "flow" else [self.made]))
            if toks[self.i][0] == ";":
                self.i += 1
        return out

    def s_workflow(self, a: int) -> A.WorkflowDecl:
        name = self.ident()
        desc = self.string() if self.toks[self.i][0] in "SL" else None
        return A.WorkflowDecl(name, desc, self.span(a, self.i - 1))

    def s_env(self, a: int) -> A.EnvDecl:
        name = self.ident()
        call = None
        if self.at("("):
            args, kwargs, b = self.call_args()
            call = A.Call(name, args, kwargs, self.span(a + 1, b))
        return A.EnvDecl(name, call, self.span(a, self.i - 1))

    def s_data(self, a: int) -> A.DataDecl:
        split = self.ident()
        if self.toks[self.i][0] in "SL":
            return A.DataDecl(split, None, self.string(), self.span(a, self.i - 1))
        f = self.i
        func = self.ident()
        args, kwargs, b = self.call_args()
        return A.DataDecl(split, A.Call(func, args, kwargs, self.span(f, b)), None, self.span(a, b))

    def s_policy(self, a: int) -> A.PolicyDecl:
        name = self.ident()
        return A.PolicyDecl(name, self.block(), self.span(a, self.i - 1))

    def _expr_stmt(self, a: int) -> A.ExprStmt:
        e = self.expr()[0]
        return A.ExprStmt(self.toks[a][1], e, self.span(a, self.i - 1))

    s_team = s_alpha = s_success = _expr_stmt

    def s_train(self, a: int) -> A.TrainDecl:
        return A.TrainDecl(self.block(), self.span(a, self.i - 1))

    def s_sandbox(self, a: int) -> A.SandboxDecl:
        return A.SandboxDecl(self.block(), self.span(a, self.i - 1))

    def s_import(self, a: int) -> A.ImportDecl:
        return A.ImportDecl(self.string(), self.span(a, self.i - 1))

    def s_role(self, a: int) -> A.RoleDecl:
        name = self.ident()
        self.take("{")
        items, toks = [], self.toks
        while toks[self.i][0] != "}":
            t = toks[self.i]
            if t[0] != "N" or t[1] not in _ROLE_ITEMS:
                raise Bail
            self.i += 1
            items.append(self.role_item(t[1], self.i - 1))
            if toks[self.i][0] == ";":
                self.i += 1
        self.i += 1
        return A.RoleDecl(name, tuple(items), self.span(a, self.i - 1))

    def role_item(self, kw: str, a: int):
        if kw == "policy":
            name = self.ident()
            return A.RolePolicy(name, self.span(a, self.i - 1))
        if kw == "system":
            s = self.string()
            return A.RoleSystem(s, self.span(a, self.i - 1))
        if kw == "prompt":
            file = self.at("N")
            if file and self.toks[self.i][1] != "file":
                raise Bail
            self.i += file
            s = self.string()
            return A.RolePrompt(s, self.span(a, self.i - 1), file=file)
        if kw == "sample":
            b = self.block()
            return A.RoleSample(b, self.span(a, self.i - 1))
        if kw == "advantage":
            name = self.ident()
            return A.RoleAdvantage(name, self.span(a, self.i - 1))
        if kw in ("parse", "metric"):
            name = self.ident()
            self.take("=")
            e = self.expr()
            return (A.RoleParse if kw == "parse" else A.RoleMetric)(name, e[0], self.span(a, e[2]))
        e = self.expr()
        return A.RoleReward(e[0], self.span(a, e[2]))

    def s_flow(self, a: int) -> A.FlowDecl:
        self.take("{")
        items, groups = self.flow_items("}")
        self.i += 1
        flow = A.FlowDecl(tuple(items), self.span(a, self.i - 1))
        self.groups = [[flow.span], *groups]
        return flow

    def flow_items(self, stop: str) -> tuple[list, list[list[Span]]]:
        """The items of a flow up to a `stop` token, with the spans made in each."""
        items, groups, toks = [], [], self.toks
        while toks[self.i][0] != stop:
            t, m = toks[self.i], len(self.made)
            if t[0] != "N":
                raise Bail
            if t[1] == "max_turns":
                self.i += 1
                e = self.expr()
                items.append(A.MaxTurns(e[0], self.span(e[1] - 1, e[2])))
            elif t[1] in KEYWORDS:  # lark may read it as a keyword here (merged LALR states)
                raise Bail
            else:
                items.append(self.edge())
            groups.append(self.made[m:])
            if toks[self.i][0] == ";":
                self.i += 1
        return items, groups

    def edge(self) -> A.Edge:
        a = self.i
        nodes = [self.node()]
        self.take("->")
        nodes.append(self.node())
        while self.at("->"):
            self.i += 1
            nodes.append(self.node())
        guard = None
        if self.at("N", "when"):
            self.i += 1
            guard = self.expr()[0]
        return A.Edge(tuple(nodes), guard, self.span(a, self.i - 1))

    def node(self) -> A.Node:
        a = self.i
        names = [self.ident()]
        while self.at("&"):
            self.i += 1
            names.append(self.ident())
        return A.Node(tuple(names), self.span(a, self.i - 1))

    # ---- literals ---------------------------------------------------------------------------
    def block(self) -> A.Block:
        a = self.take("{")
        entries, toks, after_comma = [], self.toks, True
        while toks[self.i][0] != "}":
            t = toks[self.i]
            if t[0] != "N" or (not after_comma and t[1] in KEYWORDS):  # a keyword after a value: see flow_items
                raise Bail
            e = self.i
            key = self.ident()
            value = self.block() if self.at("{") else (self.take(":"), self.value())[1]
            entries.append(A.Entry(key, value, self.span(e, self.i - 1)))
            after_comma = toks[self.i][0] == ","
            if after_comma:
                self.i += 1
        self.i += 1
        return A.Block(tuple(entries), self.span(a, self.i - 1))

    def value(self):
        t = self.toks[self.i]
        kind, a = t[0], self.i
        if kind in "SL":
            s = self.string()
            return A.Value(s.value, s.span)
        if kind == "{":
            return self.block()
        if kind == "N":
            if t[1] not in ("true", "false"):
                raise Bail
            self.i += 1
            return A.Value(t[1] == "true", self.span(a, a))
        if kind == "-" or kind == "D":
            if kind == "-":
                self.i += 1
            n = number(self.toks[self.take("D")][1])
            return A.Value(-n if kind == "-" else n, self.span(a, self.i - 1))
        if kind != "[":
            raise Bail
        self.i += 1
        items = []
        while not self.at("]"):
            items.append(self.value())
            if not self.at("]"):
                self.take(",")
        self.i += 1
        return A.ListValue(tuple(items), self.span(a, self.i - 1))
