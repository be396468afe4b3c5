"""`masdsl.learner.learners`: one interface for where a policy trains (the driver or Ray workers)."""

from __future__ import annotations

import pytest
import torch

import masdsl
from masdsl.config import resolve_config
from masdsl.errors import StepFailed
from masdsl.learner.advantages import compute_advantages
from masdsl.learner.grouping import group_records
from masdsl.learner.learners import LocalLearner, open_learners, update_policies
from masdsl.learner.parallel import ONE_PROCESS
from masdsl.learner.update import UpdateBatch, update_policy
from masdsl.learner.workers import build_optimizer
from masdsl.plan.run_plan import resolve_run
from tests.support.toy import TOY_LORA
from tests.support.updates import make_policy, rollout_rows

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


class Journal:
    """A `Learner` that writes down what it was asked, in order (and fails its `finish` if told to)."""

    def __init__(self, name, calls, fail=False):
        self.name, self.calls, self.fail = name, calls, fail

    def start(self, batch):
        self.calls.append(("start", self.name))
        return self.name

    def finish(self, pending, batch, policy, log=None):
        self.calls.append(("finish", self.name))
        if self.fail:
            raise StepFailed(f"learner worker of policy `{self.name}` failed (update): gone")
        return pending

    def commit(self, result, policy):
        self.calls.append(("commit", self.name))
        return result


def test_every_update_starts_before_any_finishes_and_is_kept_only_when_all_finished():
    calls = []
    learners = {"a": Journal("a", calls), "b": Journal("b", calls)}
    assert update_policies(learners, {"a": None, "b": None}, UpdateBatch([], [])) == {"a": "a", "b": "b"}
    assert calls == [("start", "a"), ("start", "b"), ("finish", "a"), ("finish", "b"), ("commit", "a"), ("commit", "b")]
    calls.clear()
    learners["b"].fail = True
    with pytest.raises(StepFailed, match="policy `b`"):
        update_policies(learners, {"a": None, "b": None}, UpdateBatch([], []))
    assert not [c for c in calls if c[0] == "commit"]  # a failed step keeps no policy's update


def test_the_local_learner_is_the_plain_update(tiny_model_dir):
    """Through the interface, the driver's update is `update_policy` with the one-process shard, bit for bit."""
    from masdsl.models.load import load_model

    tc = resolve_config(overrides=["train.lr=0.001", "train.mini_batch_size=8"]).train
    out = []
    for via_learner in (True, False):
        torch.manual_seed(0)
        model, tok = load_model(tiny_model_dir)
        policy = make_policy(model, tok)
        recs = rollout_rows(model, tok, n_prompts=4)
        adv, _ = compute_advantages(group_records(recs, "at"), len(recs))
        opt = build_optimizer(policy.parameters(), tc)
        if via_learner:
            stats = update_policies({"p": LocalLearner(opt, tc)}, {"p": policy}, UpdateBatch(recs, adv))["p"]
        else:
            stats = update_policy(policy, opt, recs, adv, tc, shard=ONE_PROCESS)
        assert stats.optimizer_steps == 2
        out.append({k: v.clone() for k, v in model.state_dict().items()})
    assert all(torch.equal(out[0][k], out[1][k]) for k in out[0])


def test_open_learners_follows_the_plan_placement(tiny_model_dir):
    wf = masdsl.load(TOY_LORA)
    plan = resolve_run(wf, resolve_config(wf.train, overrides=["runtime.engine=hf", "train.kl_coef=0.1",
                                                               f"policy.*.model={tiny_model_dir}",
                                                               "policy.copier_p.frozen=true"]))
    from masdsl.learner.logprobs import AdapterOff
    from masdsl.learner.policies import load_policies

    policies = load_policies(plan)
    learners = open_learners(policies, plan, print)
    assert set(learners) == {"namer_p"}  # the frozen policy has no learner
    assert isinstance(learners["namer_p"], LocalLearner) and isinstance(learners["namer_p"].reference, AdapterOff)
    assert learners["namer_p"].state_dict()["state"] == {}  # AdamW before any step
