"""The metrics researchers look for (issue 31, item 5): the policy's entropy and the KL from the
old policy measured by every update (with `train.kl_coef = 0` too), per-role success, non-flat
share, |advantage| and clip fraction, and the step's time per phase, checked against hand
computations on a tiny model and on constructed records."""

from __future__ import annotations

import math

import pytest
import torch

from masdsl.config import resolve_config
from masdsl.learner.advantages import compute_advantages
from masdsl.learner.grouping import group_records
from masdsl.learner.logprobs import sequence_logprobs
from masdsl.learner.update import update_policy
from masdsl.plan.run_plan import resolve_run
from masdsl.runtime.episodes import EpisodeResult
from masdsl.runtime.records import StepRecord
from masdsl.training.metrics import role_metrics

from tests.support.toy import dense_toy, toy_config, train_into
from tests.support.updates import make_policy, rollout_rows

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


def two_roles(recs):
    """The rows of odd prompts become role `b` (groups stay whole: a prompt's K rows are one group)."""
    for r in recs:
        if int(r.task_id[1:]) % 2:
            r.role = "b"
    return recs


def hand_entropy(logps):
    """mean of -log p over every token of `logps` (lists of per-token log-probs)."""
    flat = [x for row in logps for x in row]
    return -sum(flat) / len(flat)


@pytest.mark.parametrize("source", ["trainer", "engine"])
def test_entropy_and_kl_from_the_old_policy_with_kl_off(fresh, source):
    model, tok = fresh
    recs = two_roles(rollout_rows(model, tok, n_prompts=12))
    for r in recs[:4]:  # the first prompt's group is flat: its rows are not run, nor in the entropy
        r.reward = 0.5
    adv, _ = compute_advantages(group_records(recs, "at"), len(recs))
    run = [i for i, a in enumerate(adv) if a != 0.0]
    assert len(run) == 44
    with torch.no_grad():  # the behaviour policy's log-probs, by hand, before any step
        lp, _ = sequence_logprobs(model, [recs[i].prompt_ids for i in run], [recs[i].response_ids for i in run],
                                  tok.pad_token_id)
    by_hand = hand_entropy([lp[k, : len(recs[i].response_ids)].tolist() for k, i in enumerate(run)])
    if source == "engine":  # the sampler's own numbers, shifted so the two sources differ
        for r in recs:
            r.logprobs = [x - 0.25 for x in r.logprobs]
        by_hand = hand_entropy([recs[i].logprobs for i in run])
    tc = resolve_config(overrides=["train.mini_batch_size=16", "train.ppo_epochs=2", "train.lr=0.05",
                                   "train.kl_coef=0", f"train.old_logprobs={source}"]).train
    stats = update_policy(make_policy(model, tok), torch.optim.AdamW(model.parameters(), lr=tc.lr), recs, adv, tc)
    assert stats.optimizer_steps == 6 and stats.kl == 0.0  # 48 kept rows / 16, two epochs; no reference
    assert stats.entropy == pytest.approx(by_hand, rel=1e-5)
    first, later = stats.per_step[0], stats.per_step[1:]
    if source == "trainer":  # new == old on the first mini-batch of the first epoch
        assert first["kl_old"] < 1e-9
        assert all(s["kl_old"] > 1e-4 for s in later)  # then the policy drifts from the old one
    else:  # the engine's log-probs were shifted by 0.25 nats: k3 = e^0.25 - 1.25 at the first step
        assert first["kl_old"] == pytest.approx(math.exp(0.25) - 1.25, rel=1e-3)
    assert stats.kl_old == pytest.approx(sum(s["kl_old"] for s in stats.per_step) / 6)
    assert math.isfinite(stats.kl_old) and stats.kl_old > 0
    # per role: each step's clipped tokens of the two roles add up to the policy's clip fraction
    tokens = [sum(len(r.response_ids) for r in recs[k : k + 16]) for k in (0, 16, 32)] * 2
    for s, n in zip(stats.per_step, tokens):
        assert s["clip_frac"] == pytest.approx((s["clipped/r"] + s["clipped/b"]) / n)
    assert set(stats.role_clip_frac) == {"r", "b"} and any(v > 0 for v in stats.role_clip_frac.values())


def test_one_role_clip_fraction_is_the_policys(fresh):
    model, tok = fresh
    recs = rollout_rows(model, tok, n_prompts=8)
    adv, _ = compute_advantages(group_records(recs, "at"), len(recs))
    tc = resolve_config(overrides=["train.mini_batch_size=8", "train.lr=0.05", "train.old_logprobs=trainer"]).train
    stats = update_policy(make_policy(model, tok), torch.optim.AdamW(model.parameters(), lr=tc.lr), recs, adv, tc)
    assert stats.clip_frac > 0 and stats.role_clip_frac == {"r": pytest.approx(stats.clip_frac)}
    assert stats.old_logprobs_s > 0  # the trainer's pass fixing the old log-probs ran, and was timed


def test_an_update_of_flat_groups_only_reports_the_samplers_entropy(fresh):
    model, tok = fresh
    recs = rollout_rows(model, tok, n_prompts=3)
    tc = resolve_config(overrides=["train.kl_coef=0"]).train
    stats = update_policy(make_policy(model, tok), torch.optim.AdamW(model.parameters()), recs, [0.0] * 12, tc)
    assert stats.optimizer_steps == 0 and stats.kl_old == 0.0  # nothing ran: the policy did not move
    assert stats.entropy == pytest.approx(hand_entropy([r.logprobs for r in recs]))
    assert stats.role_clip_frac == {"r": 0.0}


def rec(task, role, cand, reward, episode):
    return StepRecord(step=1, episode=episode, task_id=task, role=role, turn=0, node=role, candidate=cand,
                      selected=cand == 0, policy="p", prompt_ids=[1], response_ids=[2], logprobs=[-1.0],
                      reward=reward, reward_team=0.0, reward_local=reward, finish_reason="stop", parse_ok=True)


def test_role_metrics_by_hand():
    # task t0: coder 1, 0, 1, 0 (non-flat); tester 1, 1, 1, 1 (flat)
    # task t1: coder 0, 0, 0, 0 (flat);     tester 1, 0, 0, 0 (non-flat)
    # task t2: only the coder acts: 1, 1, 0, 0 (non-flat)
    recs = []
    for task, ep, coder, tester in [("t0", 0, [1, 0, 1, 0], [1, 1, 1, 1]), ("t1", 1, [0, 0, 0, 0], [1, 0, 0, 0]),
                                    ("t2", 2, [1, 1, 0, 0], None)]:
        recs += [rec(task, "coder", c, float(r), ep) for c, r in enumerate(coder)]
        recs += [rec(task, "tester", c, float(r), ep) for c, r in enumerate(tester or [])]
    groups = group_records(recs, "at")
    adv, _ = compute_advantages(groups, len(recs))
    episodes = [EpisodeResult("t0", 1.0, 1.0, {"coder": 1, "tester": 1}, False, {}),
                EpisodeResult("t1", 0.0, 0.0, {"coder": 1, "tester": 1}, False, {}),
                EpisodeResult("t2", 1.0, 1.0, {"coder": 1}, False, {})]
    m = role_metrics(recs, episodes, groups, adv)
    a = 0.5 / math.sqrt(1 / 3) / (1 + 1e-6 / math.sqrt(1 / 3))  # |r - mean| / (std + eps) for rewards 1, 1, 0, 0
    t = 0.75 / 0.5 / (1 + 2e-6)  # the tester's one 1 of four: std 0.5; the three 0s get 0.25 / 0.5
    assert m["success/train/coder"] == pytest.approx(2 / 3) and m["success/train/tester"] == pytest.approx(0.5)
    assert m["nonflat/coder"] == pytest.approx(2 / 3) and m["nonflat/tester"] == pytest.approx(0.5)
    assert m["adv_abs/coder"] == pytest.approx(8 * a / 12)  # 8 rows of +-a, 4 flat rows of 0
    assert m["adv_abs/tester"] == pytest.approx((t + 3 * t / 3) / 8)


def test_a_training_step_with_kl_off_logs_entropy_kl_roles_and_phase_times(tiny_model_dir, tmp_path):
    """The must-show of issue 31: `train.kl_coef = 0`, two trained policies; every metric of the
    step goes to MLflow (a SQLite store here) and into the step's history the display reads."""
    from mlflow.tracking import MlflowClient

    wf = dense_toy("toy_digits_lora.mas")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = toy_config(wf, tiny_model_dir, "train.steps=1", "train.samples=4", "train.batch=5", "train.eval_tasks=2",
                 "train.kl_coef=0", "tracking.enabled=true", f"tracking.uri={uri}", "tracking.experiment=m")
    result = train_into(resolve_run(wf, cfg), tmp_path / "run")
    h = result.history[-1]
    for p in ("namer_p", "copier_p"):
        assert math.isfinite(h[f"entropy/{p}"]) and h[f"entropy/{p}"] > 0
        assert math.isfinite(h[f"kl_old/{p}"]) and h[f"kl_old/{p}"] >= 0
        assert f"kl/{p}" not in h  # the reference KL needs a reference: only with kl_coef > 0
    for role, p in (("namer", "namer_p"), ("copier", "copier_p")):
        assert 0 <= h[f"success/train/{role}"] <= 1 and 0 <= h[f"nonflat/{role}"] <= 1
        assert h[f"adv_abs/{role}"] >= 0 and 0 <= h[f"clip_frac/{p}/{role}"] <= 1
    phases = ("rollout", "old_logprobs", "update", "sync", "eval", "checkpoint", "tracking", "step")
    assert all(h[f"time/{ph}_s"] >= 0 for ph in phases)
    assert h["time/eval_s"] > 0 and h["time/step_s"] >= h["time/rollout_s"] + h["time/eval_s"]
    client = MlflowClient(uri)
    logged = client.get_run(result.mlflow_run_id).data.metrics
    keys = {k for k in h if k != "step"}
    assert keys <= set(logged), keys - set(logged)
    assert all(logged[k] == pytest.approx(h[k]) for k in keys)
    kids = {r.info.run_name: r for r in client.search_runs(
        [client.get_run(result.mlflow_run_id).info.experiment_id],
        f"tags.mlflow.parentRunId = '{result.mlflow_run_id}'")}
    assert {"entropy/namer_p", "kl_old/namer_p", "clip_frac/namer_p/namer", "success/train/namer",
            "nonflat/namer", "adv_abs/namer"} <= set(kids["namer_p"].data.metrics)
