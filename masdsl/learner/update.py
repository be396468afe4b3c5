"""One policy's update from one rollout: micro-batched forward/backward, grad clip, AdamW step.

The sequences a policy trains on are its roles' step records: prompt ids + the exact sampled
response ids, with the sampling log-probs as the PPO "old" log-probs. A micro-batch packs
consecutive rows while `rows * longest_row <= train.micro_batch_tokens`, so peak memory is
bounded by the token budget, not the batch size; the loss is a sum over tokens divided by the
token count of the whole batch (see `losses.py`), so the gradient does not depend on the
packing.

Rows whose advantage is 0 (flat groups) contribute exactly nothing to the PPO term; when the
KL term is off they are counted in the token-mean denominator but not run through the model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

from masdsl.learner.losses import LOSSES
from masdsl.runtime.records import StepRecord


def micro_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Split row indices (in order) into runs with `len(run) * max(length) <= budget`.

    A row longer than the budget forms a micro-batch of its own.

    >>> micro_batches([3, 3, 3, 10, 2, 2], budget=9)
    [[0, 1, 2], [3], [4, 5]]
    >>> micro_batches([], budget=8)
    []
    """
    out: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i, n in enumerate(lengths):
        if cur and (len(cur) + 1) * max(longest, n) > budget:
            out.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        out.append(cur)
    return out


def pad_rows(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any, Any, Any]:
    """Left-pad prompts and right-pad responses so every response starts at the same column.

    Returns input ids [B, P+T], attention mask [B, P+T], position ids (counting real tokens
    only, as `generate` does with left padding) and the response mask [B, T].

    >>> ids, att, pos, rmask = pad_rows([[5, 6], [7]], [[1], [2, 3]], pad_id=0)
    >>> ids.tolist(), pos.tolist(), rmask.tolist()
    ([[5, 6, 1, 0], [0, 7, 2, 3]], [[0, 1, 2, 2], [0, 0, 1, 2]], [[1.0, 0.0], [1.0, 1.0]])
    """
    import torch

    p = max(len(x) for x in prompts)
    t = max(len(x) for x in responses)
    ids = torch.full((len(prompts), p + t), pad_id, dtype=torch.long)
    att = torch.zeros((len(prompts), p + t), dtype=torch.long)
    rmask = torch.zeros((len(prompts), t))
    for i, (pr, rs) in enumerate(zip(prompts, responses)):
        ids[i, p - len(pr) : p] = torch.tensor(pr, dtype=torch.long)
        ids[i, p : p + len(rs)] = torch.tensor(rs, dtype=torch.long)
        att[i, p - len(pr) : p + len(rs)] = 1
        rmask[i, : len(rs)] = 1.0
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    return ids, att, pos, rmask


def sequence_logprobs(model: Any, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any]:
    """log pi(response token | prefix) for every response position: ([B, T], mask [B, T]).

    Only the last T+1 positions' logits are computed (`logits_to_keep`), which for a 49k
    vocabulary is most of the memory a full-length logits tensor would take.
    """
    import torch

    ids, att, pos, rmask = pad_rows(prompts, responses, pad_id)
    device = next(model.parameters()).device
    t = rmask.shape[1]
    out = model(input_ids=ids.to(device), attention_mask=att.to(device), position_ids=pos.to(device),
                logits_to_keep=t + 1, use_cache=False)
    logits = out.logits[:, :-1, :].float()  # position P-1+j predicts response token j
    logp = torch.log_softmax(logits, dim=-1)
    target = ids[:, -t:].to(device).unsqueeze(-1)
    return logp.gather(-1, target).squeeze(-1), rmask.to(device)


@dataclass
class UpdateStats:
    loss: float = 0.0
    clip_frac: float = 0.0
    kl: float = 0.0
    grad_norm: float = 0.0
    tokens: int = 0  # response tokens of this policy's rows
    rows: int = 0  # rows run through the model (nonzero advantage, or KL on)
    seconds: float = 0.0


def update_policy(
    policy: Any,
    optimizer: Any,
    records: Sequence[StepRecord],
    advantages: Sequence[float],
    tc: Any,
    reference: Any = None,
) -> UpdateStats:
    """Train `policy` on its own roles' records (one or `tc.epochs` passes, one optimizer step each)."""
    import torch

    t0 = time.perf_counter()
    mine = [i for i, r in enumerate(records) if r.policy == policy.name and r.response_ids]
    stats = UpdateStats(tokens=sum(len(records[i].response_ids) for i in mine))
    use_kl = reference is not None and tc.kl_coef > 0
    rows = [i for i in mine if advantages[i] != 0.0 or use_kl]
    stats.rows = len(rows)
    if not rows:  # nothing to learn from this batch: no optimizer step (no decay, no moments)
        stats.seconds = time.perf_counter() - t0
        return stats
    loss_fn = LOSSES[tc.loss]
    pad_id = policy.tokenizer.pad_token_id if policy.tokenizer.pad_token_id is not None else 0
    params = policy.parameters()
    lengths = [len(records[i].prompt_ids) + len(records[i].response_ids) for i in rows]
    with policy.lock:
        policy.activate()
        policy.model.train()
        try:
            for _ in range(tc.epochs):
                optimizer.zero_grad(set_to_none=True)
                totals = [0.0, 0.0, 0.0]
                for mb in micro_batches(lengths, tc.micro_batch_tokens):
                    batch = [records[rows[j]] for j in mb]
                    prompts = [r.prompt_ids for r in batch]
                    responses = [r.response_ids for r in batch]
                    logp, mask = sequence_logprobs(policy.model, prompts, responses, pad_id)
                    old = _pad_like([r.logprobs for r in batch], logp)
                    adv = torch.tensor([advantages[rows[j]] for j in mb], dtype=logp.dtype, device=logp.device)
                    ref_logp = _reference_logprobs(reference, policy, prompts, responses, pad_id) if use_kl else None
                    out = loss_fn(logp, old, adv, mask, clip_eps=tc.clip_eps, ref_logp=ref_logp,
                                  kl_coef=tc.kl_coef, n_tokens=stats.tokens)
                    out.loss.backward()
                    totals = [totals[0] + out.loss.item(), totals[1] + out.clip_frac.item(), totals[2] + out.kl.item()]
                norm = torch.nn.utils.clip_grad_norm_(params, tc.max_grad_norm)
                optimizer.step()
                stats.loss, stats.clip_frac, stats.kl = totals
                stats.grad_norm = float(norm)
        finally:
            policy.model.eval()
            optimizer.zero_grad(set_to_none=True)
    stats.seconds = time.perf_counter() - t0
    return stats


def _pad_like(rows: Sequence[Sequence[float]], like: Any) -> Any:
    import torch

    out = torch.zeros(like.shape, dtype=like.dtype, device=like.device)
    for i, row in enumerate(rows):
        if row:
            out[i, : len(row)] = torch.tensor(row, dtype=like.dtype)
    return out


def _reference_logprobs(reference: Any, policy: Any, prompts: Any, responses: Any, pad_id: int) -> Any:
    """Log-probs under the frozen reference: a separate model, or the base with adapters off."""
    import torch

    with torch.no_grad():
        if reference == "base":  # LoRA: the reference is the shared base without any adapter
            with policy.model.disable_adapter():
                return sequence_logprobs(policy.model, prompts, responses, pad_id)[0]
        return sequence_logprobs(reference, prompts, responses, pad_id)[0]
