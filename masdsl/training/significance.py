"""Whether a run's change is real: its first and last evaluation compared task by task.

Two bare rates (`success/eval` 0.172 -> 0.938) do not say whether training changed anything. The
evaluations before and after training ran the same eval tasks, so the unit is the task
(`masdsl/stats.py`):

- per task, its episode success (the mean over its `train.eval_samples` episodes; one greedy
  episode: 0 or 1), and per role each `metric` at the role's turn 0 (its first try);
- the rate over the distinct tasks with Wilson's 95 % interval, n = the number of tasks;
- McNemar's exact test of before vs after on the same tasks: b tasks lost (solved before only),
  c gained (solved after only). A task counts as solved when its value reaches 1 (with several
  episodes per task: all of them solved).

Episode success is compared only when both evaluations ran the same tasks (a resumed run with
another `train.eval_tasks` did not); a skill metric on the tasks where the role took its first
turn in both.

>>> from types import SimpleNamespace as R
>>> def ep(task, ok, right):
...     return [R(task_id=task, episode=0, role="tool", turn=0, metrics={"right": right}, episode_success=ok)]
>>> before = task_outcomes([r for i in range(10) for r in ep(f"t{i}", float(i == 0), float(i < 2))])
>>> after = task_outcomes([r for i in range(10) for r in ep(f"t{i}", float(1 <= i <= 6), 1.0)])
>>> sig = significance(before, after)
>>> sig["success"]["mcnemar"], sig["skills"]["tool/right"]["mcnemar"]
({'b': 1, 'c': 6, 'p': 0.125}, {'b': 0, 'c': 8, 'p': 0.0078125})
>>> change_text(sig["success"])
'10.0 % [1.8, 40.4] -> 60.0 % [31.3, 83.2]'
>>> mcnemar_text(sig["success"])
'McNemar 1 lost, 6 gained, p 0.125'
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Mapping, TypedDict

from masdsl.runtime.records import StepRecord
from masdsl.runtime.rundir import RunDir
from masdsl.stats import mcnemar, wilson

SOLVED = 1.0 - 1e-9  # a per-task value at or above this counts as solved (McNemar's pairs)


class Rate(TypedDict):
    rate: float  # the mean over the tasks of each task's value
    ci: list[float]  # Wilson's 95 % interval [low, high], n = the number of tasks (a list, as JSON reads it back)


class Comparison(TypedDict, total=False):
    tasks: int
    before: Rate
    after: Rate
    mcnemar: dict[str, float]  # b (lost), c (gained), p (exact, two-sided)
    # Only where some task's value lies strictly between 0 and 1 (a share, or a mean over several
    # episodes): the rates above are means, McNemar's pairs the tasks at 1; [before, after] counts
    # of those, so the two read together.
    solved: list[int]


class TaskOutcomes(TypedDict):
    success: dict[str, float]  # task -> episode success, the mean over its episodes
    skills: dict[str, dict[str, float]]  # "role/metric" -> task -> its value at turn 0, the mean over episodes


def task_outcomes(records: Iterable[StepRecord]) -> TaskOutcomes:
    """Per task, the episode success and each role's turn-0 metric values of one evaluation's
    records (`StepRecord`s, streamed: read once). Every record of an episode carries the
    episode's success; its last one is taken."""
    success: dict[str, dict[int, float]] = defaultdict(dict)  # task -> episode -> success
    first: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))  # role/metric -> task -> values
    for r in records:
        if r.episode_success is not None:
            success[r.task_id][r.episode] = float(r.episode_success)
        if r.turn == 0:
            for name, value in (r.metrics or {}).items():
                first[f"{r.role}/{name}"][r.task_id].append(float(value))
    return {"success": {t: _mean(list(eps.values())) for t, eps in sorted(success.items())},
            "skills": {key: {t: _mean(vs) for t, vs in sorted(tasks.items())} for key, tasks in sorted(first.items())}}


def compare(before: Mapping[str, float], after: Mapping[str, float]) -> Comparison | None:
    """The rates with their intervals and McNemar's test on the same tasks (None: no task, or
    the two evaluations ran different tasks).

    >>> compare({"a": 1.0, "b": 0.0}, {"a": 1.0, "c": 1.0}) is None, compare({}, {}) is None
    (True, True)
    """
    if not before or set(before) != set(after):
        return None
    n = len(before)

    def rate(values: Mapping[str, float]) -> Rate:
        total = sum(values.values())
        return {"rate": total / n, "ci": list(wilson(total, n))}  # a list: what summary.json reads back

    solved_before = {t: int(v >= SOLVED) for t, v in before.items()}
    solved_after = {t: int(v >= SOLVED) for t, v in after.items()}
    out: Comparison = {"tasks": n, "before": rate(before), "after": rate(after),
                       "mcnemar": mcnemar(solved_before, solved_after)}
    if any(1e-9 < v < SOLVED for v in [*before.values(), *after.values()]):
        out["solved"] = [sum(solved_before.values()), sum(solved_after.values())]
    return out


def significance(before: TaskOutcomes, after: TaskOutcomes) -> dict[str, Any] | None:
    """Episode success and each role's turn-0 metrics compared (`compare`); a metric on the tasks
    where the role took its first turn in both. None when the episode success cannot be compared."""
    success = compare(before["success"], after["success"])
    if success is None:
        return None
    skills = {}
    for key in sorted(set(before["skills"]) & set(after["skills"])):
        b, a = before["skills"][key], after["skills"][key]
        common = set(b) & set(a)
        found = compare({t: b[t] for t in common}, {t: a[t] for t in common})
        if found is not None:
            skills[key] = found
    return {"success": success, "skills": skills}


def run_significance(run_dir: RunDir) -> dict[str, Any] | None:
    """`significance` of a training run's first and last evaluation (None: fewer than two, or
    records that do not read, such as a killed run's torn last line)."""
    pair = run_dir.first_and_last_evaluation()
    if pair is None:
        return None
    try:
        return significance(task_outcomes(pair[0]), task_outcomes(pair[1]))
    except (ValueError, KeyError, TypeError):  # a torn or foreign line: the summary goes without the test
        return None


def change_text(c: Comparison) -> str:
    """`17.2 % [9.9, 28.2] -> 93.8 % [85.0, 97.5]`: the rates with their intervals, in percent."""
    def pct(r: Rate) -> str:
        lo, hi = r["ci"]
        return f"{100 * r['rate']:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]"
    return f"{pct(c['before'])} -> {pct(c['after'])}"


def mcnemar_text(c: Comparison) -> str:
    """`McNemar 1 lost, 49 gained, p 3.59e-14`; where the rates are means of shares, the test's
    unit is said with it: the tasks whose value is 1, before -> after.

    >>> share = compare({"a": 0.5, "b": 1.0, "c": 0.0}, {"a": 1.0, "b": 1.0, "c": 0.5})
    >>> change_text(share), mcnemar_text(share)
    ('50.0 % [12.5, 87.5] -> 83.3 % [31.0, 98.2]', 'McNemar on the tasks at 1 (1 -> 2 of 3): 0 lost, 1 gained, p 1')
    """
    m = c["mcnemar"]
    counts = c.get("solved")
    unit = f" on the tasks at 1 ({counts[0]} -> {counts[1]} of {c['tasks']}):" if counts else ""
    return f"McNemar{unit} {m['b']:.0f} lost, {m['c']:.0f} gained, p {m['p']:.3g}"


def success_rows(sig: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The summary table's row: eval success per task before -> after, with Wilson's intervals
    over the tasks and McNemar's test; nothing without two evaluations of the same tasks.

    >>> c = compare({f"t{i}": float(i < 11) for i in range(64)}, {f"t{i}": float(1 <= i <= 60) for i in range(64)})
    >>> success_rows({"success": c, "skills": {}})[0][1]
    '17.2 % [9.9, 28.2] -> 93.8 % [85.0, 97.5] over 64 tasks; McNemar 1 lost, 50 gained, p 4.62e-14'
    >>> success_rows(None)
    []
    """
    if not sig:
        return []
    c = sig["success"]
    return [("eval success per task (before -> after)", f"{change_text(c)} over {c['tasks']} tasks; {mcnemar_text(c)}")]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)
