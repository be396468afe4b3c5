"""LoRA trains like LoRA: the shared base carries no gradient and no AdamW state, only the adapter's
tensors travel to an engine on sync, and the KL reference with adapters off is no second copy."""

from __future__ import annotations

import gc
import random

import pytest
import torch

import masdsl
from masdsl.learner.learners import open_learners
from masdsl.learner.logprobs import AdapterOff, FrozenModel
from masdsl.learner.policies import load_policies, sync
from masdsl.learner.update import update_policy
from masdsl.plan.run_plan import resolve_rollout
from masdsl.runtime.records import StepRecord
from tests.support.toy import TOY_DIR, toy_config


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


def plan_of(name: str, model_dir, *extra):
    wf = masdsl.load(TOY_DIR / name)
    cfg = toy_config(wf, model_dir, *extra)
    return wf, resolve_rollout(wf, cfg)


def records(policy: str, n: int = 8):
    rng = random.Random(7)
    prompt = [rng.randrange(5, 500) for _ in range(6)]
    out = []
    for c in range(n):
        resp = [rng.randrange(5, 500) for _ in range(rng.randrange(2, 6))]
        out.append(StepRecord(step=0, episode=0, task_id="t", role="namer", turn=0, node="namer", candidate=c,
                              selected=True, policy=policy, prompt_ids=prompt, response_ids=resp,
                              logprobs=[float("nan")] * len(resp), reward=0.0, reward_team=0.0, reward_local=0.0,
                              finish_reason="stop", parse_ok=True))
    return out


def tensor_elements() -> int:
    """Elements of every tensor alive in this process."""
    gc.collect()
    return sum(t.numel() for t in gc.get_objects() if issubclass(type(t), torch.Tensor))


@pytest.fixture(scope="module")
def lora(tiny_model_dir):
    wf, plan = plan_of("toy_digits_lora.mas", tiny_model_dir, "train.kl_coef=0.1", "train.lr=0.01")
    policies = load_policies(plan)
    return plan, policies


def test_base_weights_have_no_gradient_and_no_optimizer_state(lora):
    plan, policies = lora
    learners = open_learners(policies, plan, log=lambda _: None)
    namer, learner = policies["namer_p"], learners["namer_p"]
    assert isinstance(learner.reference, AdapterOff)
    recs = records("namer_p")
    stats = update_policy(namer, learner.optimizer, recs, [(-1.0) ** i for i in range(len(recs))], plan.train,
                          learner.reference)
    assert stats.optimizer_steps >= 1 and stats.kl >= 0.0
    named = dict(namer.model.named_parameters())
    base = {n: p for n, p in named.items() if "lora_" not in n}
    assert base and not any(p.requires_grad or p.grad is not None for p in base.values())
    own = {n for n in named if "lora_" in n and ".namer_p." in n}
    with_state = {n for n, p in named.items() if any(p is q for q in learner.optimizer.state)}
    assert with_state == own  # AdamW moments for every tensor of this adapter, and nothing else
    other = {n: p for n, p in named.items() if ".copier_p." in n}
    assert other and all(p.grad is None for p in other.values())  # the other adapter is not in the graph
    moments = sum(s["exp_avg"].numel() + s["exp_avg_sq"].numel() for s in learner.optimizer.state.values())
    assert moments == 2 * sum(named[n].numel() for n in own)


def test_sync_sends_only_the_adapter(lora):
    """An engine with its own copy of the base (vLLM's adapter engine) receives the adapter's
    tensors alone, and they rebuild the trained adapter on that copy."""
    import copy

    from peft import set_peft_model_state_dict

    from masdsl.runtime.backends.base import LocalEngine

    plan, policies = lora
    namer = policies["namer_p"]

    class Receiver(LocalEngine):
        tokenizer, sent, takes_adapter = namer.tokenizer, None, True

        def update_weights(self, state_dict):
            self.sent = dict(state_dict)

    engine = Receiver()
    copy_of_base = copy.deepcopy(namer.model)
    with torch.no_grad():
        for n, p in namer.model.named_parameters():
            if ".namer_p." in n:
                p.add_(0.01)  # a trained adapter
    sync(namer, engine)
    assert engine.sent and all("lora_" in k for k in engine.sent)
    adapter_elements = sum(v.numel() for v in engine.sent.values())
    assert adapter_elements == sum(p.numel() for p in namer.parameters())  # this adapter's tensors, no more
    assert adapter_elements < 0.1 * sum(p.numel() for p in namer.model.parameters())
    set_peft_model_state_dict(copy_of_base, engine.sent, adapter_name="namer_p")
    theirs = dict(copy_of_base.named_parameters())
    for n, p in namer.model.named_parameters():
        assert torch.equal(theirs[n], p), n  # the receiver now holds the trained adapter


def test_an_engine_without_lora_gets_base_and_adapter_merged(lora, tiny_model_dir):
    """`runtime.lora_sync=merged`: a LoRA policy's plain engine receives the modules the adapter
    changes, merged, which in a plain copy of the base compute what the adapter computes; the
    embedding, which the adapter leaves alone, does not travel."""
    from masdsl.runtime.backends.base import LocalEngine
    from masdsl.models.load import load_model

    plan, policies = lora
    namer = policies["namer_p"]

    class Plain(LocalEngine):
        tokenizer, sent = namer.tokenizer, None

        def update_weights(self, state_dict):
            self.sent = dict(state_dict)

    with torch.no_grad():
        for n, p in namer.model.named_parameters():
            if ".namer_p." in n and "lora_B" in n:
                p.add_(0.05)  # a trained adapter
    engine = Plain()
    sync(namer, engine)
    assert engine.sent and not any("lora_" in k for k in engine.sent)
    assert "model.embed_tokens.weight" not in engine.sent
    plain, _ = load_model(str(tiny_model_dir))
    assert not plain.load_state_dict(engine.sent, strict=False).unexpected_keys
    ids = torch.tensor([[5, 17, 42, 9]])
    namer.activate()
    with torch.no_grad():
        assert torch.allclose(namer.model(ids).logits, plain.eval()(ids).logits, atol=1e-5)


def test_the_kl_reference_of_a_lora_policy_is_no_second_copy(lora, tiny_model_dir):
    """`references` for LoRA allocates no tensor; for a full policy it loads the starting weights
    (the same measurement sees that copy)."""
    from masdsl.learner.workers import references

    plan, policies = lora
    before = tensor_elements()
    refs = references(policies, plan)
    assert all(isinstance(r, AdapterOff) for r in refs.values()) and tensor_elements() == before
    wf, full_plan = plan_of("toy_digits.mas", tiny_model_dir, "train.kl_coef=0.1")
    full = load_policies(full_plan)
    before = tensor_elements()
    full_refs = references(full, full_plan)
    copy_elements = sum(p.numel() for p in next(iter(full.values())).model.parameters())
    assert all(isinstance(r, FrozenModel) for r in full_refs.values())
    assert tensor_elements() - before >= copy_elements
