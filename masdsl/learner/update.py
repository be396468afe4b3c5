"""One policy's update from one rollout: micro-batched forward/backward, grad clip, AdamW step.

The sequences a policy trains on are its roles' step records: prompt ids + the exact sampled
response ids. As in the paper's recipe, one rollout gives several optimizer steps: the rows are
split into mini-batches of `train.mini_batch_size` (16), each an optimizer step, for
`train.ppo_epochs` passes; the "old" log-probs are fixed before the first step (the sampler's,
or recomputed by the trainer, `old_logprob_source`). The K candidates of one
decision share their prompt, so each distinct prompt is run once and its KV cache shared by
its candidates' responses (`shared_prefix_logprobs`): with K = 4 and prompts as long as the
responses this is ~40 % less compute than running every row whole. Micro-batches keep
`groups * longest_prompt + rows * longest_response <= train.micro_batch_tokens`, so peak memory
is bounded by the token budget, not the batch size; the loss is a sum over tokens divided by
the token count of the whole mini-batch (see `losses.py`), so the gradient does not depend on
the packing.

Rows whose advantage is 0 (flat groups) contribute exactly nothing to the PPO term; when the
KL term is off they are counted in the token-mean denominator but not run through the model.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import torch

from masdsl.learner.losses import LOSS_FNS
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
    from transformers.cache_utils import DynamicLayer  # heavy: transformers, only for the shared-prefix path

    for layer in getattr(cache, "layers", None) or [cache]:
        plain = type(layer).batch_select_indices is DynamicLayer.batch_select_indices  # keys, values only
        if not (isinstance(layer, DynamicLayer) and plain):
            layer.batch_select_indices(idx)
        elif layer.keys is not None and layer.keys.numel() > 0:
            layer.keys = layer.keys.index_select(0, idx)
            layer.values = layer.values.index_select(0, idx)


@dataclass
class UpdateStats:
    loss: float = 0.0  # mean over optimizer steps
    clip_frac: float = 0.0  # mean over optimizer steps
    dual_clip_frac: float = 0.0
    ratio_dev: float = 0.0  # mean |ratio - 1| per token, mean over optimizer steps
    kl: float = 0.0
    grad_norm: float = 0.0  # of the last optimizer step
    tokens: int = 0  # response tokens of this policy's kept rows
    rows: int = 0  # rows run through the model (nonzero advantage, or KL on)
    optimizer_steps: int = 0
    logprob_gap: float = 0.0  # max |engine - trainer| log-prob before the update (nan: not measured)
    per_step: list[dict[str, float]] = field(default_factory=list)  # loss, clip_frac, ratio_dev, ...
    seconds: float = 0.0


def mini_batch_rows(rows: Sequence[int], size: int) -> list[list[int]]:
    """Split a policy's rows (in record order) into optimizer steps of `size` rows (0: one step).

    Record order keeps the K candidates of one decision next to each other, so a mini-batch of
    16 rows at K = 4 holds 4 whole groups (and each prompt runs once, `shared_prefix_logprobs`).

    >>> mini_batch_rows(list(range(10)), 4)
    [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    >>> mini_batch_rows([3, 5], 0)
    [[3, 5]]
    """
    if size <= 0:
        return [list(rows)] if rows else []
    return [list(rows[i : i + size]) for i in range(0, len(rows), size)]


def old_logprob_source(tc: Any, compute_dtype: str = "float32") -> str:
    """`train.old_logprobs` resolved: `engine` keeps the sampler's log-probs; `trainer` recomputes
    them with the learner's model before the first optimizer step. `auto` recomputes unless the
    model runs in float32, where the two agree to ~1e-6 (docs/concepts.md has the measurement)
    and the extra forward pass would cost a third of the update.

    >>> from types import SimpleNamespace as NS
    >>> old_logprob_source(NS(old_logprobs="auto"), "bfloat16"), old_logprob_source(NS(old_logprobs="auto"))
    ('trainer', 'engine')
    """
    if tc.old_logprobs != "auto":
        return tc.old_logprobs
    return "engine" if compute_dtype == "float32" else "trainer"


def update_policy(
    policy: Any,
    optimizer: Any,
    records: Sequence[StepRecord],
    advantages: Sequence[float],
    tc: Any,
    reference: Any = None,
    keep: Sequence[bool] | None = None,
    shard: Any = None,
) -> UpdateStats:
    """Train `policy` on its own roles' records: PPO as the paper's recipe runs it.

    The policy's rows (those of dropped groups left out, `keep`) are split into mini-batches of
    `tc.mini_batch_size` rows, one optimizer step each, repeated `tc.ppo_epochs` times. The old
    log-probs are fixed before the first step (`old_logprob_source`), so later mini-batches see
    ratios != 1 and the clip acts. Each step's loss is the token mean over its mini-batch.
    `shard` (a rank of `masdsl.learner.workers`): run only this rank's rows of each mini-batch,
    with the whole mini-batch's token count, and sum gradients and statistics over the ranks.
    """
    t0 = time.perf_counter()
    mine = [i for i, r in enumerate(records)
            if r.policy == policy.name and r.response_ids and (keep is None or keep[i])]
    stats = UpdateStats(tokens=sum(len(records[i].response_ids) for i in mine), logprob_gap=float("nan"))
    use_kl = reference is not None and tc.kl_coef > 0
    runnable = {i for i in mine if advantages[i] != 0.0 or use_kl}
    stats.rows = len(runnable)
    if not runnable:  # nothing to learn from this batch: no optimizer step (no decay, no moments)
        stats.seconds = time.perf_counter() - t0
        return stats
    batch = _Batch(policy, records, advantages, tc, reference if use_kl else None,
                   policy.tokenizer.pad_token_id if policy.tokenizer.pad_token_id is not None else 0,
                   getattr(policy, "compute_dtype", "float32"), shard=shard)
    # each optimizer step: its rows that run through the model, and its token count (the mean's denominator)
    steps = [([i for i in mb if i in runnable], sum(len(records[i].response_ids) for i in mb))
             for mb in mini_batch_rows(mine, tc.mini_batch_size)]
    steps = [(run, n) for run, n in steps if run]
    if shard is not None:  # every rank takes the same optimizer steps, each on its own rows
        steps = [(shard.rows(run), n) for run, n in steps]
    with policy.lock:
        policy.activate()
        policy.model.train()
        try:
            if old_logprob_source(tc, batch.compute_dtype) == "trainer":
                batch.fix_old_logprobs(steps)
                stats.logprob_gap = _gap(records, batch.old)
            for _ in range(tc.ppo_epochs):
                for run, n_tokens in steps:
                    _optimizer_step(batch, optimizer, run, n_tokens, stats)
        finally:
            policy.model.eval()
            optimizer.zero_grad(set_to_none=True)
    if batch.first_gaps:
        stats.logprob_gap = max(batch.first_gaps)
    if shard is not None:
        stats.logprob_gap = shard.max(stats.logprob_gap)
    for k in ("loss", "clip_frac", "dual_clip_frac", "ratio_dev", "kl"):
        setattr(stats, k, sum(s[k] for s in stats.per_step) / len(stats.per_step))
    stats.seconds = time.perf_counter() - t0
    return stats


@dataclass
class _Batch:
    """One policy's rollout rows as the update reads them, and the old log-probs fixed for them."""

    policy: Any
    records: Sequence[StepRecord]
    advantages: Sequence[float]
    tc: Any
    reference: Any  # None: no KL term
    pad_id: int
    compute_dtype: str
    shard: Any = None  # None: this process holds the whole batch
    old: dict[int, Any] = field(default_factory=dict)  # row -> the trainer's log-probs before any step
    first_gaps: list[float] = field(default_factory=list)  # engine vs trainer, before any step

    def fix_old_logprobs(self, steps: Sequence[tuple[list[int], int]]) -> None:
        with torch.no_grad():
            for run, _ in steps:
                for idx, logp, _mask in _forward(self.policy, self.records, run, self.tc, self.pad_id,
                                                 self.compute_dtype):
                    self.old.update(zip(idx, logp.detach().unbind(0)))

    def old_logprobs(self, idx: Sequence[int], logp: Any, mask: Any, before_any_step: bool) -> Any:
        """The fixed old log-probs of rows `idx`: the trainer's, or else the engine's sampled ones."""
        if idx[0] in self.old:
            return torch.stack([self.old[i] for i in idx]).to(logp)
        old_lp = _pad_like([self.records[i].logprobs for i in idx], logp)
        old_lp = torch.where(torch.isnan(old_lp), logp.detach(), old_lp)  # an engine without a log-prob
        if before_any_step:  # the sampler vs the trainer
            self.first_gaps.append(((old_lp - logp.detach()).abs() * mask).max().item())
        return old_lp


def _optimizer_step(batch: _Batch, optimizer: Any, run: Sequence[int], n_tokens: int, stats: UpdateStats) -> None:
    """One PPO-clip optimizer step on the rows `run` (micro-batched), gradients clipped."""
    tc, records = batch.tc, batch.records
    optimizer.zero_grad(set_to_none=True)
    totals = dict(loss=0.0, clip_frac=0.0, dual_clip_frac=0.0, ratio_dev=0.0, kl=0.0)
    for idx, logp, mask in _forward(batch.policy, records, run, tc, batch.pad_id, batch.compute_dtype):
        old_lp = batch.old_logprobs(idx, logp, mask, before_any_step=stats.optimizer_steps == 0)
        adv = torch.tensor([batch.advantages[i] for i in idx], dtype=logp.dtype, device=logp.device)
        responses = [records[i].response_ids for i in idx]
        ref_logp = (_reference_logprobs(batch.reference, batch.policy, [records[i].prompt_ids for i in idx],
                                        responses, batch.pad_id) if batch.reference is not None else None)
        out = LOSS_FNS[tc.loss](logp, old_lp, adv, mask, clip_eps=tc.clip_eps, dual_clip=tc.dual_clip,
                                ref_logp=ref_logp, kl_coef=tc.kl_coef, n_tokens=n_tokens)
        out.loss.backward()
        for k in totals:
            totals[k] += float(torch.as_tensor(getattr(out, k)).detach())
    if batch.shard is not None:  # the gradient (and sums) of the whole mini-batch, before the clip
        batch.shard.reduce(batch.policy.parameters(), totals)
    norm = torch.nn.utils.clip_grad_norm_(batch.policy.parameters(), tc.max_grad_norm)
    optimizer.step()
    stats.optimizer_steps += 1
    stats.grad_norm = float(norm)
    stats.per_step.append({**totals, "grad_norm": float(norm)})


def _forward(policy: Any, records: Sequence[StepRecord], rows: Sequence[int], tc: Any, pad_id: int,
             compute_dtype: str) -> Iterator[tuple[list[int], Any, Any]]:
    """Log-probs of `rows` micro-batch by micro-batch: yields (row indices, log-probs [B, T], mask).

    With a half-precision compute dtype the float32 master weights run under autocast, so the
    optimizer updates float32 weights (an lr 1e-6 step on bfloat16 weights mostly rounds away).
    """
    plan = micro_batches([tuple(records[i].prompt_ids) for i in rows], [len(records[i].prompt_ids) for i in rows],
                         [len(records[i].response_ids) for i in rows], tc.micro_batch_tokens)
    device = next(policy.model.parameters()).device
    half = compute_dtype in ("bfloat16", "float16")
    autocast = (torch.autocast(device.type, dtype=getattr(torch, compute_dtype)) if half
                else contextlib.nullcontext())
    for mb_groups in plan:
        idx = [rows[j] for g in mb_groups for j in g]
        prompts = [records[rows[g[0]]].prompt_ids for g in mb_groups]
        group_of_row = [gi for gi, g in enumerate(mb_groups) for _ in g]
        responses = [records[i].response_ids for i in idx]
        with autocast:
            if tc.gradient_checkpointing:  # HF turns the KV cache off under checkpointing
                logp, mask = sequence_logprobs(policy.model, [records[i].prompt_ids for i in idx], responses, pad_id)
            else:
                logp, mask = shared_prefix_logprobs(policy.model, prompts, group_of_row, responses, pad_id)
        yield idx, logp.float(), mask


def _gap(records: Sequence[StepRecord], trainer_logp: Mapping[int, Any]) -> float:
    """Largest |sampler - trainer| log-prob over the response tokens the engine reported."""
    gap = 0.0
    for i, lp in trainer_logp.items():
        for a, b in zip(records[i].logprobs, lp.tolist()):
            if a == a:  # not nan
                gap = max(gap, abs(a - b))
    return gap


def _pad_like(rows: Sequence[Sequence[float]], like: Any) -> Any:
    out = torch.zeros(like.shape, dtype=like.dtype, device=like.device)
    for i, row in enumerate(rows):
        if row:
            out[i, : len(row)] = torch.tensor(row, dtype=like.dtype)
    return out


def _reference_logprobs(reference: Any, policy: Any, prompts: Any, responses: Any, pad_id: int) -> Any:
    """Log-probs under the frozen reference: a separate model, or the base with adapters off."""
    with torch.no_grad():
        if reference == "base":  # LoRA: the reference is the shared base without any adapter
            with policy.model.disable_adapter():
                return sequence_logprobs(policy.model, prompts, responses, pad_id)[0]
        return sequence_logprobs(reference, prompts, responses, pad_id)[0]
