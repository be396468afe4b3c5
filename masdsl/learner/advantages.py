"""Grouped rewards -> advantages: `A = (r - mean_g) / (std_g + 1e-6)`, unbiased std (docs/concepts.md).

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
    if _is_flat(rewards):  # equal up to float noise: nothing to compare
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


def select_groups(groups: Sequence[Group], *, drop_flat: bool = False, drop_lowest: float = 0.0) -> list[Group]:
    """The groups an update trains on (`train.drop_flat_groups`, `train.drop_lowest_groups`).

    `drop_flat` leaves out groups whose rewards are all equal (their advantages are 0 anyway;
    leaving them out also takes their tokens out of the token mean and their rows out of the
    mini-batches). `drop_lowest` leaves out that fraction of the groups (rounded down) with the
    lowest mean reward, as the paper's code and math runs do with 0.3; ties leave out the
    earlier group. Order is kept.

    >>> from masdsl.learner.grouping import Group
    >>> gs = [Group((k,), ((0,), (1,)), r) for k, r in [("a", (0.0, 0.0)), ("b", (1.0, 0.0)), ("c", (2.0, 1.0))]]
    >>> [g.key[0] for g in select_groups(gs, drop_flat=True)]
    ['b', 'c']
    >>> [g.key[0] for g in select_groups(gs, drop_lowest=0.34)], [g.key[0] for g in select_groups(gs, drop_lowest=0.3)]
    (['b', 'c'], ['a', 'b', 'c'])
    """
    kept = [g for g in groups if not (drop_flat and _is_flat(g.rewards))]
    n_drop = int(drop_lowest * len(kept) + 1e-9)
    if n_drop:
        by_mean = sorted(range(len(kept)), key=lambda i: (sum(kept[i].rewards) / len(kept[i].rewards), i))
        dropped = set(by_mean[:n_drop])
        kept = [g for i, g in enumerate(kept) if i not in dropped]
    return kept


def _is_flat(rewards: Sequence[float]) -> bool:
    return len(rewards) < 2 or max(rewards) - min(rewards) <= 1e-12
