"""What each position of a `.mas` file names: every declaration and use of a role, policy,
parse field, function, env, data source, template variable and block key, as offsets.

Hover, definition, rename and highlighting of uses read `Index.at(offset)`; rename collects
`Index.uses(kind, name)`. Template variables are found in `{{ }}` and `{% %}` of inline prompts.

>>> from masdsl.lang.parse import parse_text
>>> text = 'role a { policy p\\n prompt "{{ a.x }}" parse x = f(output) }\\nflow { start -> a -> end }'
>>> ix = Index(parse_text(text, "w.mas")[0], text)
>>> [(o.kind, o.name, o.decl) for o in ix.uses("role", "a")]
[('role', 'a', True), ('role', 'a', False), ('role', 'a', False)]
>>> o = ix.at(text.index("a.x") + 2); (o.kind, o.name, o.owner)
('field', 'x', 'a')
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from masdsl.lang import ast as A
from masdsl.lang.templates import BASE_VARIABLES

VARIABLES = ("task", "env", "turn", "output")
_TAG_KINDS = (("{{", "}}"), ("{%", "%}"))
_REF = re.compile(r"(?<![.\w|'\"])([A-Za-z_]\w*)(?:(\s*\.\s*)([A-Za-z_]\w*))?")
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")


def tags(raw: str) -> list[tuple[int, str]]:
    """(offset, text) of the inside of each `{{ }}` and `{% %}` tag of `raw`, the first to open
    first, a tag ending at the first closer after it. Linear: an opener with no closer after it
    means no later opener of its kind has one (a regex `\\{\\{(.*?)\\}\\}` would look for one
    to the end of the text from every `{{`).

    >>> tags("a {{ x }} {% if y %}{{ z")
    [(4, ' x '), (12, ' if y ')]
    """
    out, pos = [], 0
    found = {o: (-1, -1) for o, _ in _TAG_KINDS}  # per kind: the next opener at or after `pos`, its closer
    while True:
        for o, c in _TAG_KINDS:
            s, e = found[o]
            if s is not None and s < pos:
                s = raw.find(o, pos)
                if s >= 0 and e < s + 2:  # else the closer found before is still the first after `s`
                    e = raw.find(c, s + 2)
                found[o] = (s, e) if s >= 0 and e >= 0 else (None, -1)
        live = [found[o] for o, _ in _TAG_KINDS if found[o][0] is not None]
        if not live:
            return out
        s, e = min(live)
        out.append((s + 2, raw[s + 2 : e]))
        pos = e + 2


@dataclass(frozen=True)
class Occ:
    kind: str  # role | policy | field | function | env | data-source | variable | task-field | env-field | key | estimator
    name: str
    start: int
    end: int
    decl: bool = False
    owner: str | None = None  # a field's role; a key's block (`sample`, `train`, `train.runtime`, `policy P`)
    node: object = None  # the declaration's AST node


class Index:
    def __init__(self, module: A.Module | None, text: str):
        self.text, self.occs = text, []
        if module is None:
            return
        self.roles = {r.name.name: r for r in module.roles}
        self.fields = {n: {p.name.name for p in r.of(A.RoleParse)} | {"output", "ok"} for n, r in self.roles.items()}
        for p in module.policies:
            self._add("policy", p.name, decl=True, node=p)
            self._keys(p.block, f"policy {p.name.name}")
        for e in module.envs:
            self._add("env", e.name)
            self._walk(e.call, None, skip_func=True)
        for d in module.data:
            if d.call is not None:
                self._add("data-source", d.call.func)
        for r in module.roles:
            self._role(r)
        for f in module.flows:
            for item in f.items:
                if isinstance(item, A.Edge):
                    for node in item.nodes:
                        for ident in node.roles:
                            if ident.name in self.roles:
                                self._add("role", ident)
                self._walk(item.guard if isinstance(item, A.Edge) else item.expr, None)
        for s in module.teams + module.alphas + module.successes:
            self._walk(s.expr, None)
        for t in module.trains:
            self._keys(t.block, "train")
        self.occs.sort(key=lambda o: (o.start, o.end))

    def _add(self, kind: str, ident: A.Ident, decl: bool = False, owner: str | None = None, node=None) -> None:
        self.occs.append(Occ(kind, ident.name, ident.span.start, ident.span.end, decl, owner, node))

    def _keys(self, block: A.Block, owner: str) -> None:
        for e in block.entries:
            self._add("key", e.key, owner=owner)
            if isinstance(e.value, A.Block):
                self._keys(e.value, f"{owner}.{e.key.name}")

    def _role(self, r: A.RoleDecl) -> None:
        self._add("role", r.name, decl=True, node=r)
        for item in r.items:
            if isinstance(item, A.RolePolicy):
                self._add("policy", item.name)
            elif isinstance(item, A.RoleParse):
                self._add("field", item.name, decl=True, owner=r.name.name, node=item)
                self._walk(item.expr, r.name.name)
            elif isinstance(item, (A.RoleReward, A.RoleMetric)):
                self._walk(item.expr, r.name.name)
            elif isinstance(item, A.RoleSample):
                self._keys(item.block, "sample")
            elif isinstance(item, A.RoleAdvantage):
                self._add("estimator", item.name, owner=r.name.name)
            elif isinstance(item, (A.RolePrompt, A.RoleSystem)) and not getattr(item, "file", False):
                self._template(item.text)

    def _walk(self, node, role: str | None, skip_func: bool = False) -> None:
        """Names, attributes and calls of an expression."""
        if node is None:
            return
        if isinstance(node, A.Call):
            if not skip_func:
                self._add("function", node.func)
            if node.func.name == "judge":  # judge(POLICY, "template", ...): a policy and a prompt
                self._judge(node)
            for a in node.args:
                self._walk(a, role)
            for k in node.kwargs:
                self._walk(k.value, role)
        elif isinstance(node, A.Attr):
            self._attr(node.obj, node.attr)
        elif isinstance(node, A.Name):
            ident = A.Ident(node.name, node.span)
            if role is not None and node.name in self.fields.get(role, ()) and node.name not in VARIABLES:
                self._add("field", ident, owner=role)
            elif node.name in self.roles:
                self._add("role", ident)
            elif node.name in VARIABLES:
                self._add("variable", ident)
        elif dataclasses.is_dataclass(node):
            for f in dataclasses.fields(node):
                value = getattr(node, f.name)
                for v in value if isinstance(value, tuple) else (value,):
                    if dataclasses.is_dataclass(v) and not isinstance(v, A.Ident):
                        self._walk(v, role)

    def _judge(self, node: A.Call) -> None:
        if node.args and isinstance(node.args[0], A.Name):
            self._add("policy", A.Ident(node.args[0].name, node.args[0].span))
        if len(node.args) > 1 and isinstance(node.args[1], A.Const) and isinstance(node.args[1].value, str):
            self._template(node.args[1])

    def _attr(self, obj: A.Ident, attr: A.Ident) -> None:
        if obj.name in self.roles:
            self._add("role", obj)
            self._add("field", attr, owner=obj.name)
        elif obj.name in ("task", "env"):
            self._add("variable", obj)
            self._add(f"{obj.name}-field", attr, owner=obj.name)

    def _template(self, lit: A.StrLit) -> None:
        """Variables of the `{{ }}` and `{% %}` tags of an inline prompt (strings inside skipped)."""
        raw = self.text[lit.span.start : lit.span.end]
        for start, body in tags(raw):
            body = _QUOTED.sub(lambda m: " " * len(m.group()), body)
            base = lit.span.start + start
            for m in _REF.finditer(body):
                name, attr = m.group(1), m.group(3)
                if name not in self.roles and name not in BASE_VARIABLES:
                    continue
                s = base + m.start(1)
                ident = A.Ident(name, dataclasses.replace(lit.span, start=s, end=s + len(name)))
                if attr is None:
                    self._add("role" if name in self.roles else "variable", ident)
                    continue
                a = base + m.start(3)
                self._attr(ident, A.Ident(attr, dataclasses.replace(lit.span, start=a, end=a + len(attr))))

    def at(self, offset: int) -> Occ | None:
        """The innermost occurrence under `offset` (its end counts: the cursor just after a name)."""
        best = None
        for o in self.occs:
            if o.start > offset:
                break
            if o.start <= offset <= o.end and (best is None or o.end - o.start <= best.end - best.start):
                best = o
        return best

    def uses(self, kind: str, name: str, owner: str | None = None) -> list[Occ]:
        return [o for o in self.occs if o.kind == kind and o.name == name and (owner is None or o.owner == owner)]

    def decl(self, kind: str, name: str, owner: str | None = None) -> Occ | None:
        return next((o for o in self.uses(kind, name, owner) if o.decl), None)
