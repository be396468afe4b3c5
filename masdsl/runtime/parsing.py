"""Parsing a candidate's text into a role's fields (`parse FIELD = parser(output, ...)`).

A parser that returns None or raises gives the parser's registered `empty` value (bound by the
compiler: `ParseSpec.empty`) and sets the
role's implicit `ok` field to False; fields always include `output` and `ok`.

>>> from masdsl.lang.workflow import RoleSpec
>>> initial_fields(RoleSpec("coder", "p", "prompt"))
{'output': '', 'ok': False}
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from masdsl.envs.env_protocol import jsonable
from masdsl.lang.workflow import EvalContext, Expr, RoleSpec
from masdsl.runtime.sampling import describe_error

def initial_fields(role: RoleSpec) -> dict[str, Any]:
    """A role's fields before it first acts: each parser's empty value, `output` "", `ok` False."""
    fields = {p.name: copy.deepcopy(p.empty) for p in role.parses}
    return {**fields, "output": "", "ok": False}


def parse_output(role: RoleSpec, text: str, task: Mapping[str, Any], fields: Mapping[str, Mapping[str, Any]],
                 turn: int, errors: list[str]) -> dict[str, Any]:
    """A candidate's fields: each `parse` in order (None or an exception -> the parser's empty
    value and `ok` False), plus `output` and `ok`."""
    own: dict[str, Any] = {"output": text}
    ok = True
    for p in role.parses:
        ctx = EvalContext(task=task, fields={**fields, role.name: own}, turn=turn, role=role.name, output=text)
        try:
            value = p.expr.evaluate(ctx)
        except Exception as exc:  # noqa: BLE001 - a parser failure is a parse failure
            errors.append(describe_error(f"parse `{p.name}` of `{role.name}`", p.expr, exc))
            value = None
        if value is None:
            ok, value = False, copy.deepcopy(p.empty)
        own[p.name] = value
    own["ok"] = ok
    return own


def json_safe(value: Any) -> Any:
    """A JSON-serialisable copy (unknown objects become their repr).

    >>> json_safe({"a": (1, 2), "b": {3}, "c": None})
    {'a': [1, 2], 'b': '{3}', 'c': None}
    """
    return jsonable(value)  # the env protocol's conversion: a record reads as a served env's view does
