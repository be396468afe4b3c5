"""The update step on a tiny model: shared-prefix log-probs equal plain ones, micro-batching
does not change the gradient, and an update moves probability toward positive advantages."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from masdsl.config import resolve_config
from masdsl.learner.logprobs import sequence_logprobs, shared_prefix_logprobs
from masdsl.learner.update import micro_batches, split_groups, update_policy
from masdsl.runtime.records import StepRecord
from tests.support.updates import make_policy


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from masdsl.models.load import load_model

    torch.set_num_threads(1)
    return load_model(tiny_model_dir)


def rows(seed=0, prompts=3, k=4):
    rng = random.Random(seed)
    ps = [[rng.randrange(5, 500) for _ in range(rng.randrange(3, 9))] for _ in range(prompts)]
    out = []
    for g, p in enumerate(ps):
        for _ in range(k):
            out.append((g, p, [rng.randrange(5, 500) for _ in range(rng.randrange(1, 6))]))
    return ps, out


def test_shared_prefix_equals_full_sequences(tiny):
    model, tok = tiny
    ps, rs = rows()
    pad = tok.pad_token_id
    with torch.no_grad():
        a, ma = sequence_logprobs(model, [p for _, p, _ in rs], [r for _, _, r in rs], pad)
        b, mb = shared_prefix_logprobs(model, ps, [g for g, _, _ in rs], [r for _, _, r in rs], pad)
    assert torch.equal(ma, mb)
    assert torch.allclose(a * ma, b * mb, atol=1e-5)


def test_shared_prefix_gradients_equal(tiny):
    model, tok = tiny
    ps, rs = rows(seed=1, prompts=2, k=3)
    grads = []
    for fn in ("full", "shared"):
        model.zero_grad()
        if fn == "full":
            lp, m = sequence_logprobs(model, [p for _, p, _ in rs], [r for _, _, r in rs], tok.pad_token_id)
        else:
            lp, m = shared_prefix_logprobs(model, ps, [g for g, _, _ in rs], [r for _, _, r in rs], tok.pad_token_id)
        (lp * m).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    model.zero_grad()
    assert torch.allclose(grads[0], grads[1], atol=1e-4, rtol=1e-3)


def test_micro_batches_cover_rows_once_within_budget():
    rng = random.Random(3)
    keys = [rng.randrange(6) for _ in range(40)]
    plens = {k: rng.randrange(5, 30) for k in range(6)}
    pl = [plens[k] for k in keys]
    rl = [rng.randrange(1, 20) for _ in keys]
    plan = micro_batches(keys, pl, rl, budget=120)
    flat = sorted(i for mb in plan for g in mb for i in g)
    assert flat == list(range(40))
    for mb in plan:
        for g in mb:
            assert len({keys[i] for i in g}) == 1
        rows_ = [i for g in mb for i in g]
        cost = len(mb) * max(pl[i] for i in rows_) + len(rows_) * max(rl[i] for i in rows_)
        assert cost <= 120 or len(rows_) == 1


def record(prompt, response, logprobs, policy="p"):
    return StepRecord(step=0, episode=0, task_id="t", role="r", turn=0, node="r", candidate=0, selected=True,
                      policy=policy, prompt_ids=prompt, response_ids=response, logprobs=logprobs, reward=0.0,
                      reward_team=0.0, reward_local=0.0, finish_reason="stop", parse_ok=True)


def test_split_groups_counts_the_groups_micro_batches_splits():
    """The count is derived from the groups' own cost; checked against the packing itself, which
    splits only a group too big for the budget alone (not one that straddles a boundary)."""
    rng = random.Random(3)
    for _ in range(200):
        recs = []
        for g in range(rng.randrange(1, 6)):
            prompt = [g + 1] * rng.randrange(1, 12)
            recs += [SimpleNamespace(prompt_ids=prompt, response_ids=[0] * rng.randrange(1, 9))
                     for _ in range(rng.randrange(1, 5))]
        budget = rng.randrange(4, 60)
        keys = [tuple(r.prompt_ids) for r in recs]
        plan = micro_batches(keys, [len(k) for k in keys], [len(r.response_ids) for r in recs], budget)
        spans = {}
        for mb in plan:
            for group in mb:
                spans[keys[group[0]]] = spans.get(keys[group[0]], 0) + 1
        split, groups, _ = split_groups(recs, range(len(recs)), budget)
        assert (split, groups) == (sum(n > 1 for n in spans.values()), len(spans))


def test_update_raises_logprob_of_positive_advantage_and_budget_is_irrelevant(tiny_model_dir):
    from masdsl.models.load import load_model

    ps, rs = rows(seed=2, prompts=2, k=4)
    results = []
    for budget, pack in ((8, "true"), (100_000, "true"), (100_000, "false")):
        torch.manual_seed(0)
        model, tok = load_model(tiny_model_dir)
        with torch.no_grad():
            old, _ = sequence_logprobs(model, [p for _, p, _ in rs], [r for _, _, r in rs], tok.pad_token_id)
        recs = [record(p, r, old[i, : len(r)].tolist()) for i, (_, p, r) in enumerate(rs)]
        adv = [1.0, -1.0, 0.5, -0.5, 0.0, 0.0, 0.3, -0.3]
        policy = make_policy(model, tok)
        tc = resolve_config(overrides=[f"train.micro_batch_tokens={budget}", "train.lr=0.01",
                                       f"train.pack_rows={pack}"]).train
        opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=0.0)
        stats = update_policy(policy, opt, recs, adv, tc)
        assert stats.rows == 6 and stats.clip_frac == 0.0  # zero-advantage rows skipped; on-policy
        with torch.no_grad():
            new, _ = sequence_logprobs(model, [p for _, p, _ in rs], [r for _, _, r in rs], tok.pad_token_id)
        results.append((new, stats))
    new, _ = results[0]
    total = lambda t, i: t[i, : len(rs[i][2])].sum().item()  # noqa: E731
    assert total(new, 0) > total(old, 0) and total(new, 1) < total(old, 1)
    assert torch.allclose(results[0][0], results[1][0], atol=1e-5)
    assert results[0][1].grad_norm == pytest.approx(results[1][1].grad_norm, rel=1e-4)
    # packing a group's replies without padding (the default) trains as the padded path does
    assert torch.allclose(results[1][0], results[2][0], atol=1e-5)
    assert results[1][1].grad_norm == pytest.approx(results[2][1].grad_norm, rel=1e-4)
    # but a budget below a prompt group splits it: its prompt runs once per micro-batch (reported)
    small, large = results[0][1], results[1][1]
    by_prompt = {}
    for i, (_, p, r) in enumerate(rs):
        if adv[i] != 0.0:
            by_prompt.setdefault(tuple(p), []).append(len(r))
    assert small.groups == large.groups == len(by_prompt) == 2
    assert small.split_groups == 2 and large.split_groups == 0
    assert small.largest_group_tokens == large.largest_group_tokens == max(  # packed: the prompt and its replies
        len(p) + sum(r) for p, r in by_prompt.items()) > 8
    assert results[2][1].largest_group_tokens == max(len(p) + len(r) * max(r) for p, r in by_prompt.items())


def test_kl_references_are_the_starting_weights_or_the_base_with_adapters_off(tiny):
    """`FrozenModel` scores with its own frozen copy; `AdapterOff` with the policy's base, whatever
    its adapter has learned (the reference is a type, not a marker string)."""
    import copy

    from peft import LoraConfig, get_peft_model

    from masdsl.learner.logprobs import AdapterOff, FrozenModel

    model, tok = tiny
    prompts, responses = [[5, 6, 7], [8, 9]], [[10, 11, 12], [13]]
    base, _ = sequence_logprobs(model, prompts, responses, tok.pad_token_id)
    with torch.no_grad():
        assert torch.equal(FrozenModel(model).logprobs(None, prompts, responses, tok.pad_token_id), base)
        lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)  # B != 0
        adapted = get_peft_model(copy.deepcopy(model), lora)
        moved, _ = sequence_logprobs(adapted, prompts, responses, tok.pad_token_id)
        off = AdapterOff().logprobs(adapted, prompts, responses, tok.pad_token_id)
    assert not torch.allclose(moved, base)  # the adapter changes the policy...
    assert torch.allclose(off, base, atol=1e-6)  # ...and the reference is the base without it
