"""Checker rules for policies and roles: `policy NAME { ... }` keys, and each `role`'s one
`policy`, one `prompt`, optional `system`/`reward`/`sample`/`advantage` lines, its `parse` fields and
its `metric` lines.

`SAMPLE_KEYS` are the options a `sample { }` block accepts (also what `masdsl.config` and the
executor accept); `RESERVED` the names a role cannot take.

>>> sorted(POLICY_KEYS)
['chat_template_kwargs', 'frozen', 'frozen_until', 'lora', 'lr', 'model', 'train_every']
"""

from __future__ import annotations

from typing import Any

from masdsl.config import SAMPLE_RANGES  # shared with the config's `sample.<role>` overrides
from masdsl.config_schema import ADVANTAGE_MIN_K, ADVANTAGES
from masdsl.errors import did_you_mean
from masdsl.lang import ast as A
from masdsl.lang.context import ANY, BOOL, LIST, NUMBER, STR, Ctx
from masdsl.lang.context import ticks as _ticks

RESERVED = {"start", "end", "task", "env", "turn", "output", "role", "history", "ok", "true", "false",
            "and", "or", "not", "when"}
SAMPLE_KEYS = {"temperature": "number", "top_p": "number", "top_k": "number", "min_p": "number",
               "max_tokens": "number", "stop": "list", "seed": "number", "repetition_penalty": "number",
               "samples": "number"}
POLICY_KEYS = {"model": "str", "lora": "block", "frozen": "bool", "chat_template_kwargs": "block", "lr": "number",
               "train_every": "number", "frozen_until": "number"}
# the schedule keys of a policy block (masdsl.plan.schedule): (test, what the value must be)
SCHEDULE_RANGES = {"lr": (lambda v: v > 0, "positive (the policy's AdamW learning rate)"),
                   "train_every": (lambda v: isinstance(v, int) and v >= 1, "a whole number of at least 1"),
                   "frozen_until": (lambda v: isinstance(v, int) and v >= 0, "a whole number of at least 0 (a step)")}


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


def _check_sample_ranges(c: Ctx, block: A.Block) -> None:
    for e in block.entries:
        rule = SAMPLE_RANGES.get(e.key.name)
        if rule and _value_kind(e.value) == NUMBER and not rule[0](e.value.value):
            c.error("invalid-value", f"`{e.key.name}` must be {rule[1]}, got {e.value.value}", e.value.span)


def check_policies(c: Ctx) -> None:
    """`policy NAME { model: "...", lora: {...}, frozen: true, chat_template_kwargs: {...}, lr: 1e-5,
    train_every: 2, frozen_until: 10 }`: unique names, a `model`, schedule values in range."""
    seen: dict[str, A.PolicyDecl] = {}
    for p in c.module.policies:
        if p.name.name in seen:
            c.error("duplicate-name", f"policy `{p.name.name}` is declared twice", p.name.span,
                    label="second declaration", related=((seen[p.name.name].name.span, "first declared here"),))
        seen.setdefault(p.name.name, p)
        _check_block_keys(c, p.block, POLICY_KEYS, f"policy `{p.name.name}`", strict=False)
        for e in p.block.entries:
            rule = SCHEDULE_RANGES.get(e.key.name)
            if rule and _value_kind(e.value) == NUMBER and not rule[0](e.value.value):
                c.error("invalid-value", f"`{e.key.name}` of policy `{p.name.name}` must be {rule[1]}, got {e.value.value}",
                        e.value.span)
        if p.block.get("model") is None:
            c.error("missing-statement", f"policy `{p.name.name}` has no `model`", p.name.span,
                    help='add `model: "smollm2-135m-instruct"` (or a model folder or hub name)')
    _check_alternate(c, seen)


def _check_alternate(c: Ctx, policies: dict[str, A.PolicyDecl]) -> None:
    """`train { alternate: ["a", "b"] }` names declared policies (the run plan checks the rest)."""
    entry = c.module.trains[0].block.get("alternate") if c.module.trains else None
    if entry is None or not isinstance(entry.value, A.ListValue):
        return
    for item in entry.value.items:
        name = item.value if isinstance(item, A.Value) else None
        if isinstance(name, str) and name not in policies:
            c.error("unknown-policy", f"`alternate` names unknown policy `{name}`", item.span,
                    label="not a declared policy", notes=(f"policies: {_ticks(policies)}",),
                    help=did_you_mean(name, policies, fmt='`"{}"`'))


def _check_metric_names(c: Ctx, role: A.RoleDecl) -> None:
    """`metric NAME = expr`: names unique within the role (each becomes `skill/<split>/<role>/<NAME>`)."""
    seen: dict[str, A.RoleMetric] = {}
    for m in role.of(A.RoleMetric):
        first = seen.setdefault(m.name.name, m)
        if first is not m:
            c.error("duplicate-name", f"metric `{m.name.name}` is declared twice in role `{role.name.name}`", m.name.span,
                    related=((first.name.span, "first here"),), help="give each metric of a role its own name")


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


def _check_advantage(c: Ctx, role: A.RoleDecl) -> None:
    """`advantage NAME`: a known estimator, and the K the file sets (the role's `sample { samples }`,
    else `train { samples }`) as large as the estimator needs (an override is the run plan's to check)."""
    item = _once(c, role, A.RoleAdvantage, "advantage", required=False)
    if item is None:
        return
    name, who = item.name.name, role.name.name
    if name not in ADVANTAGES:
        c.error("unknown-estimator", f"role `{who}` names an unknown advantage estimator `{name}`", item.name.span,
                label="not an estimator", notes=(f"estimators: {_ticks(ADVANTAGES)}",),
                help=did_you_mean(name, ADVANTAGES) or "leave the line out for `grpo`, the default")
        return
    need = ADVANTAGE_MIN_K.get(name, 1)
    own = next((x.block.get("samples") for x in role.of(A.RoleSample) if x.block.get("samples")), None)
    samples = own or (c.module.trains[0].block.get("samples") if c.module.trains else None)
    k = samples.value.value if samples is not None and isinstance(samples.value, A.Value) else None
    if isinstance(k, int) and not isinstance(k, bool) and k < need:
        c.error("estimator-group-size", f"`advantage {name}` needs groups of at least {need} candidates; `samples` is {k}",
                item.name.span, label=f"needs K >= {need}", related=((samples.value.span, "K set here"),),
                help=f"use `samples: {need}` or more, or an estimator that takes a group of one (`grpo`, `drgrpo`)")


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
        _check_advantage(c, r)
        _check_metric_names(c, r)
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
