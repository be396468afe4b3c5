"""Dynamic sampling (`train.dynamic_sampling`): a step draws more tasks while it holds fewer
non-flat groups than asked for, and stops at its cap (`train.dynamic_sampling_rounds`)."""

from __future__ import annotations


import pytest

import masdsl
from masdsl.config import resolve_config
from masdsl.plan.run_plan import resolve_run
from masdsl.runtime.records import read_records

from tests.support.overrides import NO_TRACKING
from tests.support.toy import TOY, TOY_DIR, train_into

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py
BASE = ("train.steps=1", "train.samples=4", "train.batch=5", "train.eval_every=0", "train.lr=0.01",
        "train.checkpoint_every=0", "train.eval_tasks=2", NO_TRACKING, "runtime.engine=hf")


def toy(reward: str):
    """The two-role toy with every role's reward replaced by `reward` (and no team reward)."""
    text = TOY.read_text()
    for role_reward in ("reward same(digit, task.target)", "reward same(digit, namer.digit)"):
        text = text.replace(role_reward, f"reward {reward}")
    text = text.replace("team    same(namer.digit, task.target) and same(copier.digit, task.target)\n", "")
    text = text.replace("max_tokens: 1", "max_tokens: 4")
    return masdsl.loads(text, name="toy_dynamic", base_dir=TOY_DIR)


def run(wf, model_dir, tmp_path, *extra):
    cfg = resolve_config(wf.train, overrides=[*BASE, *(f"policy.{p}.model={model_dir}" for p in wf.policies), *extra])
    result = train_into(resolve_run(wf, cfg), tmp_path / "run")
    return result.history[-1], list(read_records(tmp_path / "run" / "records.jsonl"))


def test_all_flat_groups_draw_until_the_cap(tiny_model_dir, tmp_path):
    """A constant reward makes every group flat: the step draws 3 batches (the cap), 15 distinct
    tasks, and the data cursor moves past all of them."""
    h, records = run(toy("0"), tiny_model_dir, tmp_path, "train.dynamic_sampling=1", "train.dynamic_sampling_rounds=3")
    assert h["dynamic/rounds"] == 3
    assert h["dynamic/tasks"] == 15
    assert len({r.task_id for r in records}) == 15
    assert h["groups/nonflat_frac"] == 0.0
    episodes = {(r.task_id, r.episode) for r in records}
    assert len({e for _, e in episodes}) == 15  # each task its own episode index


def test_stops_as_soon_as_enough_groups_differ(tiny_model_dir, tmp_path):
    """A dense reward (the output's length) gives non-flat groups in the first batch already."""
    h, records = run(toy("len(output)"), tiny_model_dir, tmp_path, "train.dynamic_sampling=1")
    assert h["dynamic/rounds"] == 1 and h["dynamic/tasks"] == 5
    assert h["groups/nonflat_frac"] > 0
    assert len({r.task_id for r in records}) == 5


def test_fills_the_batch_with_more_non_flat_groups(tiny_model_dir, tmp_path):
    """Asking for more non-flat groups than three batches can hold (3 x 5 tasks x 2 roles = 30)
    makes the step roll out more batches, and it then holds more non-flat groups than one."""
    h1, rec1 = run(toy("len(output)"), tiny_model_dir, tmp_path / "one")
    h3, rec3 = run(toy("len(output)"), tiny_model_dir, tmp_path / "three", "train.dynamic_sampling=31",
                   "train.dynamic_sampling_rounds=3")
    assert h1["dynamic/rounds"] == 1 and h3["dynamic/rounds"] == 3
    nonflat1 = round(h1["groups/nonflat_frac"] * h1["groups/count"])
    nonflat3 = round(h3["groups/nonflat_frac"] * h3["groups/count"])
    groups3 = {(r.task_id, r.role, r.turn) for r in rec3}
    assert len(groups3) == 30 and len({(r.task_id, r.role, r.turn) for r in rec1}) == 10
    # the first rollout of the dynamic step is the plain step's rollout (same seed, same tasks)
    first = [r for r in rec3 if r.episode < 5]
    assert [(r.task_id, r.response_ids) for r in first] == [(r.task_id, r.response_ids) for r in rec1]
    assert h3["groups/count"] == 30 and nonflat3 > nonflat1


def test_settings_are_range_checked():
    from masdsl.config import ConfigError

    wf = toy("0")
    with pytest.raises(ConfigError, match="dynamic_sampling_rounds"):
        resolve_config(wf.train, overrides=["train.dynamic_sampling_rounds=0"])
    with pytest.raises(ConfigError, match="dynamic_sampling"):
        resolve_config(wf.train, overrides=["train.dynamic_sampling=-1"])


# -- per role (`train.dynamic_sampling_roles`) and a role's own K (`sample { samples: K }`) ------------


def toy_roles(namer: str, copier: str):
    """The toy with the namer's reward `namer` and the copier's `copier` (no team reward)."""
    text = TOY.read_text()
    text = text.replace("reward same(digit, task.target)", f"reward {namer}")
    text = text.replace("reward same(digit, namer.digit)", f"reward {copier}")
    text = text.replace("team    same(namer.digit, task.target) and same(copier.digit, task.target)\n", "")
    text = text.replace("max_tokens: 1", "max_tokens: 4")
    return masdsl.loads(text, name="toy_dynamic_roles", base_dir=TOY_DIR)


def nonflat_per_round(records, role: str, batch: int = 5) -> list[int]:
    """Non-flat groups of `role` in each rollout of the step (rollout i holds episodes [5i, 5i + 5))."""
    rewards: dict = {}
    for r in records:
        if r.role == role:
            rewards.setdefault((r.episode // batch, r.task_id, r.turn), set()).add(r.reward)
    rounds = 1 + max(k[0] for k in rewards)
    return [sum(len(v) > 1 for k, v in rewards.items() if k[0] == i) for i in range(rounds)]


def test_a_named_flat_role_draws_where_the_all_role_count_does_not(tiny_model_dir, tmp_path):
    """The namer's reward is constant (every namer group flat), the copier's is dense: counted
    over all roles one rollout is enough; naming the namer draws again, and stops at the cap."""
    wf = toy_roles("0", "len(output)")
    h_all, _ = run(wf, tiny_model_dir, tmp_path / "all", "train.dynamic_sampling=1")
    assert h_all["dynamic/rounds"] == 1
    h, records = run(wf, tiny_model_dir, tmp_path / "named", "train.dynamic_sampling_roles={namer: 0.2}",
                     "train.dynamic_sampling_rounds=3")
    assert h["dynamic/rounds"] == 3 and h["dynamic/tasks"] == 15  # the cap: 3 rollouts of 5 tasks
    assert h["dynamic/namer/nonflat"] == 0.0
    assert nonflat_per_round(records, "namer") == [0, 0, 0]
    assert sum(nonflat_per_round(records, "copier")) > 0


def test_a_named_role_fills_its_quota_and_stops(tiny_model_dir, tmp_path):
    """Share 1.0 of the copier's 5 groups per rollout is a quota of 5 non-flat copier groups: the
    step draws until the cumulated count reaches 5 and not one rollout more (the cap, 4 rollouts:
    the 20 train tasks, is not reached; with this seed 2 + 3 groups in two rollouts)."""
    wf = toy_roles("0", "len(output) > 5")
    h, records = run(wf, tiny_model_dir, tmp_path, "train.dynamic_sampling_roles={copier: 1.0}",
                     "train.dynamic_sampling_rounds=4")
    per_round = nonflat_per_round(records, "copier")
    cumulated = [sum(per_round[:i + 1]) for i in range(len(per_round))]
    assert h["dynamic/rounds"] == len(per_round) > 1
    assert h["dynamic/rounds"] < 4
    assert cumulated[-1] >= 5 and all(c < 5 for c in cumulated[:-1])  # filled by the last rollout, not before
    assert h["dynamic/copier/nonflat"] == cumulated[-1]


def test_an_unknown_or_out_of_range_role_share_is_refused_before_launch():
    from masdsl.plan.run_plan import RunPlanError, resolve_run

    wf = toy_roles("0", "0")
    with pytest.raises(RunPlanError, match=r"no role `namr` \(did you mean `namer`\?\); roles: namer, copier"):
        resolve_run(wf, resolve_config(wf.train, overrides=["train.dynamic_sampling_roles={namr: 0.5}"]))
    with pytest.raises(RunPlanError, match=r"dynamic_sampling_roles.namer` must be a share in \(0, 1\]; got 0.0"):
        resolve_run(wf, resolve_config(wf.train, overrides=["train.dynamic_sampling_roles={namer: 0}"]))
    with pytest.raises(RunPlanError, match="mixes roles in a group"):
        resolve_run(wf, resolve_config(wf.train, overrides=["train.dynamic_sampling_roles={namer: 0.5}",
                                                             "train.grouping=turn"]))


def test_a_role_samples_its_own_k_and_groups_keep_that_size(tiny_model_dir, tmp_path):
    """`sample.copier.samples=2` with `train.samples=4`: each namer group holds 4 candidates, each
    copier group 2, still keyed (task, role, turn); the update trains on both."""
    from masdsl.learner.grouping import group_records

    wf = toy_roles("len(output)", "len(output)")
    h, records = run(wf, tiny_model_dir, tmp_path, "sample.copier.samples=2")
    sizes = {(g.key[1], len(g.members)) for g in group_records(records, "at")}
    assert sizes == {("namer", 4), ("copier", 2)}
    assert len({g.key for g in group_records(records, "at")}) == 10  # 5 tasks x 2 roles, one turn


def test_a_role_k_below_one_or_under_trajectory_is_refused():
    from masdsl.config import ConfigError
    from masdsl.lang.errors import MasError
    from masdsl.plan.run_plan import RunPlanError, resolve_run

    text = TOY.read_text().replace("sample { temperature: 1.0, max_tokens: 1 }\n  parse digit = digit(output)\n  reward same(digit, namer.digit)",
                                                         "sample { temperature: 1.0, max_tokens: 1, samples: 0 }\n  parse digit = digit(output)\n  reward same(digit, namer.digit)")
    with pytest.raises(MasError) as err:
        masdsl.loads(text, name="toy_k0", base_dir=TOY_DIR)
    assert "`samples` must be a whole number of at least 1, got 0" in str(err.value)
    assert ":22:" in str(err.value)  # the copier's sample line
    wf = toy_roles("0", "0")
    with pytest.raises(ConfigError, match=r"`sample.copier.samples` must be a whole number of at least 1; got 0"):
        resolve_config(wf.train, overrides=["sample.copier.samples=0"])
    with pytest.raises(RunPlanError, match="a role of its own K needs tree sampling"):
        resolve_run(wf, resolve_config(wf.train, overrides=["sample.copier.samples=2", "train.grouping=trajectory"]))


def test_the_groups_table_shows_a_role_k_from_the_file():
    from masdsl.lang.graph import groups_table, predicted_groups

    text = TOY.read_text().replace(
        "sample { temperature: 1.0, max_tokens: 1 }\n  parse digit = digit(output)\n  reward same(digit, namer.digit)",
        "sample { temperature: 1.0, max_tokens: 1, samples: 2 }\n  parse digit = digit(output)\n  reward same(digit, namer.digit)")
    wf = masdsl.loads(text, name="toy_k2", base_dir=TOY_DIR)
    assert {(g.role, g.size) for g in predicted_groups(wf, 4)} == {("namer", 4), ("copier", 2)}
    assert any(line.split()[:4] == ["copier", "0", "shared", "2"] for line in groups_table(wf, 4).splitlines())
