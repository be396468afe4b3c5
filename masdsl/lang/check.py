"""The checker: `check(module, ...) -> list[Diagnostic]`. Collects every error; never raises.

Each rule is a small function over the AST that appends diagnostics; `check()` runs them in
order. A rule that depends on names skips what an earlier rule already reported (one cause,
one diagnostic). Policies and roles are checked in `masdsl.lang.check_roles`, the flow in
`masdsl.lang.check_flow`, expressions in `masdsl.lang.check_exprs`, imports in
`masdsl.lang.check_imports`, the `train { }` block in `masdsl.lang.check_train`. Names of environments, data sources, parsers and functions come from `masdsl.envs.registry.REGISTRY` after
`load_builtins()` and the workflow's `import` files.

>>> from masdsl.lang.parse import parse_text
>>> text = 'env e\\npolicy shared { model: "m" }\\nrole a { policy shard prompt "hi" }\\nflow { start -> a -> end }'
>>> module, _ = parse_text(text, "w.mas")
>>> from masdsl.envs.registry import Registry, EnvSpec
>>> reg = Registry(envs={"e": EnvSpec("e", lambda: None)})
>>> [(d.code, str(d.span)) for d in check(module, text, registry=reg) if d.is_error]
[('missing-statement', 'w.mas:1:1'), ('unknown-policy', 'w.mas:3:17')]
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from masdsl.envs.hf_data import hf, parquet, saved_fields, saved_splits
from masdsl.envs.data_paths import SPLIT_WORDS, resolve_args
from masdsl.envs.loading import TABLE_SUFFIXES, keyed_rows, read_rows, scan_jsonl, table_fields
from masdsl.envs.base import class_problems
from masdsl.envs.registry import load_builtins
from masdsl.errors import DataError, UserError, did_you_mean
from masdsl.lang import ast as A
from masdsl.lang import templates as T
from masdsl.lang.check_exprs import check_exprs, check_parses
from masdsl.lang.check_flow import check_flow, flow_edges, max_turns_of
from masdsl.lang.check_imports import check_imports, note_unchecked
from masdsl.lang.check_roles import check_policies, check_roles
from masdsl.lang.check_sandbox import check_sandbox
from masdsl.lang.check_train import check_train
from masdsl.lang.context import Ctx, file_beside
from masdsl.lang.context import bind as _bind
from masdsl.lang.context import ticks as _ticks
from masdsl.lang.errors import Diagnostic
from masdsl.lang.exprs import NotLiteral, literal
from masdsl.lang.judge import check_judges
from masdsl.lang.source import Span

SPLITS = ("train", "eval")


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


# ---- env, data (imports: check_imports.py) ------------------------------------------------

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
        if c.unknown_excused(decl.name.name, "environment"):
            return
        c.error("unknown-env", f"unknown environment `{decl.name.name}`", decl.name.span,
                label="not a registered environment", notes=(f"registered: {_ticks(c.registry.envs)}",),
                help=did_you_mean(decl.name.name, c.registry.envs))
        return
    c.env_name = spec.name
    c.env_fields = set(spec.fields) if spec.fields else None
    for problem in class_problems(spec.factory):  # what the run would meet at its first episode
        c.error("env-contract", f"environment `{spec.name}`: {problem}", decl.name.span, label="registered by `@env`",
                help="an env class has reset(task), apply(state, role, fields), view(state), success(state) and "
                     "`limits` (docs/extending.md, \"An environment\")")
    args = _literal_args(c, decl.call) if decl.call is not None else None
    if args is not None:
        why = _bind(spec.factory, len(decl.call.args), [k.name.name for k in decl.call.kwargs])
        if why:
            c.error("wrong-arity", f"bad arguments for environment `{spec.name}`: {why}", decl.call.span)
        elif spec.fields_from is not None:
            _fields_from(c, spec, decl.call, args)


def _fields_from(c: Ctx, spec, call: A.Call, args: tuple[list, dict]) -> None:
    """The fields of an env that learns them from its arguments (`env http(url)` asks its server),
    and the env it serves, whose bound functions (`step_reward()`) the workflow may then call."""
    try:
        c.env_fields = set(spec.fields_from(*args[0], **args[1])) or None
        if spec.serves_from is not None:
            c.served_env = spec.serves_from(*args[0], **args[1]) or "*"
    except UserError as exc:
        c.served_env = "*"  # one cause, one diagnostic: no `wrong-env` for each bound function as well
        c.error("env-unreachable", f"cannot learn the fields of environment `{spec.name}`: {exc}", call.span,
                label="its fields are asked here",
                help="or declare the fields, `fields=[\"total\", ...]`, to check without the server")


def _jsonl_fields(c: Ctx, lit: A.StrLit) -> set[str] | None:
    """The field names of a data file's first row (of a parquet/Arrow file: its columns)."""
    path = c.resolve(lit.value)
    if not path.is_file():
        c.error("missing-file", f"data file `{lit.value}` does not exist", lit.span, label="no such file",
                notes=(f"looked for {path}",), help=file_beside(lit.value, path))
        return None
    if path.suffix in TABLE_SUFFIXES:
        try:
            return set(table_fields(path))
        except DataError as exc:
            c.error("bad-data-file", f"data file `{lit.value}` cannot be read: {exc}", lit.span)
            return None
    ok, row = _scan_rows(c, lit.value, path, lit.span)
    if ok and row is None:
        c.error("bad-data-file", f"data file `{lit.value}` must hold one JSON object per line", lit.span,
                label="the file is empty")
    return set(row) if row is not None else None


def _scan_rows(c: Ctx, written: str, path: Path, span: Span, unique_ids: bool = True) -> tuple[bool, dict | None]:
    """Every row of a JSONL (or JSON list, or gzipped) data file, read as the run reads it; the
    first malformed one is `bad-data-file` naming its line. (no mistake, the first row or None)."""
    try:
        if path.suffix in (".json", ".gz"):
            rows = keyed_rows(read_rows(path), path)
            return True, (rows[0] if rows else None)
        first, line, problem = scan_jsonl(path, unique_ids)
    except (OSError, DataError) as exc:
        c.error("bad-data-file", f"data file `{written}` cannot be read: {exc}", span)
        return False, None
    if line is not None:
        c.error("bad-data-file", f"data file `{written}` has a malformed row at line {line}: {problem}", span,
                label=f"line {line} of this file", notes=(f"{path}:{line}",))
        return False, None
    return True, first


def _arg(call: A.Call, index: int, name: str) -> A.Expr | None:
    if len(call.args) > index:
        return call.args[index]
    return next((k.value for k in call.kwargs if k.name.name == name), None)


def _local_fields(c: Ctx, call: A.Call, fn, args: list, kwargs: dict) -> set[str] | None:
    """The task fields of `hf(folder, split)` or `parquet(path)` when the data is on this machine
    (read from its metadata or schema, no row loaded; `args`, `kwargs` with their paths resolved as
    the data source reads them, relative to the `.mas` file); None (anything goes) when it is not,
    as for a hub name."""
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    if fn is parquet:
        path = Path(str(a["path"])).expanduser()
        if not path.is_file() or path.suffix not in TABLE_SUFFIXES:
            return None
        try:
            return set(table_fields(path))
        except DataError as exc:
            c.error("bad-data-file", f"data file `{a['path']}` cannot be read: {exc}", call.args[0].span if call.args else call.span)
            return None
    name, split = a["name"], a["split"]
    if not isinstance(name, str) or not isinstance(split, str):
        return None
    splits = saved_splits(name)
    if splits is not None and split not in splits:
        node = _arg(call, 1, "split")
        c.error("invalid-value", f"the saved dataset `{name}` has no split `{split}`", node.span if node else call.span,
                label="not one of its splits" if node else "`split` defaults to \"train\"",
                notes=(f"its splits: {_ticks(splits)}",), help=did_you_mean(split, splits, fmt='`split="{}"`') or "give `split` one of its splits")
        return None
    found = saved_fields(name, split)
    return set(found) if found is not None else None


def _check_data_files(c: Ctx, call: A.Call, spec, args: list, kwargs: dict) -> None:
    """Every row of the JSONL files a data source's path arguments name (`apps("x.jsonl")`), when
    they are on this machine (a file not here is the run's to report: it may live elsewhere)."""
    sig = inspect.signature(spec.fn)
    names, given = list(sig.parameters), sig.bind_partial(*args, **kwargs).arguments
    r_args, r_kwargs = resolve_args(spec, args, kwargs, c.base_dir)
    resolved = sig.bind_partial(*r_args, **r_kwargs).arguments
    for name in spec.paths:
        if not isinstance(given.get(name), str) or given[name] in SPLIT_WORDS:
            continue
        path = Path(resolved[name]).expanduser()
        if path.is_file() and path.suffix not in TABLE_SUFFIXES:
            node = _arg(call, names.index(name), name)
            _scan_rows(c, str(given[name]), path, node.span if node is not None else call.span, unique_ids=False)


def _check_arguments(c: Ctx, call: A.Call, spec, args: list, kwargs: dict) -> None:
    """A data source's own judgement of a call's literal arguments (`DataSourceSpec.check`:
    `reasoning_gym("gms_symbolic")`), each mistake reported at its argument."""
    if spec.check is None:
        return
    try:
        found = spec.check(*args, **kwargs)
    except DataError as exc:  # it cannot judge on this machine (its package is missing): say so
        c.error("invalid-value", str(exc), call.func.span)
        return
    names = list(inspect.signature(spec.fn).parameters)
    for param, message, hint in found:
        node = _arg(call, names.index(param) if param in names else len(call.args), param)
        c.error("invalid-value", f"{spec.name}(...): {message}", node.span if node is not None else call.span, help=hint)


def check_data(c: Ctx) -> None:
    """`data SPLIT source(args)` or `data SPLIT "file.jsonl"` (or .parquet/.arrow): known split, registered source or
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
            fields.append(None)
            if c.unknown_excused(name, "data source"):
                continue
            c.error("unknown-data-source", f"unknown data source `{name}`", d.call.func.span,
                    label="not a registered data source", notes=(f"registered: {_ticks(c.registry.data_sources)}",),
                    help=did_you_mean(name, c.registry.data_sources))
            continue
        lits = _literal_args(c, d.call)
        if lits is not None:
            why = _bind(spec.fn, len(d.call.args), [k.name.name for k in d.call.kwargs])
            if why:
                c.error("wrong-arity", f"bad arguments for data source `{name}`: {why}", d.call.span)
            elif spec.fn in (hf, parquet):
                fields.append(_local_fields(c, d.call, spec.fn, *resolve_args(spec, *lits, c.base_dir)))
                continue
            else:
                _check_data_files(c, d.call, spec, *lits)
                _check_arguments(c, d.call, spec, *lits)
        fields.append(set(spec.fields) if spec.fields else None)
    if fields and all(f is not None for f in fields):
        c.task_fields = set.intersection(*fields) | {"id"}
    if "train" not in seen:
        where = c.module.data[0].span if c.module.data else (c.module.envs[0].span if c.module.envs else None)
        if where is not None:
            c.error("missing-statement", "the workflow has no `data train` line", where,
                    help="add a training split, for example `data train humaneval(\"train\")` or `data train \"tasks.jsonl\"`")


# ---- templates, train, warnings ------------------------------------------------------------

def check_templates(c: Ctx) -> None:
    """Prompts and system texts are valid Jinja2 and only use variables the workflow has."""
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
                            notes=(f"looked for {path}",), help=file_beside(lit.value, path))
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
    if lit.long:
        return T.prompt_text(text[lit.span.start : lit.span.end], lit.span.start)
    return T.TemplateText(lit.value, (lit.span.start + 1,) * (lit.value.count("\n") + 1))


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
         check_exprs, check_flow, check_templates, check_judges, check_train, check_sandbox,
         check_warnings, note_unchecked)


def run_checks(module: A.Module, text: str, base_dir: Path | None = None, registry=None) -> Ctx:
    """Run every rule; the returned `Ctx` holds the diagnostics and what the rules learnt."""
    if registry is None:
        registry = load_builtins()
    c = Ctx(module, text, base_dir, registry)
    for rule in RULES:
        rule(c)
    c.diags.sort(key=Diagnostic.sort_key)
    return c


def summary_of(c: Ctx) -> dict[str, Any]:
    """`{"roles", "edges", "max_turns"}` of a module that checked without errors: what its
    `Workflow` will have (`len(wf.roles)`, `wf.graph.number_of_edges()`, `wf.max_turns`)."""
    flow = c.module.flows[0]
    turns = [i for i in flow.items if isinstance(i, A.MaxTurns)]
    return {"roles": len({r.name.name for r in c.module.roles}),
            "edges": len({(s.key, d.key) for s, d, _, _ in flow_edges(flow)}),
            "max_turns": literal(turns[0].expr) if turns else None}


def check(module: A.Module, text: str, base_dir: Path | None = None, registry=None) -> list[Diagnostic]:
    """Every diagnostic of a parsed module, sorted by position."""
    return run_checks(module, text, base_dir, registry).diags
