"""One policy's update from one rollout: micro-batched forward/backward, grad clip, AdamW step.

The sequences a policy trains on are its roles' step records: prompt ids + the exact sampled
response ids, with the sampling log-probs as the PPO "old" log-probs. The K candidates of one
decision share their prompt, so each distinct prompt is run once and its KV cache shared by
its candidates' responses (`shared_prefix_logprobs`): with K = 4 and prompts as long as the
responses this is ~40 % less compute than running every row whole. Micro-batches keep
`groups * longest_prompt + rows * longest_response <= train.micro_batch_tokens`, so peak memory
is bounded by the token budget, not the batch size; the loss is a sum over tokens divided by
the token count of the whole batch (see `losses.py`), so the gradient does not depend on the
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


def micro_batches(prompt_keys: Sequence[Any], prompt_lens: Sequence[int], resp_lens: Sequence[int],
                  budget: int) -> list[list[list[int]]]:
    """Plan micro-batches of rows: each is a list of prompt groups, each group a list of rows.

    Rows with the same prompt (the K candidates of one decision) go through the model's
    prompt once (see `shared_prefix_logprobs`). A micro-batch's padded cost is
    `groups * longest_prompt + rows * longest_response` tokens and stays within `budget`
    unless a single row is larger on its own; a group too big for the budget is split.

    >>> micro_batches(["a", "a", "b", "b"], [4, 4, 4, 4], [2, 2, 2, 2], budget=12)
    [[[0, 1]], [[2, 3]]]
    >>> micro_batches(["a", "a", "b", "b"], [4, 4, 4, 4], [2, 2, 2, 2], budget=16)
    [[[0, 1], [2, 3]]]
    >>> micro_batches(["a", "a", "a"], [4, 4, 4], [4, 4, 4], budget=12)
    [[[0, 1]], [[2]]]
    """
    groups: dict[Any, list[int]] = {}
    for i, key in enumerate(prompt_keys):
        groups.setdefault(key, []).append(i)
    out: list[list[list[int]]] = []
    cur: list[list[int]] = []
    longest_p = longest_r = rows = 0

    def cost(g: int, p: int, r: int, t: int) -> int:
        return g * p + r * t

    for members in groups.values():
        for i in members:
            p, t = prompt_lens[i], resp_lens[i]
            new_group = not cur or cur[-1][0] not in members
            g = len(cur) + (1 if new_group else 0)
            if cur and cost(g, max(longest_p, p), rows + 1, max(longest_r, t)) > budget:
                out.append(cur)
                cur, longest_p, longest_r, rows, new_group = [], 0, 0, 0, True
            if new_group:
                cur.append([])
            cur[-1].append(i)
            longest_p, longest_r, rows = max(longest_p, p), max(longest_r, t), rows + 1
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


def shared_prefix_logprobs(model: Any, prompts: Sequence[Sequence[int]], group_of_row: Sequence[int],
                           responses: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any]:
    """Like `sequence_logprobs`, but each distinct prompt goes through the model once.

    `prompts` are the G distinct prompts, `group_of_row[i]` the prompt of response i. The
    prompts run with a KV cache (left-padded, real positions); the cache is gathered to one
    row per response (with gradients), then the responses run on top of it. The first response
    token is scored from the prompt's last logits. For K candidates per prompt, the prompt's
    forward and backward cost is paid once instead of K times.
    """
    import torch

    device = next(model.parameters()).device
    ids_p, att_p, pos_p, _ = pad_rows(prompts, [[pad_id]] * len(prompts), pad_id)
    ids_p, att_p, pos_p = ids_p[:, :-1], att_p[:, :-1], pos_p[:, :-1]  # drop the dummy response
    out = model(input_ids=ids_p.to(device), attention_mask=att_p.to(device), position_ids=pos_p.to(device),
                use_cache=True, logits_to_keep=1)
    idx = torch.tensor(list(group_of_row), dtype=torch.long, device=device)
    t = max(len(r) for r in responses)
    resp = torch.full((len(responses), t), pad_id, dtype=torch.long)
    rmask = torch.zeros((len(responses), t))
    for i, r in enumerate(responses):
        resp[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        rmask[i, : len(r)] = 1.0
    resp, rmask = resp.to(device), rmask.to(device)
    first = torch.log_softmax(out.logits[:, -1, :].float(), dim=-1).index_select(0, idx)  # [R, V]
    parts = [first.gather(-1, resp[:, :1])]
    if t > 1:
        cache = out.past_key_values
        select_cache_rows(cache, idx)
        att = torch.cat([att_p.to(device)[idx], rmask[:, :-1].long()], dim=1)
        pos = att_p.sum(-1).to(device)[idx].unsqueeze(1) + torch.arange(t - 1, device=device).unsqueeze(0)
        out2 = model(input_ids=resp[:, :-1], attention_mask=att, position_ids=pos, past_key_values=cache,
                     use_cache=True)
        logits = out2.logits.float()  # gather - logsumexp: no second [R, T, V] tensor (log_softmax's)
        picked = logits.gather(-1, resp[:, 1:].unsqueeze(-1)).squeeze(-1)
        parts.append(picked - torch.logsumexp(logits, dim=-1))
    return torch.cat(parts, dim=1), rmask


def select_cache_rows(cache: Any, idx: Any) -> None:
    """Keep the KV cache rows `idx` (repeated rows allowed), with a run-to-run exact backward.

    transformers' `cache.batch_select_indices(idx)` gathers with `keys[idx]`, whose backward
    (`index_put_` with accumulate) adds the rows of a repeated index with parallel atomic float
    adds on CPU when torch runs more than one thread: the order of those additions, and so the
    last bits of the prompt's gradient, change from run to run. `index_select`'s backward
    (`index_add_`) adds them in index order. Cache layers of other kinds keep transformers' own
    selection.

    >>> import torch
    >>> from transformers import DynamicCache
    >>> cache = DynamicCache()
    >>> _ = cache.update(torch.arange(4.0).view(2, 1, 2, 1), torch.zeros(2, 1, 2, 1), 0)
    >>> select_cache_rows(cache, torch.tensor([1, 1, 0]))
    >>> cache.layers[0].keys.flatten().tolist()
    [2.0, 3.0, 2.0, 3.0, 0.0, 1.0]
    """
    from transformers.cache_utils import DynamicLayer

    for layer in getattr(cache, "layers", None) or [cache]:
        plain = type(layer).batch_select_indices is DynamicLayer.batch_select_indices  # keys, values only
        if not (isinstance(layer, DynamicLayer) and plain):
            layer.batch_select_indices(idx)
        elif layer.keys is not None and layer.keys.numel() > 0:
            layer.keys = layer.keys.index_select(0, idx)
            layer.values = layer.values.index_select(0, idx)


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
    plan = micro_batches([tuple(records[i].prompt_ids) for i in rows], [len(records[i].prompt_ids) for i in rows],
                         [len(records[i].response_ids) for i in rows], tc.micro_batch_tokens)
    with policy.lock:
        policy.activate()
        policy.model.train()
        try:
            for _ in range(tc.epochs):
                optimizer.zero_grad(set_to_none=True)
                totals = [0.0, 0.0, 0.0]
                for mb_groups in plan:
                    mb = [j for g in mb_groups for j in g]
                    batch = [records[rows[j]] for j in mb]
                    prompts = [records[rows[g[0]]].prompt_ids for g in mb_groups]
                    group_of_row = [gi for gi, g in enumerate(mb_groups) for _ in g]
                    responses = [r.response_ids for r in batch]
                    if tc.gradient_checkpointing:  # HF turns the KV cache off under checkpointing
                        logp, mask = sequence_logprobs(policy.model, [r.prompt_ids for r in batch], responses, pad_id)
                    else:
                        logp, mask = shared_prefix_logprobs(policy.model, prompts, group_of_row, responses, pad_id)
                    old = _pad_like([r.logprobs for r in batch], logp)
                    old = torch.where(torch.isnan(old), logp.detach(), old)  # an engine without a log-prob
                    adv = torch.tensor([advantages[rows[j]] for j in mb], dtype=logp.dtype, device=logp.device)
                    ref_logp = (_reference_logprobs(reference, policy, [r.prompt_ids for r in batch], responses, pad_id)
                                if use_kl else None)
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
