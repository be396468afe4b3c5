"""Completion by context: template variables and `ROLE.` fields inside `{{ }}`, keys inside
`sample { }`, `train { }` and policy blocks, policy names after `policy`, registered functions,
roles and variables in expressions and the flow, estimators after `advantage`, statement keywords
at the top level.

The context comes from a scan of the text before the cursor (strings, comments, open braces),
so it works while the statement being typed does not parse yet.

>>> c = context_at('role a {\\n  sample { temp', 25)
>>> c.blocks, c.word
(['role a', 'sample'], 'temp')
>>> context_at("role a { prompt '{{ a.", 22).template, context_at('x = a.b', 7).base
(True, 'a')
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from lsprotocol import types as T

from masdsl.config import Config
from masdsl.lang.check_roles import POLICY_KEYS, SAMPLE_KEYS
from masdsl.lang.judge import JUDGE
from masdsl.lang.judge import SIGNATURE as JUDGE_SIGNATURE
from masdsl.lang.templates import BASE_VARIABLES
from masdsl.config_schema import ADVANTAGES
from masdsl.lang.vocabulary import ROLE_ITEMS, STATEMENTS
from masdsl.lsp.hover import MEANINGS, signature
from masdsl.lsp.state import DocState

_WORD = re.compile(r"[A-Za-z_]\w*")
CK = T.CompletionItemKind


@dataclass
class Context:
    blocks: list[str] = field(default_factory=list)  # heads of the open `{` blocks, outermost first
    string: bool = False  # inside a string literal
    template: bool = False  # inside `{{ }}` or `{% %}` of a string
    word: str = ""  # the identifier being typed
    base: str | None = None  # `X` of `X.word`
    previous: str = ""  # the word before the one being typed


def context_at(text: str, offset: int, start: int = 0) -> Context:
    """Scan `text[start:offset]` (`start`: a statement start) for what the cursor is inside."""
    c, words, i, quote, str_start = Context(), [], start, None, 0
    offset = min(offset, len(text))
    while i < offset:
        ch = text[i]
        if quote:
            if text.startswith(quote, i) and (len(quote) == 3 or text[i - 1] != "\\"):
                i, quote = i + len(quote), None
                continue
            i += 1
            continue
        if ch == "#":
            nl = text.find("\n", i, offset)
            if nl < 0:
                return Context(blocks=c.blocks)  # in a comment: nothing to complete
            i = nl
        elif ch in "\"'":
            quote = ch * 3 if text.startswith(ch * 3, i) else ch
            str_start = i + len(quote)
            i += len(quote)
            continue
        elif ch == "{":
            c.blocks.append(" ".join(words[-2:]) if len(words) >= 2 and words[-2] in ("role", "policy") else (words[-1] if words else ""))
        elif ch == "}" and c.blocks:
            c.blocks.pop()
        elif ch.isalpha() or ch == "_":
            m = _WORD.match(text, i)
            words.append(m.group())
            i = m.end()
            continue
        i += 1
    if quote:
        body = text[str_start:offset]
        opened = max(body.rfind("{{"), body.rfind("{%"))
        c.string, c.template = True, opened > max(body.rfind("}}"), body.rfind("%}"))
    m = re.search(r"(?:([A-Za-z_]\w*)\s*\.\s*)?([A-Za-z_]\w*)?\Z", text[max(0, offset - 200):offset])
    c.word, c.base = (m.group(2) or "", m.group(1)) if m else ("", None)
    before = words[:-1] if c.word and words and words[-1] == c.word else words
    c.previous = before[-1] if before else ""
    return c


def _items(names, kind, detail=None) -> list[T.CompletionItem]:
    return [T.CompletionItem(label=n, kind=kind, detail=detail(n) if callable(detail) else detail) for n in names]


def _section_keys(section: str) -> list[str]:
    f = {x.name: x for x in dataclasses.fields(Config)}.get(section)
    if f is None or not dataclasses.is_dataclass(f.default_factory):
        return []
    return [x.name for x in dataclasses.fields(f.default_factory)]


def _fields_of(state: DocState, base: str) -> list[T.CompletionItem]:
    if base in state.known_roles():
        return _items(state.role_fields(base), CK.Field, f"field of role {base}")
    if base == "task":
        return _items(state.task_fields(), CK.Field, "task field")
    if base == "env":
        return _items(state.env_fields(), CK.Field, "env field")
    return []


def _expression(state: DocState, role: str | None) -> list[T.CompletionItem]:
    funcs = {n: s for n, s in state.registry.functions.items() if s.allowed_in(state.env_name())}
    out = _items(sorted(funcs), CK.Function, lambda n: signature(funcs[n]))
    out += _items(state.known_roles(), CK.Class, "role")
    out += _items(("task", "env", "turn") + (("output",) if role else ()), CK.Variable, lambda n: MEANINGS[n])
    if role:
        out += _items(state.role_fields(role)[:-2], CK.Field, f"field of role {role}")
        out.append(T.CompletionItem(label=JUDGE, kind=CK.Function, detail=JUDGE_SIGNATURE))  # rewards only
    return out


def complete(state: DocState, offset: int) -> list[T.CompletionItem]:
    start = max((s.span.start for s in state.parser.stmts if s.span.start <= offset), default=0)
    c = context_at(state.text, offset, start)
    if c.base is not None and (c.template or not c.string):
        return _fields_of(state, c.base)
    if c.string:
        if not c.template:
            return []
        return _items(state.known_roles(), CK.Class, "role") + _items(BASE_VARIABLES, CK.Variable, lambda n: MEANINGS[n])
    inner = c.blocks[-1] if c.blocks else None
    if inner is None:
        if c.previous == "env":
            return _items(sorted(state.registry.envs), CK.Module, "env")
        if c.previous in ("train", "eval"):
            return _items(sorted(state.registry.data_sources), CK.Function, "data source")
        if c.previous in ("team", "alpha", "success"):
            return _expression(state, None)
        return _items(STATEMENTS, CK.Keyword)
    if inner == "sample":
        return _items(SAMPLE_KEYS, CK.Property, lambda k: SAMPLE_KEYS[k])
    if c.blocks[0] in ("train", "sandbox"):  # the top-level `sandbox { }` is the config's `sandbox` section
        section = c.blocks[1] if len(c.blocks) > 1 else c.blocks[0]
        keys = _section_keys(section) + (["runtime", "tracking", "sandbox", "policy"] if section == "train" else [])
        return _items(keys, CK.Property, f"{section} option")
    if inner.startswith("policy "):
        return _items(POLICY_KEYS, CK.Property, lambda k: POLICY_KEYS[k])
    if inner.startswith("role "):
        if c.previous in ("policy", JUDGE):
            return _items(state.policies(), CK.Class, "policy")
        if c.previous == "advantage":
            return _items(ADVANTAGES, CK.EnumMember, lambda n: ADVANTAGES[n])
        return _items(ROLE_ITEMS, CK.Keyword) + _expression(state, inner.split()[1])
    if inner == "flow":
        return _items(("start", "end", "when", "max_turns"), CK.Keyword) + _expression(state, None)
    return []
