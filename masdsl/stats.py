"""Statistics of the learning tables: a success rate's interval over distinct eval tasks, the
spread between seeds, and McNemar's exact test of before vs after on the same tasks.

A greedy evaluation of T eval tasks under S training seeds is not T x S independent trials: every
seed is evaluated on the same T tasks, and an untrained (or greedy, deterministic) evaluation gives
the same episode S times. So the unit is the task:

- `success_s(t)` is 1 when seed s's policy solved task t (one greedy episode), else 0;
- the **per-task mean** `m(t)` is the mean of `success_s(t)` over the S seeds;
- the **rate** is the mean of `m(t)` over the T tasks (equal to the mean of the per-seed rates);
- its **interval** is Wilson's 95 % score interval for that rate with n = T, the number of
  distinct tasks (`wilson(rate * T, T)`): seeds never add trials;
- the **seed spread** is the per-seed rates' range (max - min), reported beside it, with each
  seed's own Wilson interval over the same T tasks.

Two seeds that solve the same tasks give exactly the interval one seed gives:

>>> one = over_tasks([{"a": 1, "b": 0, "c": 1, "d": 1}])
>>> two = over_tasks([{"a": 1, "b": 0, "c": 1, "d": 1}] * 2)
>>> one["ci"] == two["ci"], two["tasks"], two["seeds"], two["spread"]
(True, 4, 2, 0.0)

McNemar's exact test (`mcnemar`) compares two evaluations of the same tasks (before and after
training, one seed) by their discordant tasks: b solved before only, c solved after only; under
"training changed nothing" each discordant task is a fair coin, and the two-sided p-value is
`min(1, 2 * P(Binomial(b + c, 1/2) <= min(b, c)))`.

Used by the run's summary table (`masdsl/training/significance.py`) and the benchmarks
(`benchmarks/learning.py`, `skill_table.py`, `tutorial_run.py`, `base_rates.py`); plain Python (no
other masdsl module, no numpy or torch), so it sits on the ground floor and anything can import it.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile: a two-sided 95 % interval


def wilson(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for a proportion of `successes` in `n` trials (a fractional
    `successes`, the sum of per-task means, is taken as it is).

    >>> [round(x, 3) for x in wilson(0, 20)], [round(x, 3) for x in wilson(10, 20)]
    ([0.0, 0.161], [0.299, 0.701])
    >>> [round(100 * x, 1) for x in wilson(24, 24)]   # 24 of 24 distinct tasks
    [86.2, 100.0]
    >>> wilson(0, 0)
    (0.0, 1.0)
    """
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def per_task_mean(per_seed: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each task's mean success over the seeds; every seed must cover the same tasks.

    >>> per_task_mean([{"a": 1, "b": 0}, {"a": 1, "b": 1}])
    {'a': 1.0, 'b': 0.5}
    >>> per_task_mean([{"a": 1}, {"b": 1}])
    Traceback (most recent call last):
    ...
    ValueError: the seeds were evaluated on different tasks (2 not in every seed)
    """
    if not per_seed:
        return {}
    sets = [set(s) for s in per_seed]
    missing = set().union(*sets) - set.intersection(*sets)
    if missing:
        raise ValueError(f"the seeds were evaluated on different tasks ({len(missing)} not in every seed)")
    return {t: sum(float(s[t]) for s in per_seed) / len(per_seed) for t in sorted(sets[0])}


def over_tasks(per_seed: Sequence[Mapping[str, float]], z: float = Z95) -> dict:
    """The rate over distinct tasks of S seeds' evaluations (`{task: 0 or 1}` each), its Wilson
    interval with n = the number of tasks, each seed's rate and interval, and the seed spread.

    >>> r = over_tasks([{"a": 1, "b": 1, "c": 0, "d": 0}, {"a": 1, "b": 0, "c": 0, "d": 0}])
    >>> r["rate"], r["per_seed"], r["spread"], r["tasks"]
    (0.375, [0.5, 0.25], 0.25, 4)
    >>> [round(x, 3) for x in r["ci"]] == [round(x, 3) for x in wilson(1.5, 4)]
    True
    """
    means = per_task_mean(per_seed)
    rates = [sum(float(v) for v in s.values()) / len(s) for s in per_seed]
    n = len(means)
    rate = sum(means.values()) / n if n else 0.0
    return {"tasks": n, "seeds": len(per_seed), "rate": rate, "ci": wilson(rate * n, n, z),
            "per_seed": rates, "per_seed_ci": [wilson(r * n, n, z) for r in rates],
            "spread": max(rates) - min(rates) if rates else 0.0}


def rate_over_tasks(seed_rates: Sequence[float], tasks: int, z: float = Z95) -> dict:
    """`over_tasks` from each seed's rate on the same `tasks` eval tasks (all the interval and the
    spread need: the rate over tasks is the mean of the seeds' rates).

    >>> r = rate_over_tasks([1.0, 1.0], 24)
    >>> [round(100 * x, 1) for x in r["ci"]], r["spread"]
    ([86.2, 100.0], 0.0)
    """
    rate = sum(seed_rates) / len(seed_rates)
    return {"tasks": tasks, "seeds": len(seed_rates), "rate": rate, "ci": wilson(rate * tasks, tasks, z),
            "per_seed": list(seed_rates), "per_seed_ci": [wilson(r * tasks, tasks, z) for r in seed_rates],
            "spread": max(seed_rates) - min(seed_rates)}


def discordant(before: Mapping[str, float], after: Mapping[str, float]) -> tuple[int, int]:
    """(b, c): tasks solved before but not after, and after but not before (same task sets).

    >>> discordant({"a": 1, "b": 0, "c": 0, "d": 1}, {"a": 1, "b": 1, "c": 1, "d": 0})
    (1, 2)
    """
    if set(before) != set(after):
        raise ValueError(f"before and after were evaluated on different tasks "
                         f"({len(set(before) ^ set(after))} in only one of them)")
    b = sum(1 for t in before if before[t] and not after[t])
    c = sum(1 for t in before if after[t] and not before[t])
    return b, c


def mcnemar(before: Mapping[str, float], after: Mapping[str, float]) -> dict:
    """McNemar's exact two-sided test of `before` vs `after` (`{task: 0 or 1}`, the same tasks).

    By hand: 1 task lost, 6 gained: P(X <= 1) for X ~ Binomial(7, 1/2) is (1 + 7) / 128, twice
    that is 0.125:

    >>> before = {f"t{i}": int(i == 0) for i in range(10)}
    >>> after = {f"t{i}": int(1 <= i <= 6) for i in range(10)}
    >>> mcnemar(before, after)
    {'b': 1, 'c': 6, 'p': 0.125}
    """
    b, c = discordant(before, after)
    return {"b": b, "c": c, "p": mcnemar_p(b, c)}


def mcnemar_p(b: int, c: int) -> float:
    """The exact two-sided p-value from the discordant counts.

    >>> mcnemar_p(0, 5), mcnemar_p(3, 3), mcnemar_p(0, 0)
    (0.0625, 1.0, 1.0)
    """
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)
