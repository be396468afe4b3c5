"""Each role's advantage estimator (`advantage NAME`) against a hand computation, and how
`compute_advantages` picks a group's estimator from its role."""

from __future__ import annotations

import math

import pytest

from masdsl.config_schema import ADVANTAGES
from masdsl.learner.advantages import ESTIMATORS, compute_advantages, drgrpo, group_advantages, grpo_agent_norm, rloo
from masdsl.learner.grouping import Group
from tests.support.overrides import tiny_hf
from tests.support.toy import TOY, TOY_DIR

REWARDS = [1.0, 0.0, 0.5, 0.5]  # mean 0.5; deviations 0.5, -0.5, 0, 0; unbiased std sqrt(0.5 / 3)


def test_grpo_is_mean_over_unbiased_std():
    std = math.sqrt((0.25 + 0.25) / 3)
    assert group_advantages(REWARDS) == pytest.approx([0.5 / (std + 1e-6), -0.5 / (std + 1e-6), 0.0, 0.0])
    assert ESTIMATORS["grpo"](REWARDS, 1e-6, 123.0) == group_advantages(REWARDS)  # a role's std is not read


def test_drgrpo_keeps_the_scale_of_the_rewards():
    assert drgrpo(REWARDS) == [0.5, -0.5, 0.0, 0.0]
    assert drgrpo([10.0, 0.0]) == [5.0, -5.0]  # grpo would give +-0.7071 whatever the spread
    assert drgrpo([7.0]) == [0.0] and drgrpo([2.0, 2.0, 2.0]) == [0.0, 0.0, 0.0]


def test_rloo_subtracts_the_mean_of_the_others():
    # 1 - (0 + .5 + .5) / 3, 0 - (1 + .5 + .5) / 3, .5 - (1 + 0 + .5) / 3 twice
    assert rloo(REWARDS) == pytest.approx([1 - 1 / 3, -2 / 3, 0.5 - 0.5, 0.5 - 0.5])
    n = len(REWARDS)  # the same as n / (n - 1) times the deviation from the group mean
    assert rloo(REWARDS) == pytest.approx([n / (n - 1) * a for a in drgrpo(REWARDS)])
    assert rloo([4.0]) == [0.0] and rloo([1.0, 1.0]) == [0.0, 0.0]


def test_agent_norm_divides_by_the_role_std_not_the_group_std():
    assert grpo_agent_norm([3.0, 1.0], role_std=2.0) == pytest.approx([1 / (2.0 + 1e-6), -1 / (2.0 + 1e-6)])


def test_every_name_of_the_language_has_an_estimator():
    assert tuple(ESTIMATORS) == tuple(ADVANTAGES)


def _two_roles():
    """Role `small` with rewards in [0, 1], role `big` with the same pattern times 10, two tasks each."""
    groups = [Group(("t0", "small", 0), ((0,), (1,)), (1.0, 0.0)), Group(("t1", "small", 0), ((2,), (3,)), (0.5, 0.0)),
              Group(("t0", "big", 0), ((4,), (5,)), (10.0, 0.0)), Group(("t1", "big", 0), ((6,), (7,)), (5.0, 0.0))]
    return groups, ["small"] * 4 + ["big"] * 4


def test_agent_norm_by_hand_puts_roles_of_different_scales_on_one_scale():
    groups, roles = _two_roles()
    adv, stats = compute_advantages(groups, 8, estimators={"small": "grpo_agent_norm", "big": "grpo_agent_norm"},
                                    roles=roles)
    small = [1.0, 0.0, 0.5, 0.0]  # mean 0.375; squares of deviations .390625 .140625 .015625 .140625
    std = math.sqrt((0.390625 + 0.140625 + 0.015625 + 0.140625) / 3)
    expected = [0.5 / (std + 1e-6), -0.5 / (std + 1e-6), 0.25 / (std + 1e-6), -0.25 / (std + 1e-6)]
    assert adv[:4] == pytest.approx(expected)
    assert adv[4:] == pytest.approx(expected, rel=1e-5)  # ten times the rewards, ten times the std: the same
    assert std == pytest.approx(math.sqrt(sum((r - sum(small) / 4) ** 2 for r in small) / 3))
    assert stats.groups == 4 and stats.zero_variance == 0
    # under grpo both tasks' groups get +-0.7071: the 0.5-vs-0 group weighs as much as the 1-vs-0 one
    plain, _ = compute_advantages(groups, 8)
    assert plain[0] == pytest.approx(plain[2], abs=1e-5) and plain[0] == pytest.approx(0.7071, abs=1e-4)


def test_each_role_gets_its_own_estimator():
    groups, roles = _two_roles()
    adv, _ = compute_advantages(groups, 8, estimators={"small": "rloo", "big": "drgrpo"}, roles=roles)
    assert adv == pytest.approx([1.0, -1.0, 0.5, -0.5, 5.0, -5.0, 2.5, -2.5])
    default, _ = compute_advantages(groups, 8, estimators={"small": "drgrpo"}, roles=roles)  # `big` names none: grpo
    assert default[:4] == [0.5, -0.5, 0.25, -0.25] and default[4] == pytest.approx(0.7071, abs=1e-4)


def test_flat_groups_count_under_every_estimator():
    groups = [Group(("t", "a", 0), ((0,), (1,)), (1.0, 1.0)), Group(("u", "a", 0), ((2,),), (3.0,))]
    for name in ESTIMATORS:
        adv, stats = compute_advantages(groups, 3, estimators={"a": name}, roles=["a"] * 3)
        assert adv == [0.0, 0.0, 0.0] and stats.zero_variance == 2, name


def test_a_group_of_roles_with_different_estimators_is_refused():
    mixed = [Group(("t", 0), ((0,), (1,)), (1.0, 0.0))]  # `turn` grouping: two roles in one group
    with pytest.raises(ValueError, match="estimators differ"):
        compute_advantages(mixed, 2, estimators={"a": "rloo", "b": "grpo"}, roles=["a", "b"])
    with pytest.raises(ValueError, match="one role per group"):
        compute_advantages(mixed, 2, estimators={"a": "grpo_agent_norm", "b": "grpo_agent_norm"}, roles=["a", "b"])
    adv, _ = compute_advantages(mixed, 2, estimators={"a": "drgrpo", "b": "drgrpo"}, roles=["a", "b"])
    assert adv == [0.5, -0.5]


def test_a_role_s_estimator_reaches_the_update(tiny_model_dir, tmp_path, one_thread):
    """One step on the tiny model, the same seed: the rollout is the same whichever estimator the
    namer names, the weights after the update are not (grpo's +-0.7 vs drgrpo's reward deviations)."""
    import masdsl
    import torch

    from masdsl.config import resolve_config
    from masdsl.plan.run_plan import resolve_run
    from masdsl.runtime.records import read_records
    from masdsl.training import checkpoint
    from tests.support.toy import train_into

    base = TOY.read_text().replace("max_tokens: 1", "max_tokens: 4")
    base = base.replace("reward same(digit, task.target)", "reward len(output)")
    runs = {}
    for name in ("grpo", "drgrpo"):
        text = base.replace("  reward len(output)\n", f"  reward len(output)\n  advantage {name}\n", 1)
        wf = masdsl.loads(text, name=f"toy_{name}", base_dir=TOY_DIR)
        assert wf.roles["namer"].advantage == name and wf.roles["copier"].advantage == "grpo"
        cfg = resolve_config(wf.train, overrides=[*tiny_hf(tiny_model_dir), "train.steps=1", "train.samples=4",
                                                  "train.batch=3", "train.eval_tasks=1", "train.lr=0.01"])
        result = train_into(resolve_run(wf, cfg), tmp_path / name)
        recs = [(r.task_id, r.role, r.candidate, r.response_ids, r.reward) for r in read_records(tmp_path / name / "records.jsonl")]
        runs[name] = (recs, checkpoint.load_weights(result.checkpoints[-1] / "policies" / "shared.safetensors"))
    assert runs["grpo"][0] == runs["drgrpo"][0]  # one rollout
    assert len({r[4] for r in runs["grpo"][0] if r[1] == "namer"}) > 1  # the namer's groups are not all flat
    a, b = runs["grpo"][1], runs["drgrpo"][1]
    assert any(not torch.equal(a[k], b[k]) for k in a)
