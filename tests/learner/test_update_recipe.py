"""The paper's update recipe on a tiny model: PPO mini-batches (several optimizer steps per
rollout, the clip acting on the later ones), the dual clip, the group filter, old log-probs
fixed before the first step, and fp32 master weights under a bfloat16 compute dtype."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from masdsl.config import resolve_config
from masdsl.learner.advantages import compute_advantages, select_groups
from masdsl.learner.grouping import group_records
from masdsl.learner.losses import grpo_loss
from masdsl.learner.update import update_policy
from masdsl.runtime.records import StepRecord
from tests.support.toy import TOY
from tests.support.updates import make_policy, rollout_rows


def test_64_rows_in_mini_batches_of_16_take_4_steps_and_later_ones_clip(fresh):
    model, tok = fresh
    recs = rollout_rows(model, tok)
    assert len(recs) == 64
    adv, _ = compute_advantages(group_records(recs, "at"), len(recs))
    tc = resolve_config(overrides=["train.mini_batch_size=16", "train.lr=0.05", "train.old_logprobs=engine"]).train
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=0.0)
    stats = update_policy(make_policy(model, tok), opt, recs, adv, tc)
    assert stats.optimizer_steps == 4 and len(stats.per_step) == 4
    first, later = stats.per_step[0], stats.per_step[1:]
    assert first["ratio_dev"] < 1e-5 and first["clip_frac"] == 0.0  # old log-probs = the policy before step 1
    assert all(s["ratio_dev"] > 1e-3 for s in later)  # the policy moved: ratios != 1
    assert sum(s["clip_frac"] for s in later) > 0  # and PPO's clip acts
    assert stats.logprob_gap < 1e-4  # the sampler's log-probs are the trainer's here


def test_ppo_epochs_and_whole_batch_mode(fresh):
    model, tok = fresh
    recs = rollout_rows(model, tok, n_prompts=4)
    adv, _ = compute_advantages(group_records(recs, "at"), len(recs))
    tc = resolve_config(overrides=["train.mini_batch_size=0", "train.ppo_epochs=3", "train.lr=0.01"]).train
    stats = update_policy(make_policy(model, tok), torch.optim.AdamW(model.parameters(), lr=tc.lr), recs, adv, tc)
    assert stats.optimizer_steps == 3  # one step per epoch: the whole rollout as one mini-batch


def test_old_logprobs_are_fixed_before_the_first_step_when_recomputed(fresh):
    model, tok = fresh
    recs = rollout_rows(model, tok, n_prompts=8)
    for r in recs:  # a sampler whose numbers are off: the trainer's recomputation must win
        r.logprobs = [x - 0.5 for x in r.logprobs]
    adv, _ = compute_advantages(group_records(recs, "at"), len(recs))
    tc = resolve_config(overrides=["train.mini_batch_size=16", "train.lr=0.05", "train.old_logprobs=trainer"]).train
    stats = update_policy(make_policy(model, tok), torch.optim.AdamW(model.parameters(), lr=tc.lr), recs, adv, tc)
    assert stats.optimizer_steps == 2
    assert stats.per_step[0]["ratio_dev"] < 1e-6  # recomputed by the trainer: exactly on-policy at step 1
    assert stats.per_step[1]["ratio_dev"] > 1e-3  # fixed, not recomputed after the first step
    assert stats.logprob_gap == pytest.approx(0.5, abs=1e-4)  # the measured sampler-trainer mismatch


@pytest.mark.parametrize("source", ["trainer", "engine"])
def test_rows_without_the_samplers_log_probs(fresh, source):
    """A rollout that did not ask the engine for log-probs (`asks_engine_logprobs`): the trainer's
    recomputed ones train as before and the gap is not measured (nan, not 0); with the engine's
    as the source, the trainer fixes them instead (not the current forward's: ratio 1 throughout).
    SGD: AdamW's per-element normalisation turns float noise in a near-zero gradient into steps of lr."""
    model, tok = fresh
    recs = rollout_rows(model, tok, n_prompts=8)
    adv, _ = compute_advantages(group_records(recs, "at"), len(recs))
    tc = resolve_config(overrides=["train.mini_batch_size=16", "train.lr=0.5", f"train.old_logprobs={source}"]).train
    start = copy.deepcopy(model.state_dict())
    runs = {}
    for name, rows in (("with", recs), ("without", [dataclasses.replace(r, logprobs=[]) for r in recs])):
        model.load_state_dict(start)
        stats = update_policy(make_policy(model, tok), torch.optim.SGD(model.parameters(), lr=tc.lr), rows, adv, tc)
        runs[name] = stats, {k: v.clone() for k, v in model.state_dict().items()}
    (s_with, w_with), (s_without, w_without) = runs["with"], runs["without"]
    assert s_with.logprob_gap < 1e-4 and math.isnan(s_without.logprob_gap)
    assert s_without.per_step[0]["ratio_dev"] < 1e-6 and s_without.per_step[1]["ratio_dev"] > 1e-3
    assert all(torch.allclose(w_with[k], w_without[k], atol=1e-6) for k in w_with)
    assert any(not torch.equal(w_with[k], start[k]) for k in start)


def test_dual_clip_bounds_the_loss_of_negative_advantage_tokens():
    logp = torch.log(torch.tensor([[0.9, 0.6, 0.2]])).requires_grad_(True)
    old = torch.log(torch.tensor([[0.1, 0.5, 0.2]]))  # ratios 9, 1.2, 1
    adv = torch.tensor([-2.0])
    plain = grpo_loss(logp, old, adv, torch.ones(1, 3), n_tokens=1.0)
    dual = grpo_loss(logp, old, adv, torch.ones(1, 3), dual_clip=3.0, n_tokens=1.0)
    assert plain.loss.item() == pytest.approx(2.0 * (9 + 1.2 + 1))  # unbounded: grows with the ratio
    assert dual.loss.item() == pytest.approx(3 * 2.0 + 2.0 * (1.2 + 1))  # token 0 capped at -c * A
    assert dual.dual_clip_frac.item() == pytest.approx(1.0)
    dual.loss.backward()
    assert logp.grad[0, 0].item() == 0.0 and logp.grad[0, 1].item() != 0.0
    pos = grpo_loss(logp.detach(), old, torch.tensor([2.0]), torch.ones(1, 3), dual_clip=3.0)
    assert pos.dual_clip_frac.item() == 0.0  # positive advantages are never dual-clipped


def record(task, cand, reward, n=3):
    return StepRecord(step=0, episode=0, task_id=task, role="r", turn=0, node="r", candidate=cand, selected=cand == 0,
                      policy="p", prompt_ids=[1, 2], response_ids=[3] * n, logprobs=[-1.0] * n, reward=reward,
                      reward_team=0.0, reward_local=reward, finish_reason="stop", parse_ok=True)


def test_group_filter_drops_what_it_says():
    rewards = {"flat": [1.0, 1.0], "low": [0.0, 0.2], "mid": [0.4, 0.6], "high": [1.0, 2.0], "zero": [0.0, 0.0]}
    recs = [record(t, c, r) for t, rs in rewards.items() for c, r in enumerate(rs)]
    groups = group_records(recs, "at")
    keys = lambda gs: [g.key[0] for g in gs]  # noqa: E731
    assert keys(select_groups(groups)) == ["flat", "low", "mid", "high", "zero"]
    assert keys(select_groups(groups, drop_flat=True)) == ["low", "mid", "high"]
    assert keys(select_groups(groups, drop_lowest=0.4)) == ["flat", "mid", "high"]  # 2 of 5: means 0.0 and 0.1
    assert keys(select_groups(groups, drop_flat=True, drop_lowest=0.34)) == ["mid", "high"]


def test_dropped_groups_leave_the_update(fresh):
    model, tok = fresh
    recs = rollout_rows(model, tok, n_prompts=4)
    for r in recs[:4]:
        r.reward = 0.5  # task t0 is flat
    groups = group_records(recs, "at")
    adv, _ = compute_advantages(groups, len(recs))
    kept = select_groups(groups, drop_flat=True)
    keep = [False] * len(recs)
    for g in kept:
        for i in g.indices:
            keep[i] = True
    tc = resolve_config(overrides=["train.mini_batch_size=4", "train.lr=0.01"]).train
    with_flat = update_policy(make_policy(model, tok), torch.optim.AdamW(model.parameters(), lr=tc.lr), recs, adv, tc)
    without = update_policy(make_policy(model, tok), torch.optim.AdamW(model.parameters(), lr=tc.lr), recs, adv, tc,
                            keep=keep)
    assert without.tokens == sum(len(r.response_ids) for r in recs[4:])
    assert with_flat.tokens == sum(len(r.response_ids) for r in recs)
    assert without.optimizer_steps == with_flat.optimizer_steps == 3  # the flat group had no step of its own


def _changed_fraction(tiny_model_dir, master):
    from masdsl.learner.policies import master_dtype
    from masdsl.plan.run_plan import resolve_rollout  # the plan names the master dtype

    import masdsl  # as above
    from masdsl.models.load import load_model

    cfg = resolve_config(overrides=["runtime.dtype=bfloat16", f"train.master_weights={master}", "train.lr=1e-6",
                                    "train.mini_batch_size=0"])
    torch.manual_seed(0)
    toy = masdsl.load(TOY)
    model, tok = load_model(tiny_model_dir, dtype=master_dtype(resolve_rollout(toy, cfg)))
    recs = rollout_rows(model, tok, n_prompts=4)
    adv, _ = compute_advantages(group_records(recs, "at"), len(recs))
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr, weight_decay=0.0)
    stats = update_policy(make_policy(model, tok, "bfloat16"), opt, recs, adv, cfg.train)
    assert stats.optimizer_steps == 1
    changed = sum(int((p.detach() != b).sum()) for p, b in zip(model.parameters(), before))
    return changed / sum(b.numel() for b in before), next(model.parameters()).dtype


def test_fp32_master_weights_keep_an_lr_1e6_update_that_bf16_weights_lose(tiny_model_dir):
    pure, pure_dtype = _changed_fraction(tiny_model_dir, "compute")
    mixed, mixed_dtype = _changed_fraction(tiny_model_dir, "float32")
    assert pure_dtype == torch.bfloat16 and mixed_dtype == torch.float32
    assert pure < 0.05  # bf16 weights: almost every step of 1e-6 rounds away
    assert mixed > 0.5  # fp32 master weights (bf16 compute under autocast): the step lands


@pytest.mark.parametrize("epochs", [1, 2])
def test_the_first_steps_own_forward_gives_the_old_logprobs_a_pre_pass_gives(fresh, epochs):
    """`train.old_logprobs=trainer` runs no pass of its own for the first mini-batch (its forward
    comes before any step): the update equals one whose old log-probs were all computed before it."""
    import copy

    model, tok = fresh
    recs = rollout_rows(model, tok, n_prompts=12)  # the records' log-probs: the model's, before any step
    adv, _ = compute_advantages(group_records(recs, "at"), len(recs))
    trained = {}
    for source in ("trainer", "engine"):
        m = copy.deepcopy(model)
        tc = resolve_config(overrides=["train.mini_batch_size=16", f"train.ppo_epochs={epochs}",
                                       "train.kl_coef=0", f"train.old_logprobs={source}"]).train
        # SGD, not AdamW: Adam scales each element's step by its own gradient's size, so float
        # noise in a near-zero gradient moves that weight by up to lr (7e-5 between the two paths
        # on an AVX512 CPU); SGD keeps equal paths equal to float noise. lr 0.5 moves the policy
        # enough that the clip acts (ratio deviations 0.09-0.57).
        stats = update_policy(make_policy(m, tok), torch.optim.SGD(m.parameters(), lr=0.5), recs, adv, tc)
        assert stats.optimizer_steps == 3 * epochs
        trained[source] = (m, stats)
    (m_t, s_t), (m_e, s_e) = trained["trainer"], trained["engine"]
    assert all(s["ratio_dev"] > 1e-4 for s in s_t.per_step[1:])  # the policy moved between steps
    assert s_t.logprob_gap < 1e-4  # every row's old log-prob was fixed, the first mini-batch's too
    for a, b in zip(s_t.per_step, s_e.per_step):
        assert a["clip_frac"] == b["clip_frac"] and a["ratio_dev"] == pytest.approx(b["ratio_dev"], rel=1e-3, abs=1e-6)
    for (name, p), q in zip(m_t.named_parameters(), m_e.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
