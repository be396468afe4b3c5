"""The checker: `check(module, ...) -> list[Diagnostic]`. Collects every error; never raises.

Each rule is a small function over the AST that appends diagnostics; `check()` runs them in
order. A rule that depends on names skips what an earlier rule already reported (one cause,
one diagnostic). Names of environments, data sources, parsers and functions come from
`masdsl.envs.registry.REGISTRY` after `load_builtins()` and the workflow's `import` files.

>>> from masdsl.lang.parse import parse_text
>>> text = 'env e\\npolicy shared { model: "m" }\\nrole a { policy shard prompt "hi" }\\nflow { start -> a -> end }'
>>> module, _ = parse_text(text, "w.mas")
>>> from masdsl.envs.registry import Registry, EnvSpec
>>> reg = Registry(envs={"e": EnvSpec("e", object)})
>>> [(d.code, str(d.span)) for d in check(module, text, registry=reg) if d.is_error]
[('missing-statement', 'w.mas:1:1'), ('unknown-policy', 'w.mas:3:17')]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from masdsl.lang import ast as A
from masdsl.lang.check_exprs import check_exprs, check_parses
from masdsl.lang.check_flow import check_flow, flow_edges, max_turns_of  # noqa: F401 - flow_edges is public
from masdsl.lang.context import ANY, BOOL, LIST, NUMBER, STR, Ctx  # noqa: F401 - Ctx is public
from masdsl.lang.context import bind as _bind
from masdsl.lang.context import ticks as _ticks
from masdsl.lang.errors import Diagnostic, did_you_mean
from masdsl.lang.exprs import NotLiteral, literal
from masdsl.lang.source import Span

RESERVED = {"start", "end", "task", "env", "turn", "output", "role", "history", "ok", "true", "false",
            "and", "or", "not", "when"}
SPLITS = ("train", "eval")
SAMPLE_KEYS = {"temperature": "number", "top_p": "number", "top_k": "number", "min_p": "number",
               "max_tokens": "number", "stop": "list", "seed": "number", "repetition_penalty": "number"}
POLICY_KEYS = {"model": "str", "lora": "block", "frozen": "bool", "chat_template_kwargs": "block"}


# ---- statements that may appear once ------------------------------------------------------

def check_singletons(c: Ctx) -> None:
    """`workflow`, `env`, `flow`, `team`, `alpha`, `success`, `train` appear at most once; `env`
    and `flow` and at least one `role` must be there."""
    m = c.module
    for name, items in (("workflow", m.workflows), ("env", m.envs), ("flow", m.flows), ("team", m.teams),
                        ("alpha", m.alphas), ("success", m.successes), ("train", m.trains)):
        for dup in items[1:]:
            c.error("duplicate-statement", f"`{name}` is declared twice", dup.span, label=f"second `{name}`",
                    related=((items[0].span, f"first `{name}` here"),), help=f"keep one `{name}` statement")
    end = c.module.span
    eof = Span(end.file, end.end_line, max(1, end.end_col - 1), end.end_line, end.end_col, max(0, end.end - 1), end.end) if end else None
    first = (m.workflows[0].span if m.workflows else eof)
    if not m.envs:
        c.error("missing-statement", "the workflow has no `env`", first, help="add an environment, for example `env code`")
    if not m.roles:
        c.error("missing-statement", "the workflow declares no `role`", first, help="declare a role: `role NAME { policy P prompt \"...\" }`")
    if not m.flows:
        c.error("missing-statement", "the workflow has no `flow`", first,
                help="add a flow, for example `flow { start -> coder -> end }`")


# ---- imports, env, data -------------------------------------------------------------------

def check_imports(c: Ctx) -> None:
    """`import "x.py"`: the file exists and imports cleanly (its own error is shown)."""
    from masdsl.lang.imports import ImportFileError, import_file

    for imp in c.module.imports:
        path = c.resolve(imp.path.value)
        if not path.is_file():
            c.error("missing-file", f"import file `{imp.path.value}` does not exist", imp.path.span,
                    label="no such file", notes=(f"looked for {path}",))
            continue
        try:
            import_file(path)
        except ImportFileError as exc:
            notes = [f"{exc.path}" + (f", line {exc.line}" if exc.line else "") + f": {exc.summary}"]
            if exc.details:
                notes.append("traceback (your file):\n" + exc.details.rstrip())
            c.error("import-error", f"importing `{imp.path.value}` raised an error", imp.path.span,
                    label=exc.summary, notes=tuple(notes))


def _literal_args(c: Ctx, call: A.Call) -> tuple[list, dict] | None:
    ok = True
    for node in list(call.args) + [k.value for k in call.kwargs]:
        try:
            literal(node)
        except NotLiteral as exc:
            ok = False
            c.error("invalid-value", "arguments here must be literal values", exc.node.span,
                    label="not a literal", help="use numbers, strings, booleans or lists")
    if not ok:
        return None
    return [literal(a) for a in call.args], {k.name.name: literal(k.value) for k in call.kwargs}


def check_env(c: Ctx) -> None:
    """`env NAME(args)`: a registered environment, with arguments its class accepts."""
    if not c.module.envs:
        return
    decl = c.module.envs[0]
    spec = c.registry.envs.get(decl.name.name)
    if spec is None:
        c.error("unknown-env", f"unknown environment `{decl.name.name}`", decl.name.span,
                label="not a registered environment", notes=(f"registered: {_ticks(c.registry.envs)}",),
                help=did_you_mean(decl.name.name, c.registry.envs))
        return
    c.env_name = spec.name
    c.env_fields = set(spec.fields) if spec.fields else None
    if decl.call is not None and _literal_args(c, decl.call) is not None:
        why = _bind(spec.factory, len(decl.call.args), [k.name.name for k in decl.call.kwargs])
        if why:
            c.error("wrong-arity", f"bad arguments for environment `{spec.name}`: {why}", decl.call.span)


def _jsonl_fields(c: Ctx, lit: A.StrLit) -> set[str] | None:
    path = c.resolve(lit.value)
    if not path.is_file():
        c.error("missing-file", f"data file `{lit.value}` does not exist", lit.span, label="no such file",
                notes=(f"looked for {path}",))
        return None
    try:
        with path.open(encoding="utf-8") as fh:
            first = next((line for line in fh if line.strip()), None)
        row = json.loads(first) if first is not None else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        c.error("bad-data-file", f"data file `{lit.value}` is not valid JSONL: {exc}", lit.span)
        return None
    if not isinstance(row, dict):
        c.error("bad-data-file", f"data file `{lit.value}` must hold one JSON object per line", lit.span,
                label="the first row is not an object" if row is not None else "the file is empty")
        return None
    return set(row)


def check_data(c: Ctx) -> None:
    """`data SPLIT source(args)` or `data SPLIT "file.jsonl"`: known split, registered source or
    existing file; the task fields are what every split's rows hold."""
    seen: dict[str, A.DataDecl] = {}
    fields: list[set[str] | None] = []
    for d in c.module.data:
        split = d.split.name
        if split not in SPLITS:
            c.error("invalid-value", f"unknown data split `{split}`", d.split.span, label="expected `train` or `eval`",
                    help=did_you_mean(split, SPLITS))
        elif split in seen:
            c.error("duplicate-name", f"data split `{split}` is declared twice", d.split.span,
                    related=((seen[split].split.span, "first declared here"),))
        seen.setdefault(split, d)
        if d.path is not None:
            fields.append(_jsonl_fields(c, d.path))
            continue
        name = d.call.func.name
        spec = c.registry.data_sources.get(name)
        if spec is None:
            c.error("unknown-data-source", f"unknown data source `{name}`", d.call.func.span,
                    label="not a registered data source", notes=(f"registered: {_ticks(c.registry.data_sources)}",),
                    help=did_you_mean(name, c.registry.data_sources))
            fields.append(None)
            continue
        if _literal_args(c, d.call) is not None:
            why = _bind(spec.fn, len(d.call.args), [k.name.name for k in d.call.kwargs])
            if why:
                c.error("wrong-arity", f"bad arguments for data source `{name}`: {why}", d.call.span)
        fields.append(set(spec.fields) if spec.fields else None)
    if fields and all(f is not None for f in fields):
        c.task_fields = set.intersection(*fields) | {"id"}
    if "train" not in seen:
        where = c.module.data[0].span if c.module.data else (c.module.envs[0].span if c.module.envs else None)
        if where is not None:
            c.error("missing-statement", "the workflow has no `data train` line", where,
                    help="add a training split, for example `data train humaneval(\"train\")` or `data train \"tasks.jsonl\"`")


# ---- policies and roles -------------------------------------------------------------------

def _value_kind(v: A.AnyValue) -> str:
    if isinstance(v, A.Block):
        return "block"
    if isinstance(v, A.ListValue):
        return LIST
    x = v.value
    return BOOL if isinstance(x, bool) else NUMBER if isinstance(x, (int, float)) else STR


def _check_block_keys(c: Ctx, block: A.Block, known: dict[str, str], what: str, strict: bool) -> None:
    seen: dict[str, A.Entry] = {}
    for e in block.entries:
        k = e.key.name
        if k in seen:
            c.error("duplicate-name", f"key `{k}` appears twice in {what}", e.key.span,
                    related=((seen[k].key.span, "first here"),))
        seen[k] = e
        if k not in known:
            if strict:
                c.error("invalid-value", f"unknown key `{k}` in {what}", e.key.span,
                        notes=(f"keys: {_ticks(known)}",), help=did_you_mean(k, known))
            continue
        kind = _value_kind(e.value)
        if kind != known[k]:
            c.error("invalid-value", f"`{k}` in {what} must be a {known[k]}, not a {kind}", e.value.span)


SAMPLE_RANGES = {  # key: (test, what it must be)
    "temperature": (lambda v: v >= 0, "at least 0"),
    "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "max_tokens": (lambda v: isinstance(v, int) and v >= 1, "a whole number of at least 1"),
    "top_k": (lambda v: isinstance(v, int) and v >= -1, "a whole number (-1 or 0: off)"),
    "min_p": (lambda v: 0 <= v <= 1, "in [0, 1] (0: off)"),
    "repetition_penalty": (lambda v: v > 0, "positive (1: off)"),
    "seed": (lambda v: isinstance(v, int) and v >= 0, "a whole number of at least 0"),
}


def _check_sample_ranges(c: Ctx, block: A.Block) -> None:
    for e in block.entries:
        rule = SAMPLE_RANGES.get(e.key.name)
        if rule and _value_kind(e.value) == NUMBER and not rule[0](e.value.value):
            c.error("invalid-value", f"`{e.key.name}` must be {rule[1]}, got {e.value.value}", e.value.span)


def check_policies(c: Ctx) -> None:
    """`policy NAME { model: "...", lora: {...}, frozen: true, chat_template_kwargs: {...} }`:
    unique names, a `model`."""
    seen: dict[str, A.PolicyDecl] = {}
    for p in c.module.policies:
        if p.name.name in seen:
            c.error("duplicate-name", f"policy `{p.name.name}` is declared twice", p.name.span,
                    label="second declaration", related=((seen[p.name.name].name.span, "first declared here"),))
        seen.setdefault(p.name.name, p)
        _check_block_keys(c, p.block, POLICY_KEYS, f"policy `{p.name.name}`", strict=False)
        if p.block.get("model") is None:
            c.error("missing-statement", f"policy `{p.name.name}` has no `model`", p.name.span,
                    help='add `model: "smollm2-135m-instruct"` (or a model folder or hub name)')


def _once(c: Ctx, role: A.RoleDecl, kind: type, word: str, required: bool) -> Any:
    items = role.of(kind)
    if kind is A.RoleParse:
        return items
    for dup in items[1:]:
        c.error("duplicate-statement", f"role `{role.name.name}` has two `{word}` lines", dup.span,
                related=((items[0].span, "first here"),))
    if required and not items:
        c.error("missing-statement", f"role `{role.name.name}` has no `{word}`", role.name.span,
                help=f"add a `{word}` line to the role")
    return items[0] if items else None


def check_roles(c: Ctx) -> None:
    """Role names unique and not reserved; each role has one `policy` (declared) and one
    `prompt`; parse names unique; `sample` keys known."""
    policies = {p.name.name for p in c.module.policies}
    for r in c.module.roles:
        name = r.name.name
        if name in RESERVED:
            c.error("reserved-name", f"`{name}` cannot be a role name", r.name.span, label="reserved",
                    notes=(f"reserved names: {_ticks(RESERVED)}",))
        elif name in c.roles:
            c.error("duplicate-name", f"role `{name}` is declared twice", r.name.span, label="second declaration",
                    related=((c.roles[name].name.span, "first declared here"),))
            continue
        c.roles[name] = r
        pol = _once(c, r, A.RolePolicy, "policy", required=True)
        if pol is not None and pol.name.name not in policies:
            c.error("unknown-policy", f"role `{name}` uses unknown policy `{pol.name.name}`", pol.name.span,
                    label="not a declared policy", notes=(f"policies: {_ticks(policies)}",),
                    help=did_you_mean(pol.name.name, policies))
        _once(c, r, A.RolePrompt, "prompt", required=True)
        _once(c, r, A.RoleSystem, "system", required=False)
        _once(c, r, A.RoleReward, "reward", required=False)
        sample = _once(c, r, A.RoleSample, "sample", required=False)
        if sample is not None:
            _check_block_keys(c, sample.block, SAMPLE_KEYS, "`sample`", strict=True)
            _check_sample_ranges(c, sample.block)
        fields = {"output": STR, "ok": BOOL}
        for p in r.of(A.RoleParse):
            fname = p.name.name
            if fname in ("output", "ok", "turn", "task", "env"):
                c.error("reserved-name", f"`{fname}` cannot be a parse field", p.name.span,
                        label="reserved", notes=("every role already has `output` (raw text) and `ok`",))
            elif fname in fields:
                c.error("duplicate-name", f"parse field `{fname}` is declared twice in role `{name}`", p.name.span,
                        related=((next(q.name.span for q in r.of(A.RoleParse) if q.name.name == fname), "first here"),))
            else:
                fields[fname] = ANY
        c.role_fields[name] = fields


# ---- templates, train, warnings ------------------------------------------------------------

def check_templates(c: Ctx) -> None:
    """Prompts and system texts are valid Jinja2 and only use variables the workflow has."""
    from masdsl.lang import templates as T

    fields: dict[str, set[str] | None] = {"task": c.task_fields, "env": c.env_fields, "turn": None,
                                          "role": None, "history": None}
    for name, f in c.role_fields.items():
        fields.setdefault(name, set(f))  # a role named like a variable is already an error
    for name, r in c.roles.items():
        for item, what in [(i, "prompt") for i in r.of(A.RolePrompt)] + [(i, "system") for i in r.of(A.RoleSystem)]:
            lit = item.text
            if getattr(item, "file", False):
                path = c.resolve(lit.value)
                if not path.is_file():
                    c.error("missing-file", f"prompt file `{lit.value}` does not exist", lit.span, label="no such file",
                            notes=(f"looked for {path}",))
                    continue
                try:
                    body = path.read_text(encoding="utf-8", errors="replace")
                except OSError as exc:
                    c.error("missing-file", f"prompt file `{lit.value}` cannot be read: {exc.strerror}", lit.span)
                    continue
                c.sources[str(path)] = body
                c.diags += T.check_template(T.file_text(body), str(path), fields, body, what=f"prompt of `{name}`")
            else:
                t = template_of(lit, c.text)
                c.diags += T.check_template(t, lit.span.file, fields, c.text, what=f"{what} of `{name}`")


def template_of(lit: A.StrLit, text: str):
    """The template text of a prompt literal, with its line map (shared with the compiler)."""
    from masdsl.lang import templates as T

    if lit.long:
        return T.prompt_text(text[lit.span.start : lit.span.end], lit.span.start)
    return T.TemplateText(lit.value, (lit.span.start + 1,) * (lit.value.count("\n") + 1))


def _entry_at(block: A.Block, path: list[str]) -> A.Entry | None:
    entry = None
    for part in path:
        entry = block.get(part)
        if entry is None:
            return None
        if isinstance(entry.value, A.Block):
            block = entry.value
    return entry


def check_train(c: Ctx) -> None:
    """The `train { }` block passes the run configuration's schema (`masdsl.config`)."""
    import re

    from masdsl.config import ConfigError, resolve_config

    if not c.module.trains:
        return
    block = c.module.trains[0].block
    try:
        resolve_config(train_block=A.to_python(block))
    except ConfigError as exc:
        msg = str(exc)
        m = re.search(r"full_key: ([\w.]+)", msg) or re.search(r"`([\w.]+)`", msg)
        path = m.group(1).split(".") if m else []
        entry = _entry_at(block, path[1:] if path and path[0] == "train" else path) or _entry_at(block, path)
        first = msg.strip().splitlines()[0]
        c.error("invalid-train", first, entry.key.span if entry else block.span)


def check_warnings(c: Ctx) -> None:
    """Roles never used, roles never rewarded, groups of one candidate."""
    used = {i.name for f in c.module.flows for e in f.edges for n in e.nodes for i in n.roles}
    team = bool(c.module.teams)
    alpha = 1.0
    if c.module.alphas:
        try:
            alpha = float(literal(c.module.alphas[0].expr))
        except (NotLiteral, TypeError, ValueError):
            pass
    for name, r in c.roles.items():
        if c.module.flows and name not in used:
            c.warn("unused-role", f"role `{name}` never appears in the flow", r.name.span, label="never acts")
        elif not r.of(A.RoleReward) and (not team or alpha == 0):
            c.warn("never-rewarded", f"role `{name}` never receives a reward", r.name.span,
                   label="no `reward` line and no `team` reward", help="add `reward EXPR` to the role or a `team` line")
    if c.module.trains:
        e = c.module.trains[0].block.get("samples")
        if e is not None and isinstance(e.value, A.Value) and e.value.value == 1:
            c.warn("group-size-one", "`samples: 1` makes every AT-GRPO group a single candidate", e.value.span,
                   label="groups of size 1 have zero advantage", help="use `samples: 2` or more (the paper uses 4 to 8)")


RULES = (check_singletons, check_imports, check_env, check_data, check_policies, check_roles, check_parses,
         check_exprs, check_flow, check_templates, check_train, check_warnings)


def run_checks(module: A.Module, text: str, base_dir: Path | None = None, registry=None) -> Ctx:
    """Run every rule; the returned `Ctx` holds the diagnostics and what the rules learnt."""
    if registry is None:
        from masdsl.envs import registry as reg

        registry = reg.load_builtins()
    c = Ctx(module, text, base_dir, registry)
    for rule in RULES:
        rule(c)
    c.diags.sort(key=Diagnostic.sort_key)
    return c


def check(module: A.Module, text: str, base_dir: Path | None = None, registry=None) -> list[Diagnostic]:
    """Every diagnostic of a parsed module, sorted by position."""
    return run_checks(module, text, base_dir, registry).diags
