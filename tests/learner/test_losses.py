"""The GRPO loss: PPO-clip, token-mean over the batch whatever the micro-batching, k3 KL."""

from __future__ import annotations

import pytest
import torch

from masdsl.learner.losses import LOSS_FNS, grpo_loss, k3_kl


def batch(seed=0, b=6, t=5):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(b, t, generator=g) * 3
    old = logp + 0.3 * torch.randn(b, t, generator=g)
    adv = torch.randn(b, generator=g)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    return logp, old, adv, mask


def reference_loss(logp, old, adv, mask, eps):
    """The textbook formula, token by token."""
    total, n = 0.0, 0
    for i in range(logp.shape[0]):
        for j in range(logp.shape[1]):
            if mask[i, j]:
                ratio = torch.exp(logp[i, j] - old[i, j])
                total += -torch.minimum(ratio * adv[i], ratio.clamp(1 - eps, 1 + eps) * adv[i])
                n += 1
    return total / n


def test_registry():
    assert LOSS_FNS["grpo"] is grpo_loss


@pytest.mark.parametrize("eps", [0.1, 0.2])
def test_matches_textbook_ppo_clip_token_mean(eps):
    logp, old, adv, mask = batch()
    out = grpo_loss(logp, old, adv, mask, clip_eps=eps)
    assert torch.allclose(out.loss, reference_loss(logp, old, adv, mask, eps), atol=1e-6)
    ratio = torch.exp(logp - old)
    a = adv[:, None].expand_as(ratio)
    clipped = (((ratio < 1 - eps) & (a < 0)) | ((ratio > 1 + eps) & (a > 0))) & (mask > 0)
    assert out.clip_frac.item() == pytest.approx(clipped.sum().item() / mask.sum().item())
    assert 0 < out.clip_frac.item() < 1  # this batch exercises both branches


def test_micro_batches_sum_to_the_full_batch_gradient():
    logp, old, adv, mask = batch(seed=3)
    full = logp.clone().requires_grad_(True)
    grpo_loss(full, old, adv, mask).loss.backward()
    split = logp.clone().requires_grad_(True)
    n = mask.sum()
    total = 0.0
    for rows in (slice(0, 1), slice(1, 4), slice(4, 6)):
        out = grpo_loss(split[rows], old[rows], adv[rows], mask[rows], n_tokens=n)
        out.loss.backward()
        total += out.loss.item()
    assert torch.allclose(full.grad, split.grad, atol=1e-7)
    assert total == pytest.approx(grpo_loss(logp, old, adv, mask).loss.item(), abs=1e-6)


def test_on_policy_gradient_is_minus_advantage_over_tokens():
    logp, _, adv, mask = batch(seed=1)
    x = logp.clone().requires_grad_(True)
    out = grpo_loss(x, logp, adv, mask)
    out.loss.backward()
    assert out.clip_frac.item() == 0.0
    assert torch.allclose(x.grad, -adv[:, None] * mask / mask.sum(), atol=1e-7)


def test_kl_off_by_default_and_k3_when_on():
    logp, old, adv, mask = batch(seed=2)
    ref = logp - 0.5 * torch.rand_like(logp)
    assert grpo_loss(logp, old, adv, mask, ref_logp=ref).kl.item() == 0.0  # kl_coef 0: off
    on = grpo_loss(logp, old, adv, mask, ref_logp=ref, kl_coef=0.1)
    expected_kl = (k3_kl(logp, ref) * mask).sum() / mask.sum()
    assert on.kl.item() == pytest.approx(expected_kl.item(), rel=1e-6) and on.kl.item() > 0
    off = grpo_loss(logp, old, adv, mask)
    assert on.loss.item() == pytest.approx(off.loss.item() + 0.1 * expected_kl.item(), rel=1e-5)
    assert grpo_loss(logp, old, adv, mask, ref_logp=logp, kl_coef=0.1).kl.item() == 0.0
