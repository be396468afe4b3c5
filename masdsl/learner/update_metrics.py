"""What an update measures besides its loss, from the log-probs it computes anyway (no extra
forward pass): the policy's entropy, the KL from the old (sampling) policy to the current one,
and the PPO clip fraction of each role's tokens.

`update.py` adds per-micro-batch *sums* into each optimizer step's totals (`measure`; summed
over the ranks like the loss), and `summarize` turns the steps' sums into `UpdateStats` fields:

- `entropy`: the sampled-token estimate `mean(-log pi_old(y_t))` over the response tokens of
  the rows the update ran, each row counted once (the first epoch). `pi_old` is the policy that
  sampled them (the trainer's recomputed log-probs or the engine's, `train.old_logprobs`), so on
  samples drawn at temperature 1 this is an unbiased estimate of its per-token entropy; at other
  temperatures it is the cross-entropy of the sampling distribution under the policy.
- `kl_old`: the k3 estimate of KL(pi_old || pi_current) per token, `exp(d) - d - 1` with
  `d = log pi_current - log pi_old` (verl's / TRL's `approx_kl` family), measured on each
  optimizer step's rows before that step and averaged over the steps: 0 on the first step of
  the first epoch, growing as later mini-batches and epochs see the policy drift.
- `role_clip_frac[role]`: per role, the mean over the optimizer steps holding its tokens of
  (its clipped tokens / its tokens in the mini-batch), the same definition as the policy's
  `clip_frac`, so a policy of one role reports the same number for both.

>>> import torch
>>> totals = zero_totals(["a", "b"])
>>> logp = torch.log(torch.tensor([[0.5, 0.25], [0.5, 1.0]]))
>>> measure(totals, ["a", "b"], logp, logp, torch.tensor([[1.0, 1.0], [1.0, 0.0]]), torch.tensor([1.0, 0.0]))
>>> round(totals["entropy"], 4), totals["kl_old"], totals["tokens_run"], totals["clipped/a"]  # 2 ln 2 + ln 4
(2.7726, 0.0, 3.0, 1.0)
>>> t = zero_totals(["a"]); measure(t, ["a"], torch.log(torch.tensor([[0.5]])), torch.log(torch.tensor([[0.25]])),
...                               torch.ones(1, 1), None)
>>> round(t["kl_old"], 4)  # d = ln 2: e^d - d - 1
0.3069
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch

from masdsl.learner.losses import k3_kl
from masdsl.runtime.records import StepRecord

if TYPE_CHECKING:  # update.py imports this module
    from masdsl.learner.update import UpdateStats

LOSS_KEYS = ("loss", "clip_frac", "dual_clip_frac", "ratio_dev", "kl")  # the loss's own: sums / n_tokens
NAN = float("nan")


def zero_totals(roles: Sequence[str]) -> dict[str, float]:
    """One optimizer step's sums, all 0. Every rank builds the same keys (the roles of all the
    policy's rows, not only its own), since the ranks sum them key by key."""
    out = dict.fromkeys(LOSS_KEYS, 0.0)
    out.update(kl_old=0.0, entropy=0.0, tokens_run=0.0)
    out.update({f"clipped/{r}": 0.0 for r in roles})
    return out


def measure(totals: dict[str, float], roles: Sequence[str], logp: torch.Tensor, old_lp: torch.Tensor,
            mask: torch.Tensor, clipped_rows: torch.Tensor | None) -> None:
    """Add one micro-batch's sums: k3 KL(old || current), -log pi_old, tokens run, clipped tokens by role."""
    with torch.no_grad():
        on = mask > 0
        m = on.to(logp.dtype)
        d = torch.where(on, logp.detach() - old_lp, torch.zeros_like(logp))  # padding: no exp overflow
        totals["kl_old"] += float((k3_kl(torch.zeros_like(d), d) * m).sum())
        totals["entropy"] += float((torch.where(on, -old_lp, torch.zeros_like(old_lp))).sum())
        totals["tokens_run"] += float(m.sum())
        if clipped_rows is not None:
            for role, n in zip(roles, clipped_rows.tolist()):
                totals[f"clipped/{role}"] += n


def summarize(stats: UpdateStats, role_tokens: Sequence[dict[str, int]]) -> None:
    """Set `stats`' means from its `per_step` sums. `role_tokens`: per optimizer step of one epoch,
    role -> its response tokens in that mini-batch (kept rows, run or not: the clip fraction's
    denominator, as `n_tokens` is the policy's); the steps repeat them epoch after epoch.

    >>> from types import SimpleNamespace as S
    >>> steps = [dict(zero_totals(["a"]), kl_old=kl, entropy=6.0, tokens_run=4.0, **{"clipped/a": c})
    ...          for kl, c in [(0.0, 0.0), (0.4, 1.0), (0.8, 2.0)]]   # three epochs of one step of 4 tokens
    >>> st = S(per_step=steps); summarize(st, [{"a": 4}])
    >>> st.entropy, round(st.kl_old, 4), st.role_clip_frac   # 6 / 4; (0 + 0.1 + 0.2) / 3; (0 + 1/4 + 2/4) / 3
    (1.5, 0.1, {'a': 0.25})
    """
    per = stats.per_step
    for k in LOSS_KEYS:
        setattr(stats, k, sum(s[k] for s in per) / len(per))
    for s in per:  # per token of the rows the step ran (flat rows skipped by the update are not in it)
        s["kl_old"] = s["kl_old"] / s["tokens_run"] if s["tokens_run"] else 0.0
    stats.kl_old = sum(s["kl_old"] for s in per) / len(per)
    first = per[: len(role_tokens)]  # each row once: the old log-probs are the same every epoch
    tokens = sum(s["tokens_run"] for s in first)
    stats.entropy = sum(s["entropy"] for s in first) / tokens if tokens else NAN
    stats.role_clip_frac = {}
    for role in sorted({r for counts in role_tokens for r in counts}):
        shares = [s[f"clipped/{role}"] / counts[role]
                  for k, s in enumerate(per) if (counts := role_tokens[k % len(role_tokens)]).get(role)]
        stats.role_clip_frac[role] = sum(shares) / len(shares) if shares else 0.0


def sampled_entropy(logprobs: Sequence[Sequence[float]]) -> float:
    """The sampled-token entropy estimate from the sampler's own log-probs (nan ones skipped), for
    an update that ran no row (every group flat): nan when the engine reported none.

    >>> sampled_entropy([[-1.0, float("nan")], [-2.0]]), sampled_entropy([[]])
    (1.5, nan)
    """
    values = [x for row in logprobs for x in row if x == x]
    return -sum(values) / len(values) if values else NAN


def role_token_counts(records: Sequence[StepRecord], rows: Sequence[int]) -> dict[str, int]:
    """role -> response tokens of `rows`."""
    out: dict[str, int] = {}
    for i in rows:
        out[records[i].role] = out.get(records[i].role, 0) + len(records[i].response_ids)
    return out
