"""Grouped rewards -> advantages, with the estimator each role names (`advantage NAME` in its
`role { }`; docs/concepts.md, "Advantage estimators"). Unbiased std (divide by n - 1) throughout.

| name | advantage of member i of group g (role k) |
|---|---|
| `grpo` (default) | (r_i - mean_g) / (std_g + 1e-6) |
| `drgrpo` | r_i - mean_g (Dr. GRPO: no division by the std, so a group's spread keeps its scale) |
| `rloo` | r_i - mean of the other n - 1 members of g = n / (n - 1) * (r_i - mean_g); needs K >= 2 |
| `grpo_agent_norm` | (r_i - mean_g) / (std_k + 1e-6), std_k: the std of every reward role k received in the step's groups (Dr. MAS) |

`grpo_agent_norm` keeps AT-GRPO's baseline (the mean of the K candidates of one decision) and
takes Dr. MAS's per-agent scale: every group of a role is divided by the same number, the spread
of that role's rewards over all its groups (tasks and turns) of the step. So a role whose
rewards live on a larger scale does not get larger gradients than another role, and a group
whose candidates differ a little gets a small advantage instead of GRPO's +-0.7.

A group of one member, or whose rewards are all equal, teaches nothing under every estimator:
its advantages are 0 and it is counted (`AdvantageStats.zero_variance`), so a run whose groups
are mostly flat shows it in the `groups/zero_variance_frac` metric instead of silently not learning.

>>> [round(a, 4) for a in group_advantages([1.0, 0.0, 0.0, 1.0])]
[0.866, -0.866, -0.866, 0.866]
>>> group_advantages([0.5, 0.5]), group_advantages([2.0])
([0.0, 0.0], [0.0])
>>> [round(a, 4) for a in rloo([1.0, 0.0, 0.0, 1.0])]  # 1 - 1/3, 0 - 2/3
[0.6667, -0.6667, -0.6667, 0.6667]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from masdsl.config_schema import ADVANTAGES, DEFAULT_ADVANTAGE
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


def drgrpo(rewards: Sequence[float], eps: float = EPS, role_std: float = 0.0) -> list[float]:
    """Dr. GRPO: the reward minus its group's mean, not divided by the std.

    >>> drgrpo([1.0, 0.0, 0.0, 1.0]), drgrpo([3.0, 1.0])
    ([0.5, -0.5, -0.5, 0.5], [1.0, -1.0])
    """
    if len(rewards) < 2 or _is_flat(rewards):
        return [0.0] * len(rewards)
    mean = sum(rewards) / len(rewards)
    return [r - mean for r in rewards]


def rloo(rewards: Sequence[float], eps: float = EPS, role_std: float = 0.0) -> list[float]:
    """RLOO: the reward minus the mean of the group's *other* members (leave one out).

    >>> rloo([3.0, 1.0]), rloo([2.0, 0.0, 1.0])  # 3 - 1, 1 - 3; 2 - (0 + 1) / 2, 0 - 1.5, 1 - 1
    ([2.0, -2.0], [1.5, -1.5, 0.0])
    """
    n = len(rewards)
    if n < 2 or _is_flat(rewards):
        return [0.0] * n
    total = sum(rewards)
    return [r - (total - r) / (n - 1) for r in rewards]


def grpo_agent_norm(rewards: Sequence[float], eps: float = EPS, role_std: float = 0.0) -> list[float]:
    """The reward minus its group's mean, over `role_std` (the std of the role's rewards in the step).

    >>> grpo_agent_norm([3.0, 1.0], role_std=4.0 - EPS)
    [0.25, -0.25]
    """
    return [a / (role_std + eps) for a in drgrpo(rewards)]


def grpo(rewards: Sequence[float], eps: float = EPS, role_std: float = 0.0) -> list[float]:
    """GRPO's `(r - mean) / (std + eps)`: `group_advantages`."""
    return group_advantages(rewards, eps)


Estimator = Callable[[Sequence[float], float, float], list]
ESTIMATORS: dict[str, Estimator] = {"grpo": grpo, "drgrpo": drgrpo, "rloo": rloo, "grpo_agent_norm": grpo_agent_norm}
if tuple(ESTIMATORS) != tuple(ADVANTAGES):  # the language's names are the estimators implemented here
    raise ImportError(f"masdsl.config_schema.ADVANTAGES {tuple(ADVANTAGES)} != the estimators implemented {tuple(ESTIMATORS)}")


@dataclass(frozen=True)
class AdvantageStats:
    groups: int  # number of groups
    zero_variance: int  # groups of one member, or with all rewards equal (advantage 0)

    @property
    def zero_variance_frac(self) -> float:
        return self.zero_variance / self.groups if self.groups else 0.0


def compute_advantages(groups: Sequence[Group], n_records: int, eps: float = EPS,
                       estimators: Mapping[str, str] | None = None,
                       roles: Sequence[str] | None = None) -> tuple[list[float], AdvantageStats]:
    """One advantage per record (records in no group get 0), and the group statistics.

    Each member's advantage goes to every record of that member (a whole episode, in
    `trajectory` grouping). `estimators`: role -> estimator name (a role not named, or no
    mapping: `grpo`); `roles`: each record's role, needed with `estimators`. A group whose
    records belong to roles naming different estimators is refused (the run plan refuses
    such a choice before a run: only `at` and `agent` groupings keep one role per group).

    >>> from masdsl.learner.grouping import Group
    >>> gs = [Group(("a",), ((0,), (2,)), (1.0, 0.0)), Group(("b",), ((1, 3),), (1.0,))]
    >>> adv, stats = compute_advantages(gs, 4)
    >>> [round(x, 4) for x in adv], stats.groups, stats.zero_variance
    ([0.7071, 0.0, -0.7071, 0.0], 2, 1)

    Two groups of role `t` under `grpo_agent_norm`: its rewards 1, 0, 3, 1 have std 1.2583, so
    the first group's +-0.5 becomes +-0.3974 and the second's +-1 becomes +-0.7947:

    >>> gs = [Group(("x", "t", 0), ((0,), (1,)), (1.0, 0.0)), Group(("y", "t", 0), ((2,), (3,)), (3.0, 1.0))]
    >>> adv, _ = compute_advantages(gs, 4, estimators={"t": "grpo_agent_norm"}, roles=["t"] * 4)
    >>> [round(x, 4) for x in adv]
    [0.3974, -0.3974, 0.7947, -0.7947]
    """
    names = [_estimator_of(g, estimators, roles) for g in groups]
    stds = _role_stds(groups, names, roles) if "grpo_agent_norm" in names else {}
    adv = [0.0] * n_records
    flat = 0
    for g, name in zip(groups, names):
        values = ESTIMATORS[name](g.rewards, eps, stds.get(_role_of(g, roles), 0.0))
        if not any(values):
            flat += 1
        for member, a in zip(g.members, values):
            for i in member:
                adv[i] = a
    return adv, AdvantageStats(len(groups), flat)


def _role_of(g: Group, roles: Sequence[str] | None) -> str | None:
    """The one role of a group's records (None: no roles given, or several)."""
    found = {roles[i] for i in g.indices} if roles is not None else set()
    return next(iter(found)) if len(found) == 1 else None


def _estimator_of(g: Group, estimators: Mapping[str, str] | None, roles: Sequence[str] | None) -> str:
    if not estimators:
        return DEFAULT_ADVANTAGE
    if roles is None:
        raise ValueError("compute_advantages: `estimators` needs each record's role (`roles`)")
    names = {estimators.get(roles[i], DEFAULT_ADVANTAGE) for i in g.indices}
    if len(names) > 1:
        raise ValueError(f"group {g.key} mixes roles whose advantage estimators differ: {sorted(names)}")
    name = names.pop() if names else DEFAULT_ADVANTAGE
    if name == "grpo_agent_norm" and _role_of(g, roles) is None:
        raise ValueError(f"group {g.key} holds several roles: `grpo_agent_norm` needs one role per group")
    return name


def _role_stds(groups: Sequence[Group], names: Sequence[str], roles: Sequence[str] | None) -> dict[str | None, float]:
    """Per role under `grpo_agent_norm`: the unbiased std of the rewards of all its groups' members."""
    pooled: dict[str | None, list[float]] = {}
    for g, name in zip(groups, names):
        if name == "grpo_agent_norm":
            pooled.setdefault(_role_of(g, roles), []).extend(g.rewards)
    out = {}
    for role, rs in pooled.items():
        mean = sum(rs) / len(rs)
        out[role] = math.sqrt(sum((r - mean) ** 2 for r in rs) / (len(rs) - 1)) if len(rs) > 1 else 0.0
    return out


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
