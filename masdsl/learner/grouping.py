"""Step records -> groups: which candidates are compared with which (docs/concepts.md, "AT-GRPO").

AT-GRPO compares a candidate only with the other candidates of the *same* decision: the K
samples tree sampling drew for one role, at one turn, of one task. The group key is exactly
`(task_id, role, turn)`. Two bugs of the reference implementation show what goes wrong
otherwise: dividing the task index by K a second time merges K tasks into one group (the
advantage then mostly measures which task was easier), and broadcasting one agent's samples to
the next agent of a turn gives that agent K identical copies (zero variance, nothing learned).

A group is a list of *members*. A member is a tuple of record indices that share one reward:
in `at`, `agent` and `turn` grouping each record is its own member; in `trajectory` grouping
(vanilla GRPO, for ablations) a member is one whole episode scored by its final outcome, so
every step of that episode gets the episode's advantage.

Modes are small functions in `GROUP_FNS`, keyed by the values of `train.grouping` (`masdsl.config.GROUPINGS`):

>>> from masdsl.runtime.records import StepRecord
>>> def rec(task, role, turn, cand, reward, episode=0):
...     return StepRecord(step=0, episode=episode, task_id=task, role=role, turn=turn, node=role,
...                       candidate=cand, selected=cand == 0, policy="p", prompt_ids=[1],
...                       response_ids=[2], logprobs=[-1.0], reward=reward, reward_team=0.0,
...                       reward_local=reward, finish_reason="stop", parse_ok=True)
>>> rs = [rec("a", "coder", 0, 0, 1.0), rec("a", "coder", 0, 1, 0.0),
...       rec("b", "coder", 0, 0, 0.5, 1), rec("a", "tester", 0, 0, 0.2)]
>>> [(g.key, g.members) for g in group_records(rs, "at")]
[(('a', 'coder', 0), ((0,), (1,))), (('b', 'coder', 0), ((2,),)), (('a', 'tester', 0), ((3,),))]
>>> [g.key for g in group_records(rs, "turn")]
[('a', 0), ('b', 0)]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

from masdsl.config import GROUPINGS
from masdsl.runtime.records import StepRecord


@dataclass(frozen=True)
class Group:
    key: tuple[Hashable, ...]
    members: tuple[tuple[int, ...], ...]  # record indices; one reward per member
    rewards: tuple[float, ...]  # len(rewards) == len(members)

    @property
    def indices(self) -> list[int]:
        return [i for member in self.members for i in member]


def _by_key(records: Sequence[StepRecord], key: Callable[[StepRecord], tuple]) -> list[Group]:
    """One member per record, grouped by `key`, groups in order of first appearance."""
    buckets: dict[tuple, list[int]] = {}
    for i, r in enumerate(records):
        buckets.setdefault(key(r), []).append(i)
    return [
        Group(k, tuple((i,) for i in idx), tuple(float(records[i].reward) for i in idx))
        for k, idx in buckets.items()
    ]


def group_at(records: Sequence[StepRecord]) -> list[Group]:
    """AT-GRPO: one group per (task_id, role, turn) — the K candidates of one decision.

    >>> [g.key for g in group_at(_demo_records())]
    [('t0', 'namer', 0), ('t1', 'namer', 0), ('t0', 'copier', 0)]
    """
    return _by_key(records, lambda r: (r.task_id, r.role, r.turn))


def group_agent(records: Sequence[StepRecord]) -> list[Group]:
    """Ablation: one group per (task_id, role), pooling all turns of a role.

    >>> [g.key for g in group_agent(_demo_records())]
    [('t0', 'namer'), ('t1', 'namer'), ('t0', 'copier')]
    """
    return _by_key(records, lambda r: (r.task_id, r.role))


def group_turn(records: Sequence[StepRecord]) -> list[Group]:
    """Ablation: one group per (task_id, turn), pooling all roles of a turn.

    >>> [(g.key, len(g.members)) for g in group_turn(_demo_records())]
    [(('t0', 0), 4), (('t1', 0), 2)]
    """
    return _by_key(records, lambda r: (r.task_id, r.turn))


def _episode_reward(r: StepRecord) -> float:
    if r.episode_reward is not None:
        return float(r.episode_reward)
    return float(r.episode_success or 0.0)


def group_trajectory(records: Sequence[StepRecord]) -> list[Group]:
    """Vanilla GRPO: one group per task; a member is a whole episode, scored by its outcome.

    The rollout for this mode runs K independent episodes of each task (same task id,
    different episode index); every record of an episode gets that episode's advantage.

    >>> rs = _demo_records()
    >>> [(g.key, g.members, g.rewards) for g in group_trajectory(rs)]
    [(('t0',), ((0, 1, 4, 5),), (1.0,)), (('t1',), ((2, 3),), (0.0,))]
    """
    tasks: dict[str, dict[int, list[int]]] = {}
    for i, r in enumerate(records):
        tasks.setdefault(r.task_id, {}).setdefault(r.episode, []).append(i)
    groups = []
    for task_id, episodes in tasks.items():
        members = tuple(tuple(idx) for idx in episodes.values())
        rewards = tuple(_episode_reward(records[m[0]]) for m in members)
        groups.append(Group((task_id,), members, rewards))
    return groups


GROUP_FNS: dict[str, Callable[[Sequence[StepRecord]], list[Group]]] = {
    "at": group_at,
    "agent": group_agent,
    "turn": group_turn,
    "trajectory": group_trajectory,
}
if tuple(GROUP_FNS) != GROUPINGS:  # the config's allowed values are the names implemented here
    raise ImportError(f"masdsl.config.GROUPINGS {GROUPINGS} != the groupings implemented {tuple(GROUP_FNS)}")


def group_records(records: Sequence[StepRecord], mode: str = "at") -> list[Group]:
    """Group one rollout's records with mode `mode` (one of `masdsl.config.GROUPINGS`)."""
    try:
        fn = GROUP_FNS[mode]
    except KeyError:
        raise ValueError(f"unknown grouping `{mode}`; expected one of {', '.join(GROUPINGS)}") from None
    return fn(records)


def _demo_records() -> list[StepRecord]:
    """Two tasks; t0 has namer (2 candidates) then copier (2 candidates); t1 only namer."""

    def rec(task: str, role: str, cand: int, reward: float, episode: int, success: float) -> StepRecord:
        return StepRecord(
            step=0, episode=episode, task_id=task, role=role, turn=0, node=role, candidate=cand,
            selected=cand == 0, policy="p", prompt_ids=[1], response_ids=[2], logprobs=[-1.0],
            reward=reward, reward_team=0.0, reward_local=reward, finish_reason="stop",
            parse_ok=True, episode_success=success, episode_reward=success,
        )

    return [
        rec("t0", "namer", 0, 1.0, 0, 1.0), rec("t0", "namer", 1, 0.0, 0, 1.0),
        rec("t1", "namer", 0, 0.0, 1, 0.0), rec("t1", "namer", 1, 0.0, 1, 0.0),
        rec("t0", "copier", 0, 1.0, 0, 1.0), rec("t0", "copier", 1, 0.5, 0, 1.0),
    ]
