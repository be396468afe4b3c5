"""Grouping and advantages on hand-built step records (docs/concepts.md), including regression
tests for the two bugs of the reference implementation."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from masdsl.config import CHOICES
from masdsl.learner.advantages import compute_advantages, group_advantages
from masdsl.learner.grouping import GROUP_FNS, group_records
from masdsl.runtime.records import StepRecord


def rec(task, role, turn, cand, reward, *, episode=0, prompt=(1, 2), response=(3,), ep_reward=None):
    return StepRecord(
        step=0, episode=episode, task_id=task, role=role, turn=turn, node=role, candidate=cand,
        selected=cand == 0, policy="shared", prompt_ids=list(prompt), response_ids=list(response),
        logprobs=[-1.0] * len(response), reward=reward, reward_team=0.0, reward_local=reward,
        finish_reason="stop", parse_ok=True, episode_reward=ep_reward,
    )


def tree_rollout(n_tasks=4, roles=("coder", "tester"), turns=2, k=4, seed=0):
    """Records as tree sampling yields them: per (task, role, turn) K candidates, shuffled."""
    rng = random.Random(seed)
    out = []
    for ep in range(n_tasks):
        for t in range(turns):
            for role in roles:
                prompt = (ep, t, hash(role) % 97)
                for c in range(k):
                    out.append(rec(f"task{ep}", role, t, c, rng.random(), episode=ep, prompt=prompt, response=(c,)))
    rng.shuffle(out)
    return out


def test_modes_match_config_choices():
    assert tuple(GROUP_FNS) == CHOICES[("train", "grouping")]


def test_at_groups_are_exactly_task_role_turn():
    rs = tree_rollout()
    groups = group_records(rs, "at")
    assert len(groups) == 4 * 2 * 2
    for g in groups:
        members = [rs[i] for i in g.indices]
        assert {(r.task_id, r.role, r.turn) for r in members} == {g.key}
        assert sorted(r.candidate for r in members) == [0, 1, 2, 3]
        assert len({tuple(r.prompt_ids) for r in members}) == 1  # one decision, one prompt
        assert list(g.rewards) == [rs[i].reward for i in g.indices]


def test_regression_k_tasks_never_share_a_group():
    """Reference bug 1: the task index divided by K a second time merged K tasks per group.

    With K = 4 and 8 tasks, task i and task i+1 (and every pair) must land in different
    groups, and no group may hold more than K candidates."""
    rs = [rec(f"t{ep}", "coder", 0, c, float(ep), episode=ep) for ep in range(8) for c in range(4)]
    groups = group_records(rs, "at")
    assert len(groups) == 8
    for g in groups:
        assert len({rs[i].task_id for i in g.indices}) == 1
        assert len(g.members) == 4
    # each task's rewards are constant across its candidates: merging tasks would create variance
    adv, stats = compute_advantages(groups, len(rs))
    assert adv == [0.0] * len(rs)
    assert stats.zero_variance == 8


def test_regression_second_agent_of_a_turn_learns():
    """Reference bug 2: every agent after the first in a turn scored K identical copies.

    Here coder and tester act in the same turn; the tester's four candidates differ (different
    responses, different rewards), so its advantages must be nonzero and computed from its own
    rewards, not the coder's."""
    coder = [rec("t0", "coder", 0, c, 1.0, response=(10 + c,)) for c in range(4)]  # flat: teaches nothing
    tester = [rec("t0", "tester", 0, c, r, response=(20 + c,)) for c, r in enumerate([0.0, 1.0, 0.5, 0.5])]
    rs = coder + tester
    adv, stats = compute_advantages(group_records(rs, "at"), len(rs))
    assert adv[:4] == [0.0] * 4
    expected = group_advantages([0.0, 1.0, 0.5, 0.5])
    assert adv[4:] == expected and all(a != 0 for a in (adv[4], adv[5]))
    assert (stats.groups, stats.zero_variance) == (2, 1)


def test_advantage_formula_unbiased_std():
    r = np.array([0.1, 0.7, 0.3, 0.9, 0.2])
    expected = (r - r.mean()) / (r.std(ddof=1) + 1e-6)
    assert np.allclose(group_advantages(list(r)), expected, atol=1e-12)


def test_singletons_and_flat_groups_give_zero_and_are_counted():
    rs = [rec("a", "x", 0, 0, 1.0), rec("b", "x", 0, 0, 0.3), rec("b", "x", 0, 1, 0.3),
          rec("c", "x", 0, 0, 0.0), rec("c", "x", 0, 1, 1.0)]
    adv, stats = compute_advantages(group_records(rs, "at"), len(rs))
    assert adv[:3] == [0.0, 0.0, 0.0] and adv[3] < 0 < adv[4]
    assert (stats.groups, stats.zero_variance, round(stats.zero_variance_frac, 3)) == (3, 2, 0.667)


def test_agent_and_turn_modes_pool_what_they_say():
    rs = tree_rollout(n_tasks=2, turns=3, k=2)
    for g in group_records(rs, "agent"):
        assert {(rs[i].task_id, rs[i].role) for i in g.indices} == {g.key} and len(g.members) == 6
    for g in group_records(rs, "turn"):
        assert {(rs[i].task_id, rs[i].turn) for i in g.indices} == {g.key} and len(g.members) == 4


def test_trajectory_mode_scores_whole_episodes():
    # K = 3 independent episodes of task t0 (two steps each), 2 of task t1
    outcomes = {0: 1.0, 1: 0.0, 2: 0.0, 3: 0.5, 4: 0.5}
    rs = []
    for ep, out in outcomes.items():
        task = "t0" if ep < 3 else "t1"
        rs += [rec(task, "namer", 0, 0, 9.0, episode=ep, ep_reward=out),
               rec(task, "copier", 0, 0, -9.0, episode=ep, ep_reward=out)]
    groups = group_records(rs, "trajectory")
    assert [g.key for g in groups] == [("t0",), ("t1",)]
    adv, stats = compute_advantages(groups, len(rs))
    a = group_advantages([1.0, 0.0, 0.0])
    assert adv[:6] == [a[0], a[0], a[1], a[1], a[2], a[2]]  # step rewards ignored, outcome used
    assert adv[6:] == [0.0] * 4 and stats.zero_variance == 1


def test_unknown_mode_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown grouping `tree`"):
        group_records([], "tree")


keys = st.tuples(st.sampled_from(["t0", "t1", "t2"]), st.sampled_from(["a", "b"]), st.integers(0, 2))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(keys, st.floats(-5, 5)), max_size=40), st.sampled_from(["at", "agent", "turn"]))
def test_groups_partition_records_and_advantages_are_centred(items, mode):
    rs = [rec(t, role, turn, i, r, episode=0) for i, ((t, role, turn), r) in enumerate(items)]
    groups = group_records(rs, mode)
    assert sorted(i for g in groups for i in g.indices) == list(range(len(rs)))
    adv, stats = compute_advantages(groups, len(rs))
    assert stats.groups == len(groups)
    for g in groups:
        a = [adv[i] for i in g.indices]
        assert math.isclose(sum(a), 0.0, abs_tol=1e-6 * max(1, len(a)))
        if len(a) > 1 and any(a):  # unit std, up to the 1e-6 in the denominator
            std = np.std(g.rewards, ddof=1)
            assert math.isclose(np.std(a, ddof=1), std / (std + 1e-6), rel_tol=1e-6)
