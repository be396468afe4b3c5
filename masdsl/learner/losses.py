"""Policy-gradient losses over token log-probs: `LOSS_FNS = {"grpo": grpo_loss}`, keyed by `masdsl.config.LOSSES` (docs/concepts.md).

Every loss takes per-token tensors of shape [B, T] (B sequences of a micro-batch, T response
positions, `mask` 1 on real response tokens) and per-sequence advantages [B], and returns a
`LossOut` whose three numbers are *sums over this micro-batch divided by `n_tokens`*, the token
count of the whole batch of that policy: adding the micro-batches' outputs (and gradients)
gives exactly the token mean over the batch, whatever the micro-batching.

`old_logp` are the log-probs of the policy that sampled the rollout, fixed before the first
optimizer step of the update (see `update.py`): the first mini-batch sees ratios of 1, the
later mini-batches and epochs see the policy drift away, and that is where PPO's clip and the
dual clip act. torch is imported at the top: the config check reads the allowed names from
`masdsl.config.LOSSES` (torch-free) and never imports this module, which checks at import that
`LOSS_FNS` implements exactly those names.

>>> import torch
>>> logp = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]], requires_grad=True)
>>> out = grpo_loss(logp, logp.detach(), torch.tensor([1.0, -1.0]), torch.tensor([[1.0, 1.0], [1.0, 0.0]]))
>>> round(out.loss.item(), 4), out.clip_frac.item(), out.kl.item(), out.ratio_dev.item()
(-0.3333, 0.0, 0.0, 0.0)
>>> out.loss.backward(); [[round(g, 4) for g in row] for row in logp.grad.tolist()]  # -A / n_tokens
[[-0.3333, -0.3333], [0.3333, 0.0]]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from masdsl.config import LOSSES


@dataclass
class LossOut:
    loss: torch.Tensor  # scalar tensor with grad: the contribution of this micro-batch
    clip_frac: torch.Tensor  # scalar tensor: clipped tokens / n_tokens
    kl: torch.Tensor  # scalar tensor: summed k3 KL to the reference / n_tokens (0 when off)
    dual_clip_frac: torch.Tensor | float = 0.0  # scalar tensor: tokens bounded by the dual clip / n_tokens
    ratio_dev: torch.Tensor | float = 0.0  # scalar tensor: summed |ratio - 1| / n_tokens (0 on-policy)
    clipped_rows: torch.Tensor | None = None  # [B] tensor: each row's clipped token count (per-role clip fractions)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || ref): `exp(ref - logp) - (ref - logp) - 1` (>= 0).

    Unbiased for samples drawn from pi, low variance (http://joschu.net/blog/kl-approx.html).

    >>> import torch
    >>> [round(x, 4) for x in k3_kl(torch.tensor([-1.0, -1.0]), torch.tensor([-1.0, -2.0])).tolist()]
    [0.0, 0.3679]
    """
    d = ref_logp - logp
    return d.exp() - d - 1.0


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    dual_clip: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    n_tokens: float | None = None,
) -> LossOut:
    """Token-level PPO-clip with token-mean aggregation, plus `kl_coef * k3` when a reference is given.

    A clipped token (ratio outside [1-eps, 1+eps] on the side the advantage pushes it) gets no
    gradient; `clip_frac` counts those.

    >>> import torch
    >>> lp = torch.log(torch.tensor([[0.5, 0.9]]))
    >>> out = grpo_loss(lp, torch.log(torch.tensor([[0.25, 0.9]])), torch.tensor([1.0]), torch.ones(1, 2))
    >>> out.clip_frac.item(), round(out.loss.item(), 4)    # token 0: ratio 2 > 1.2, clipped at 1.2
    (0.5, -1.1)

    Dual clip (Ye et al. 2020, `dual_clip` = c > 1, 3 in the paper's recipe): for a negative
    advantage the PPO objective grows without bound with the ratio; the dual clip caps a token's
    loss at `-c * A`, and such a token gets no gradient either:

    >>> lp = torch.log(torch.tensor([[0.8]])); old = torch.log(torch.tensor([[0.1]]))   # ratio 8
    >>> round(grpo_loss(lp, old, torch.tensor([-1.0]), torch.ones(1, 1)).loss.item(), 4)
    8.0
    >>> out = grpo_loss(lp, old, torch.tensor([-1.0]), torch.ones(1, 1), dual_clip=3.0)
    >>> round(out.loss.item(), 4), out.dual_clip_frac.item()
    (3.0, 1.0)
    """

    mask = mask.to(logp.dtype)
    n = float(n_tokens) if n_tokens is not None else float(mask.sum().clamp(min=1.0))
    a = adv.to(logp.dtype).unsqueeze(-1)  # [B, 1]: one advantage per sequence, every token
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * a
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * a
    per_token = -torch.minimum(unclipped, clipped)
    is_clipped = ((ratio < 1.0 - clip_eps) & (a < 0)) | ((ratio > 1.0 + clip_eps) & (a > 0))
    is_dual = torch.zeros_like(is_clipped)
    if dual_clip > 0:
        bound = -dual_clip * a  # the largest loss a negative-advantage token may have
        is_dual = (a < 0) & (per_token > bound)
        per_token = torch.where(is_dual, bound.expand_as(per_token), per_token)
    kl = torch.zeros((), dtype=logp.dtype)
    if ref_logp is not None and kl_coef > 0:
        kl_tok = k3_kl(logp, ref_logp)
        per_token = per_token + kl_coef * kl_tok
        kl = (kl_tok * mask).sum().detach() / n
    loss = (per_token * mask).sum() / n
    clipped_rows = (is_clipped.to(logp.dtype) * mask).sum(-1).detach()
    clip_frac = clipped_rows.sum() / n
    dual_frac = (is_dual.to(logp.dtype) * mask).sum().detach() / n
    ratio_dev = ((ratio.detach() - 1.0).abs() * mask).sum() / n
    return LossOut(loss, clip_frac, kl, dual_frac, ratio_dev, clipped_rows)


LOSS_FNS: dict[str, Callable[..., LossOut]] = {"grpo": grpo_loss}
if tuple(LOSS_FNS) != LOSSES:  # the config's allowed values are the names implemented here
    raise ImportError(f"masdsl.config.LOSSES {LOSSES} != the losses implemented {tuple(LOSS_FNS)}")
