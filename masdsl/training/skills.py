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


def skill_rows(before: Mapping[str, float], after: Mapping[str, float]) -> list[tuple[str, str]]:
    """The run summary's lines: per role, each metric's eval value before -> after training, and
    its first turn's when the role acts more than once.

    >>> skill_rows({"skill/eval/tool/correct": 0.25, "skill/eval/tool/correct/turn0": 0.2,
    ...             "skill/eval/tool/correct/turn1": 0.3},
    ...            {"skill/eval/tool/correct": 0.5, "skill/eval/tool/correct/turn0": 0.4,
    ...             "skill/eval/tool/correct/turn1": 0.6})
    [('skill tool (eval, before -> after)', 'correct 25.0 % -> 50.0 % (turn 0: 20.0 % -> 40.0 %)')]
    """
    keys = [k for k in dict.fromkeys([*before, *after]) if k.startswith("skill/eval/") and k.count("/") == 3]
    by_role: dict[str, list[str]] = {}
    pct = lambda v: "-" if v is None else f"{100 * v:.1f} %"  # noqa: E731
    for key in keys:
        role, name = key.split("/")[2:4]
        text = f"{name} {pct(before.get(key))} -> {pct(after.get(key))}"
        turns = [k for k in {**before, **after} if k.startswith(key + "/turn")]
        if len(turns) > 1:
            first = f"{key}/turn0"
            text += f" (turn 0: {pct(before.get(first))} -> {pct(after.get(first))})"
        by_role.setdefault(role, []).append(text)
    return [(f"skill {role} (eval, before -> after)", "; ".join(texts)) for role, texts in by_role.items()]
