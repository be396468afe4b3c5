"""Grouped rewards -> advantages: `A = (r - mean_g) / (std_g + 1e-6)`, unbiased std (DESIGN.md §5).

A group of one member, or whose rewards are all equal, teaches nothing: its advantages are 0
and it is counted (`AdvantageStats.zero_variance`), so a run whose groups are mostly flat shows
it in the `groups/zero_variance_frac` metric instead of silently not learning.

>>> [round(a, 4) for a in group_advantages([1.0, 0.0, 0.0, 1.0])]
[0.866, -0.866, -0.866, 0.866]
>>> group_advantages([0.5, 0.5]), group_advantages([2.0])
([0.0, 0.0], [0.0])
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from masdsl.learner.grouping import Group

EPS = 1e-6


def group_advantages(rewards: Sequence[float], eps: float = EPS) -> list[float]:
    """Advantages of one group's members, in member order.

    Unbiased std (divide by n - 1), as in the paper's reference implementation:

    >>> a = group_advantages([3.0, 1.0])
    >>> [round(x, 4) for x in a]
    [0.7071, -0.7071]
    """
    n = len(rewards)
    if n < 2:
        return [0.0] * n
    if max(rewards) - min(rewards) <= 1e-12:  # equal up to float noise: nothing to compare
        return [0.0] * n
    mean = sum(rewards) / n
    var = sum((r - mean) ** 2 for r in rewards) / (n - 1)
    std = math.sqrt(var)
    return [(r - mean) / (std + eps) for r in rewards]


@dataclass(frozen=True)
class AdvantageStats:
    groups: int  # number of groups
    zero_variance: int  # groups of one member, or with all rewards equal (advantage 0)

    @property
    def zero_variance_frac(self) -> float:
        return self.zero_variance / self.groups if self.groups else 0.0


def compute_advantages(groups: Sequence[Group], n_records: int, eps: float = EPS) -> tuple[list[float], AdvantageStats]:
    """One advantage per record (records in no group get 0), and the group statistics.

    Each member's advantage goes to every record of that member (a whole episode, in
    `trajectory` grouping).

    >>> from masdsl.learner.grouping import Group
    >>> gs = [Group(("a",), ((0,), (2,)), (1.0, 0.0)), Group(("b",), ((1, 3),), (1.0,))]
    >>> adv, stats = compute_advantages(gs, 4)
    >>> [round(x, 4) for x in adv], stats.groups, stats.zero_variance
    ([0.7071, 0.0, -0.7071, 0.0], 2, 1)
    """
    adv = [0.0] * n_records
    flat = 0
    for g in groups:
        values = group_advantages(g.rewards, eps)
        if not any(values):
            flat += 1
        for member, a in zip(g.members, values):
            for i in member:
                adv[i] = a
    return adv, AdvantageStats(len(groups), flat)
