"""A task's reference answer, for the person reading a run (`masdsl view`, `masdsl trace`).

A workflow never names its tasks' answer field: the reference is whatever task fields its
scoring reads. `reference_fields` takes them from the `success` line (`correct(solver.answer,
task.answer)` -> `answer`), else the `team` line, else the roles' rewards, in that order (a
`success` that reads no task field, `success solved()`, falls through); when none reads a task
field (a game env whose `success` is its own), the usual names of a reference, when the task has
them. A field that holds a whole record (reasoning-gym's `task.entry`, which its scorer reads) gives
way to the usual names too: the reader wants the answer, and every record of the episode keeps
a copy. `reference_of` is what each record of an episode keeps (`StepRecord.reference`).

>>> from masdsl.lang.parse import parse_text
>>> m, _ = parse_text('role a { reward same(x, task.target) }\\nsuccess correct(a.x, task.answer)', "w.mas")
>>> fields_of(m.successes[0].expr), fields_of(m.roles[0].items[0].expr)
(['answer'], ['target'])
>>> reference_of(("answer",), {"id": "t0", "question": "1 + 6?", "answer": "7"})
{'answer': '7'}
>>> reference_of((), {"id": "t0", "puzzle": "..", "solution": "123"})
{'solution': '123'}
>>> reference_of(("entry",), {"id": "t0", "answer": "42", "entry": {"answer": "42", "answer_cot": "..."}})
{'answer': '42'}
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

from masdsl.lang import ast as A
from masdsl.lang.exprs import subexpressions
from masdsl.lang.workflow import Workflow

# the names a reference usually has, for a workflow whose scoring reads no task field
USUAL = ("answer", "solution", "target", "expected", "reference", "ground_truth", "gold")
MAX_CHARS = 2000  # a reference longer than this (a test suite) is cut: the page shows the start


def fields_of(expr: object) -> list[str]:
    """The `task.X` fields an expression (its AST, or a compiled one's) reads, in order, each once."""
    return list(dict.fromkeys(a.attr.name for a in subexpressions(getattr(expr, "node", expr))
                              if isinstance(a, A.Attr) and a.obj.name == "task" and a.attr.name != "id"))


def reference_fields(workflow: Workflow) -> tuple[str, ...]:
    """The task fields a compiled workflow scores against (see the module docstring)."""
    for exprs in ([workflow.success], [workflow.team], [r.reward for r in workflow.roles.values()]):
        found = [f for e in exprs if e is not None for f in fields_of(e)]
        if found:
            return tuple(dict.fromkeys(found))
    return ()


def reference_of(fields: Iterable[str], task: Mapping[str, Any]) -> dict[str, Any]:
    """The task's values of `fields` that are not whole records (none: of the `USUAL` names it
    has; neither: the records), long text cut."""
    present = [f for f in fields if f in task]
    names = ([f for f in present if not isinstance(task[f], Mapping)] or [n for n in USUAL if n in task]
             or present)
    return {n: _short(task[n]) for n in names}


def _short(value: object) -> object:
    if isinstance(value, str) and len(value) > MAX_CHARS:
        return value[:MAX_CHARS] + f"... ({len(value)} characters)"
    if not isinstance(value, (str, int, float, bool, type(None))):
        text = json.dumps(value, ensure_ascii=False, default=str)
        return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + f"... ({len(text)} characters)"
    return value
