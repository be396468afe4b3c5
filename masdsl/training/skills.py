"""Per-role skill metrics: the role's `metric NAME = expr` lines, aggregated over a rollout.

A role's reward says what it is paid for; its metrics say what it can do (for a tool role: its
program ran and printed a number, the number was right). They are evaluated on the same view as
the reward, for every candidate (`StepRecord.metrics`), and never enter the reward. Here they
become numbers a run reports and a summary compares:

- `skill/<split>/<role>/<name>`: the mean over all of the role's candidates (training: every
  sampled candidate; evaluation: the greedy replies), and
- `skill/<split>/<role>/<name>/turn<t>`: the same for its `t`-th turn, so a role's first try
  (before it saw any other role's answer) reads apart from its later ones.

>>> from types import SimpleNamespace as R
>>> recs = [R(role="tool", turn=0, metrics={"ok": 1.0}), R(role="tool", turn=0, metrics={"ok": 0.0}),
...         R(role="tool", turn=1, metrics={"ok": 1.0}), R(role="planner", turn=0, metrics={})]
>>> skill_shares(skill_counts(recs), "eval")
{'skill/eval/tool/ok': 0.666667, 'skill/eval/tool/ok/turn0': 0.5, 'skill/eval/tool/ok/turn1': 1.0}
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from masdsl.training.significance import Comparison, change_text, mcnemar_text

SkillCounts = dict[tuple[str, str, int], list[float]]  # (role, metric, turn) -> [sum of values, candidates]


def skill_counts(records: Iterable[Any], into: SkillCounts | None = None) -> SkillCounts:
    """Sum and count each role's metric values by turn, added to `into` (a rollout that streams
    its records to disk counts them as they pass)."""
    out: SkillCounts = {} if into is None else into
    for r in records:
        for name, value in (getattr(r, "metrics", None) or {}).items():
            c = out.setdefault((r.role, name, r.turn), [0.0, 0])
            c[0] += float(value)
            c[1] += 1
    return out


def skill_shares(counts: Mapping[tuple[str, str, int], list[float]], split: str) -> dict[str, float]:
    """`skill/<split>/<role>/<name>` over all turns, then per turn, rounded to 6."""
    totals: dict[tuple[str, str], list[float]] = {}
    per_turn: dict[str, float] = {}
    for (role, name, turn), (total, n) in sorted(counts.items()):
        t = totals.setdefault((role, name), [0.0, 0])
        t[0], t[1] = t[0] + total, t[1] + n
        per_turn[f"skill/{split}/{role}/{name}/turn{turn}"] = round(total / n, 6) if n else 0.0
    out = {f"skill/{split}/{role}/{name}": round(total / n, 6) if n else 0.0 for (role, name), (total, n) in totals.items()}
    return {**out, **per_turn}


def skill_rows(before: Mapping[str, float], after: Mapping[str, float],
               tested: Mapping[str, Comparison] | None = None) -> list[tuple[str, str]]:
    """The run summary's lines: per role, each metric's eval value before -> after training, and
    its first turn's when the role acts more than once. With `tested` (`"role/metric"` -> its
    turn-0 values compared per task: `masdsl.training.significance`), the turn-0 rates carry their
    Wilson interval over the tasks and McNemar's test of before vs after.

    >>> skill_rows({"skill/eval/tool/correct": 0.25, "skill/eval/tool/correct/turn0": 0.2,
    ...             "skill/eval/tool/correct/turn1": 0.3},
    ...            {"skill/eval/tool/correct": 0.5, "skill/eval/tool/correct/turn0": 0.4,
    ...             "skill/eval/tool/correct/turn1": 0.6})
    [('skill tool (eval, before -> after)', 'correct 25.0 % -> 50.0 % (turn 0: 20.0 % -> 40.0 %)')]

    A role that acts once, its metric compared on 10 tasks (1 lost, 6 gained):

    >>> from masdsl.training.significance import compare
    >>> c = compare({f"t{i}": float(i == 0) for i in range(10)}, {f"t{i}": float(1 <= i <= 6) for i in range(10)})
    >>> skill_rows({"skill/eval/tool/correct": 0.1}, {"skill/eval/tool/correct": 0.6}, {"tool/correct": c})[0][1]
    'correct 10.0 % [1.8, 40.4] -> 60.0 % [31.3, 83.2] (10 tasks; McNemar 1 lost, 6 gained, p 0.125)'
    """
    tested = tested or {}
    keys = [k for k in dict.fromkeys([*before, *after]) if k.startswith("skill/eval/") and k.count("/") == 3]
    by_role: dict[str, list[str]] = {}
    pct = lambda v: "-" if v is None else f"{100 * v:.1f} %"  # noqa: E731
    for key in keys:
        role, name = key.split("/")[2:4]
        test = tested.get(f"{role}/{name}")
        turns = [k for k in {**before, **after} if k.startswith(key + "/turn")]
        first = f"{key}/turn0"
        if len(turns) > 1:  # all turns, then the first try apart
            text = f"{name} {pct(before.get(key))} -> {pct(after.get(key))}"
            text += (f" (turn 0: {change_text(test)}, {test['tasks']} tasks; {mcnemar_text(test)})" if test else
                     f" (turn 0: {pct(before.get(first))} -> {pct(after.get(first))})")
        elif test:  # one turn: the turn-0 values are the metric's
            text = f"{name} {change_text(test)} ({test['tasks']} tasks; {mcnemar_text(test)})"
        else:
            text = f"{name} {pct(before.get(key))} -> {pct(after.get(key))}"
        by_role.setdefault(role, []).append(text)
    return [(f"skill {role} (eval, before -> after)", "; ".join(texts)) for role, texts in by_role.items()]
