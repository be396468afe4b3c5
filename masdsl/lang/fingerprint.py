"""What a compiled workflow means, part by part: `fingerprint(workflow) -> {part: digest}`.

A checkpoint keeps the fingerprint of the workflow it was trained on
(`masdsl.training.checkpoint.TrainState.workflow_fingerprint`), so `masdsl run --resume`,
`masdsl eval --checkpoint` and `masdsl export` compare what the workflow means, not its text:
comments, blank lines, the layout `masdsl fmt` writes and source positions change no part.
What does count: the workflow's name, the env and its arguments, the data lines, the imports,
each policy, each role's policy, system text, prompt, `sample { }` block, parses, reward and
advantage estimator (a part only when the role names one other than `grpo`), the
flow (edges, guards, `max_turns`), `team`, `alpha`, `success`, and each key of `train { }`. The
description string is prose for people (and MLflow's note), and a role's `metric` lines are
measured, never trained on, so neither counts.

Each part's value is its canonical text when short (so a refusal can show the old and new value:
`train.lr changed 0.001 -> 0.01`), else `sha256:` and the first 16 hex digits of that text.
`changes(old, new)` names the parts that differ.

>>> import masdsl
>>> text = open("tests/support/toy_data/toy_digits.mas").read()
>>> a = fingerprint(masdsl.loads(text, base_dir="tests/support/toy_data"))
>>> a["role.namer.reward"], a["train.lr"]
('same(digit, task.target)', '0.001')
>>> b = fingerprint(masdsl.loads("# a comment\\n" + text.replace("lr: 0.001", "lr: 0.01"), base_dir="tests/support/toy_data"))
>>> changes(a, b)
['train.lr changed 0.001 -> 0.01']
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Mapping

from masdsl.lang import ast as A
from masdsl.lang.workflow import Workflow

# Bumped whenever the canonical form below changes: a checkpoint of another format is compared by
# its text hash instead (`masdsl.training.checkpoint`), so a new masdsl never calls an old run "changed".
FORMAT = "1"
FORMAT_KEY = "fingerprint_format"
SHOWN_CHARS = 80  # a part this short is kept as text (shown in refusals), a longer one as a hash
EXPRESSION_PARTS = ("reward", "parse", "team", "success")  # shown in backticks


def fingerprint(workflow: Workflow) -> dict[str, str]:
    """{part: canonical text or `sha256:...`} of everything the workflow means (see above)."""
    wf = workflow
    parts: dict[str, Any] = {
        "workflow": wf.name,
        "env": {"name": wf.env, "args": dict(wf.env_args)},
        "imports": [_as_written(p, wf) for p in wf.imports],
        "flow": _Text(_flow(wf)),
        "flow.max_turns": wf.max_turns,
        "team": _expr(wf.team),
        "alpha": wf.alpha,
        "success": _expr(wf.success),
    }
    for split, d in wf.data.items():
        parts[f"data.{split}"] = ({"file": _as_written(d.path, wf)} if d.path is not None else
                                  {"source": d.source, "args": list(d.args), "kwargs": dict(d.kwargs)})
    for name, p in wf.policies.items():
        parts.update({f"policy.{name}.model": p.model, f"policy.{name}.lora": p.lora, f"policy.{name}.frozen": p.frozen,
                      f"policy.{name}.options": dict(p.options),
                      f"policy.{name}.chat_template_kwargs": p.chat_template_kwargs})
        if (p.lr, p.train_every, p.frozen_until) != (None, 1, 0):  # only when set: older checkpoints still match
            parts[f"policy.{name}.schedule"] = {"lr": p.lr, "train_every": p.train_every, "frozen_until": p.frozen_until}
    for name, r in wf.roles.items():
        parts.update({f"role.{name}.policy": r.policy, f"role.{name}.system": r.system,
                      f"role.{name}.prompt": r.prompt, f"role.{name}.sample": dict(r.sample),
                      f"role.{name}.parse": _Text("; ".join(f"{p.name} = {_expr(p.expr)}" for p in r.parses)),
                      f"role.{name}.reward": _expr(r.reward)})
        if r.advantage != "grpo":  # only when named: a checkpoint from before the `advantage` line still matches
            parts[f"role.{name}.advantage"] = r.advantage
    for key, value in _flat(wf.train, "train"):
        parts[key] = value
    out = {key: _digest(value) for key, value in parts.items()}
    out[FORMAT_KEY] = FORMAT
    return out


def changed_parts(old: Mapping[str, str], new: Mapping[str, str],
                  ignore: Callable[[str], bool] | None = None) -> list[str]:
    """The parts whose values differ (or that only one fingerprint has), old ones first, in order."""
    return [part for part in [*old, *(p for p in new if p not in old)]
            if part != FORMAT_KEY and not (ignore is not None and ignore(part)) and old.get(part) != new.get(part)]


def changes(old: Mapping[str, str], new: Mapping[str, str],
            ignore: Callable[[str], bool] | None = None) -> list[str]:
    """One line per part that differs between two fingerprints (parts `ignore(part)` leaves out skipped).

    >>> changes({"train.lr": "0.001", "role.a.reward": "sha256:1"}, {"role.a.reward": "sha256:2", "alpha": "0.5"})
    ['train.lr was removed (it was 0.001)', "role a's reward changed", 'alpha was added (0.5)']
    """
    out = []
    for part in changed_parts(old, new, ignore):
        label, was, now = _label(part), _shown(part, old.get(part)), _shown(part, new.get(part))
        if part not in new:
            out.append(f"{label} was removed" + (f" (it was {was})" if was else ""))
        elif part not in old:
            out.append(f"{label} was added" + (f" ({now})" if now else ""))
        else:
            out.append(f"{label} changed" + (f" {was} -> {now}" if was and now else ""))
    return out


def is_setting(part: str) -> bool:
    """A part the command line overrides anyway (`train.<key>`, `sample.<role>.<key>`), or the
    `data eval` line (tasks the weights were only measured on, e.g. held-out templates against
    new instances of the trained ones): what trained weights are does not depend on it, so
    evaluating or exporting a checkpoint ignores it.

    >>> is_setting("data.eval"), is_setting("data.train"), is_setting("role.tool.reward")
    (True, False, False)
    """
    return (part.startswith("train.") or part == "data.eval"
            or (part.startswith("role.") and part.endswith((".sample", ".advantage")))
            or (part.startswith("policy.") and part.endswith(".schedule")))


def expr_text(node: Any) -> str:
    """An expression's canonical text: one space around operators, after commas, none inside
    brackets; operations nested in others in parentheses, so `(a + b) * c` and `a + b * c` differ.

    >>> from masdsl.lang.workflow import Span
    >>> s = Span("w.mas", 1, 1, 1, 1, 0, 0)
    >>> print(expr_text(A.BinOp("and", A.Call(A.Ident("f", s), (A.Name("x", s),), (), s),
    ...                         A.Unary("not", A.Attr(A.Ident("task", s), A.Ident("ok", s), s), s), s, s)))
    f(x) and not task.ok
    """
    text = _text(node)
    return text[1:-1] if isinstance(node, A.BinOp) else text  # no parentheses around the whole


def _text(node: Any) -> str:
    if isinstance(node, A.Const):
        return json.dumps(node.value, ensure_ascii=False)
    if isinstance(node, A.Name):
        return node.name
    if isinstance(node, A.Attr):
        return f"{node.obj.name}.{node.attr.name}"
    if isinstance(node, A.ListExpr):
        return "[" + ", ".join(_text(i) for i in node.items) + "]"
    if isinstance(node, A.Call):
        args = [_text(a) for a in node.args] + [f"{k.name.name}={_text(k.value)}" for k in node.kwargs]
        return f"{node.func.name}({', '.join(args)})"
    if isinstance(node, A.BinOp):
        return f"({_text(node.left)} {node.op} {_text(node.right)})"
    if isinstance(node, A.Unary):
        return f"{node.op}{' ' if node.op == 'not' else ''}{_text(node.operand)}"
    return _canonical(_without_spans(node))  # a node kind added later still counts, positions left out


def _without_spans(node: Any) -> Any:
    if dataclasses.is_dataclass(node):
        return {"kind": type(node).__name__, **{f.name: _without_spans(getattr(node, f.name))
                                                for f in dataclasses.fields(node) if "span" not in f.name}}
    if isinstance(node, (list, tuple)):
        return [_without_spans(x) for x in node]
    return node


class _Text(str):
    """Text that is already canonical (an expression, the flow): kept as is, not JSON-quoted."""


def _expr(e: Any) -> _Text | None:
    if e is None:
        return None
    node = getattr(e, "node", None)  # a CompiledExpr holds its syntax tree; its `source` keeps the layout
    return _Text(expr_text(node) if node is not None else e.source)


def _flow(wf: Workflow) -> str:
    """The edges in the order they are tried: per source node (sorted), in file order."""
    edges = sorted(wf.graph.edges(data=True), key=lambda e: (e[0], e[2]["order"]))
    return "; ".join(f"{u} -> {v}" + (f" when {_expr(d['guard'])}" if d.get("guard") is not None else "")
                     for u, v, d in edges)


def _as_written(path: str | os.PathLike, wf: Workflow) -> str:
    """A data or import path as the file wrote it: relative to the workflow's folder. The compiler
    resolved it there, and the same workflow loaded from elsewhere (the run folder's copy, another
    checkout) must give the same part. A path outside that folder given absolute stays absolute."""
    base = wf.path.parent if wf.path is not None else Path(".")
    p = Path(path)
    # the compiler joined a relative path onto the folder (`base/../lib/x.py`, not normalised): so a
    # `..` path gives the same part whether the file was loaded by an absolute or a relative name
    joined = not p.is_absolute() or (base.is_absolute() and p.parts[: len(base.parts)] == base.parts)
    return Path(os.path.relpath(p, base)).as_posix() if joined else str(p)


def _flat(block: Mapping[str, Any], prefix: str):
    """(dotted key, value) of a nested `train { }` block."""
    for key, value in block.items():
        if isinstance(value, Mapping):
            yield from _flat(value, f"{prefix}.{key}")
        else:
            yield f"{prefix}.{key}", value


def _canonical(value: Any) -> str:
    if isinstance(value, _Text):
        return value
    return json.dumps(value, sort_keys=True, separators=(", ", ": "), ensure_ascii=False, default=str)


def _digest(value: Any) -> str:
    text = _canonical(value)
    if len(text) <= SHOWN_CHARS and "\n" not in text and not text.startswith("sha256:"):
        return text
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _shown(part: str, value: str | None) -> str:
    """The value as a refusal shows it, or "" when only its hash is kept."""
    if value is None or value.startswith("sha256:"):
        return ""
    return f"`{value}`" if part.rsplit(".", 1)[-1] in EXPRESSION_PARTS else value


def _label(part: str) -> str:
    """`role.coder.reward` -> `role coder's reward`; `data.eval` -> `data eval`."""
    head, _, rest = part.partition(".")
    if head in ("role", "policy"):
        name, _, what = rest.rpartition(".")
        return f"{head} {name}'s {what}"
    if head == "data":
        return f"{head} {rest}"
    if part == "flow.max_turns":
        return "max_turns"
    if head in ("env", "flow", "imports"):
        return f"the {head}"
    if part == "workflow":
        return "the workflow's name"
    return part
