"""One policy's update from one rollout: micro-batched forward/backward, grad clip, AdamW step.

The sequences a policy trains on are its roles' step records: prompt ids + the exact sampled
response ids. As in the paper's recipe, one rollout gives several optimizer steps: the rows are
split into mini-batches of `train.mini_batch_size` (16), each an optimizer step, for
`train.ppo_epochs` passes; the "old" log-probs are fixed before the first step (the sampler's,
or recomputed by the trainer, `masdsl.plan.old_logprobs.old_logprob_source`). The K candidates of one
decision share their prompt, so each distinct prompt is run once: by default the group is one
row, its responses packed after the prompt without padding between them (`packed_logprobs`,
micro-batches of `groups * longest row` tokens: `packed_micro_batches`); otherwise its KV cache
is shared by the candidates' padded responses (`shared_prefix_logprobs`, micro-batches of
`groups * longest_prompt + rows * longest_response`). With K = 4 and prompts as long as the
responses, sharing is ~40 % less compute than running every row whole; packing also drops the
padding of the shorter responses. Either way micro-batches keep to `train.micro_batch_tokens`, so peak memory
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
from typing import Any, Iterable, Iterator, Mapping, Sequence

import torch

from masdsl.config import TrainConfig
from masdsl.learner.logprobs import (KLReference, at_least_float32, packed_logprobs, packs, sequence_logprobs,
                                     shared_prefix_logprobs)
from masdsl.learner.losses import LOSS_FNS
from masdsl.learner.micro_batches import micro_batches, packed_micro_batches, split_groups  # noqa: F401 (re-exported)
from masdsl.learner.update_metrics import LOSS_KEYS, measure, role_token_counts, sampled_entropy, summarize, zero_totals
from masdsl.learner.parallel import ONE_PROCESS, Shard
from masdsl.learner.policies import Policy
from masdsl.plan.old_logprobs import old_logprob_source
from masdsl.runtime.records import StepRecord


@dataclass
class UpdateStats:
    loss: float = 0.0  # mean over optimizer steps
    clip_frac: float = 0.0  # mean over optimizer steps
    dual_clip_frac: float = 0.0
    ratio_dev: float = 0.0  # mean |ratio - 1| per token, mean over optimizer steps
    kl: float = 0.0  # k3 KL to the frozen reference (0: no reference, `train.kl_coef` = 0)
    kl_old: float = 0.0  # k3 KL(old || current) per token, mean over optimizer steps (update_metrics.py)
    entropy: float = float("nan")  # sampled-token estimate, mean -log pi_old over the response tokens
    role_clip_frac: dict[str, float] = field(default_factory=dict)  # role -> its tokens' clip fraction
    grad_norm: float = 0.0  # of the last optimizer step
    tokens: int = 0  # response tokens of this policy's kept rows
    rows: int = 0  # rows run through the model (nonzero advantage, or KL on)
    optimizer_steps: int = 0
    logprob_gap: float = 0.0  # max |engine - trainer| log-prob before the update (nan: not measured)
    groups: int = 0  # prompt groups run, summed over optimizer steps (this process's rows)
    split_groups: int = 0  # of those, split over micro-batches: their prompt ran more than once (`split_groups`)
    largest_group_tokens: int = 0  # padded tokens of the largest group (a budget that keeps every group whole)
    per_step: list[dict[str, float]] = field(default_factory=list)  # loss, clip_frac, ratio_dev, ...
    seconds: float = 0.0
    old_logprobs_s: float = 0.0  # the trainer's pass fixing the old log-probs (0: the engine's kept)


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


@dataclass
class UpdateBatch:
    """One step's update input, the same for every policy's learner: each trains on its own
    roles' rows (`update_policy`)."""

    records: Sequence[StepRecord]
    advantages: Sequence[float]
    keep: Sequence[bool] | None = None  # rows of the groups kept (None: all)
    _ref: Any = None

    def object_ref(self) -> Any:
        """The records in Ray's object store, put there once for every learner group that asks."""
        if self._ref is None:
            import ray  # heavy: ray is optional (the train extra); only learner workers ask

            self._ref = ray.put(list(self.records))
        return self._ref


def update_policy(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    records: Sequence[StepRecord],
    advantages: Sequence[float],
    tc: TrainConfig,
    reference: KLReference | None = None,
    keep: Sequence[bool] | None = None,
    shard: Shard = ONE_PROCESS,
) -> UpdateStats:
    """Train `policy` on its own roles' records: PPO as the paper's recipe runs it.

    The policy's rows (those of dropped groups left out, `keep`) are split into mini-batches of
    `tc.mini_batch_size` rows, one optimizer step each, repeated `tc.ppo_epochs` times. The old
    log-probs are fixed before the first step (`old_logprob_source`), so later mini-batches see
    ratios != 1 and the clip acts. Each step's loss is the token mean over its mini-batch.
    `shard` (default: the driver alone; a rank of `masdsl.learner.workers`, see
    `masdsl.learner.parallel`): the rows of each mini-batch this process runs, with the whole
    mini-batch's token count, and how gradients and statistics are summed over the ranks (data
    parallel, or FSDP2's reduce-scatter, which keeps the ranks in lockstep).
    """
    t0 = time.perf_counter()
    mine = [i for i, r in enumerate(records)
            if r.policy == policy.name and r.response_ids and (keep is None or keep[i])]
    stats = UpdateStats(tokens=sum(len(records[i].response_ids) for i in mine), logprob_gap=float("nan"))
    use_kl = reference is not None and tc.kl_coef > 0
    runnable = {i for i in mine if advantages[i] != 0.0 or use_kl}
    stats.rows = len(runnable)
    roles = sorted({records[i].role for i in mine})
    if not runnable:  # nothing to learn from this batch: no optimizer step (no decay, no moments)
        stats.entropy, stats.role_clip_frac = sampled_entropy([records[i].logprobs for i in mine]), dict.fromkeys(roles, 0.0)
        stats.seconds = time.perf_counter() - t0
        return stats
    batch = _Batch(policy, records, advantages, tc, reference if use_kl else None,
                   policy.tokenizer.pad_token_id if policy.tokenizer.pad_token_id is not None else 0,
                   policy.compute_dtype, shard=shard, roles=roles)
    mbs = [mb for mb in mini_batch_rows(mine, tc.mini_batch_size) if any(i in runnable for i in mb)]
    # each optimizer step: this rank's rows that run through the model (every rank takes the same
    # steps, the mini-batches with a row to run), and the mini-batch's token count (the mean's denominator)
    steps = [(shard.rows([i for i in mb if i in runnable]), sum(len(records[i].response_ids) for i in mb))
             for mb in mbs]
    if not tc.gradient_checkpointing:  # which runs every row with its own prompt anyway
        _count_split_groups(stats, records, [run for run, _ in steps], tc.micro_batch_tokens,
                            packed=packing(policy, tc, shard))
    with policy.lock:
        policy.activate()
        policy.model.train()
        try:
            if old_logprob_source(tc, batch.compute_dtype) == "trainer" or _lacks_engine_logprobs(records, runnable):
                stats.old_logprobs_s = batch.fix_old_logprobs(steps)
            for _ in range(tc.ppo_epochs):
                for run, n_tokens in steps:
                    _optimizer_step(batch, optimizer, run, n_tokens, stats)
        finally:
            policy.model.eval()
            optimizer.zero_grad(set_to_none=True)
    stats.logprob_gap = shard.max(batch.gap())
    summarize(stats, [role_token_counts(records, mb) for mb in mbs])
    stats.seconds = time.perf_counter() - t0
    return stats


@dataclass
class _Batch:
    """One policy's rollout rows as the update reads them, and the old log-probs fixed for them."""

    policy: Policy
    records: Sequence[StepRecord]
    advantages: Sequence[float]
    tc: TrainConfig
    reference: KLReference | None  # None: no KL term
    pad_id: int
    compute_dtype: str
    shard: Shard = field(default_factory=lambda: ONE_PROCESS)  # which rows this process runs, how ranks agree
    roles: Sequence[str] = ()  # of all the policy's rows (every rank sums the same keys)
    old: dict[int, Any] = field(default_factory=dict)  # row -> the trainer's log-probs before any step
    first_gaps: list[float] = field(default_factory=list)  # engine vs trainer, before any step
    fold_first_step: bool = False  # the trainer's old log-probs: the first step's rows take their own forward's

    def fix_old_logprobs(self, steps: Sequence[tuple[list[int], int]]) -> float:
        """The trainer's log-probs of every row before any step; returns the seconds it took.

        The first step's forward runs before any weight moves, so its rows take that forward's
        log-probs (`old_logprobs`): the pass here covers the later steps only (half the rows at
        the recipe's two mini-batches a rollout)."""
        t0 = time.perf_counter()
        self.fold_first_step = True
        with torch.no_grad():
            for run, _ in steps[1:]:
                for idx, logp, _mask in _forward(self.policy, self.records, run, self.tc, self.pad_id,
                                                 self.compute_dtype, self.shard):
                    self.old.update(zip(idx, logp.detach().unbind(0)))
        return time.perf_counter() - t0

    def gap(self) -> float:
        """Largest |sampler - trainer| log-prob before any step (nan: not measured)."""
        if self.fold_first_step:
            return _gap(self.records, self.old)
        return max(self.first_gaps) if self.first_gaps else float("nan")

    def old_logprobs(self, idx: Sequence[int], logp: torch.Tensor, mask: torch.Tensor, before_any_step: bool
                     ) -> torch.Tensor:
        """The fixed old log-probs of rows `idx`: the trainer's, or else the engine's sampled ones."""
        if idx[0] in self.old:
            return torch.stack([self.old[i] for i in idx]).to(logp)
        if before_any_step and self.fold_first_step:  # the weights have not moved: this forward is the old policy
            old_lp = logp.detach()
            self.old.update(zip(idx, old_lp.unbind(0)))
            return old_lp
        engine_lp = _pad_like([self.records[i].logprobs for i in idx], logp)
        reported = ~torch.isnan(engine_lp) & mask.bool()
        if before_any_step and bool(reported.any()):  # the sampler vs the trainer
            self.first_gaps.append(float((engine_lp - logp.detach()).abs()[reported].max()))
        # a token the engine gave no log-prob for (an engine without them) takes the trainer's: ratio 1
        return torch.where(torch.isnan(engine_lp), logp.detach(), engine_lp)


def _optimizer_step(batch: _Batch, optimizer: torch.optim.Optimizer, run: Sequence[int], n_tokens: int, stats: UpdateStats) -> None:
    """One PPO-clip optimizer step on the rows `run` (micro-batched), gradients clipped."""
    tc, records = batch.tc, batch.records
    optimizer.zero_grad(set_to_none=True)
    totals = zero_totals(batch.roles)
    shard = batch.shard
    for idx, logp, mask in _forward(batch.policy, records, run, tc, batch.pad_id, batch.compute_dtype, shard):
        old_lp = batch.old_logprobs(idx, logp, mask, before_any_step=stats.optimizer_steps == 0)
        adv = torch.tensor([batch.advantages[i] for i in idx], dtype=logp.dtype, device=logp.device)
        responses = [records[i].response_ids for i in idx]
        ref_logp = (_reference_logprobs(batch.reference, batch.policy, [records[i].prompt_ids for i in idx],
                                        responses, batch.pad_id) if batch.reference is not None else None)
        out = LOSS_FNS[tc.loss](logp, old_lp, adv, mask, clip_eps=tc.clip_eps, dual_clip=tc.dual_clip,
                                ref_logp=ref_logp, kl_coef=tc.kl_coef, n_tokens=n_tokens)
        out.loss.backward()
        for k in LOSS_KEYS:
            totals[k] += float(torch.as_tensor(getattr(out, k)).detach())
        measure(totals, [records[i].role for i in idx], logp, old_lp, mask, out.clipped_rows)
    shard.reduce(batch.policy.parameters(), totals)  # the gradient (and sums) of the whole mini-batch
    norm = shard.clip(batch.policy.parameters(), tc.max_grad_norm)
    optimizer.step()
    stats.optimizer_steps += 1
    stats.grad_norm = float(norm)
    stats.per_step.append({**totals, "grad_norm": float(norm)})


def _forward(policy: Policy, records: Sequence[StepRecord], rows: Sequence[int], tc: TrainConfig, pad_id: int,
             compute_dtype: str, shard: Shard = ONE_PROCESS) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """Log-probs of `rows` micro-batch by micro-batch: yields (row indices, log-probs [B, T], mask).

    The shard runs the micro-batches (`Shard.forward`); under FSDP it also runs, and keeps to itself,
    the stand-ins that keep every rank's per-layer gathers and reduce-scatters in step.

    With a half-precision compute dtype the float32 master weights run under autocast, so the
    optimizer updates float32 weights (an lr 1e-6 step on bfloat16 weights mostly rounds away).
    """
    packed = packing(policy, tc, shard)
    plan = (packed_micro_batches if packed else micro_batches)(
        [tuple(records[i].prompt_ids) for i in rows], [len(records[i].prompt_ids) for i in rows],
        [len(records[i].response_ids) for i in rows], tc.micro_batch_tokens)
    device = next(policy.model.parameters()).device
    half = compute_dtype in ("bfloat16", "float16")

    def run(mb_groups: Sequence[Sequence[int]]) -> tuple[list[int], torch.Tensor, torch.Tensor]:
        idx = [rows[j] for g in mb_groups for j in g]
        prompts = [records[rows[g[0]]].prompt_ids for g in mb_groups]
        group_of_row = [gi for gi, g in enumerate(mb_groups) for _ in g]
        responses = [records[i].response_ids for i in idx]
        autocast = (torch.autocast(device.type, dtype=getattr(torch, compute_dtype)) if half
                    else contextlib.nullcontext())
        with autocast:
            if tc.gradient_checkpointing:  # HF turns the KV cache off under checkpointing
                logp, mask = sequence_logprobs(policy.model, [records[i].prompt_ids for i in idx], responses, pad_id)
            elif packed:
                logp, mask = packed_logprobs(policy.model, prompts, group_of_row, responses, pad_id)
            else:
                logp, mask = shared_prefix_logprobs(policy.model, prompts, group_of_row, responses, pad_id,
                                                    two_calls=shard.two_calls)
        return idx, at_least_float32(logp), mask

    return shard.forward(plan, run)


def packing(policy: Policy, tc: TrainConfig, shard: Shard) -> bool:
    """Whether the update runs each prompt group as one row without padding (`packed_logprobs`):
    unless `train.pack_rows` is off, gradient checkpointing runs rows whole, FSDP needs the
    two-call shape every rank shares, or the model's attention cannot take a 4D mask."""
    return tc.pack_rows and not tc.gradient_checkpointing and not shard.two_calls and packs(policy.model)


def _count_split_groups(stats: UpdateStats, records: Sequence[StepRecord], steps: Sequence[Sequence[int]],
                        budget: int, packed: bool = False) -> None:
    for run in steps:
        split, groups, largest = split_groups(records, run, budget, packed)
        stats.split_groups, stats.groups = stats.split_groups + split, stats.groups + groups
        stats.largest_group_tokens = max(stats.largest_group_tokens, largest)


def _lacks_engine_logprobs(records: Sequence[StepRecord], rows: Iterable[int]) -> bool:
    """Whether a row has no sampler log-prob for some response token (its rollout did not ask):
    then the trainer fixes the old log-probs, whatever `train.old_logprobs` says."""
    return any(len(records[i].logprobs) < len(records[i].response_ids) for i in rows)


def _gap(records: Sequence[StepRecord], trainer_logp: Mapping[int, torch.Tensor]) -> float:
    """Largest |sampler - trainer| log-prob over the response tokens the engine reported (nan:
    it reported none, e.g. the rollout did not ask, `masdsl.plan.old_logprobs.asks_engine_logprobs`)."""
    gaps = [abs(a - b) for i, lp in trainer_logp.items() for a, b in zip(records[i].logprobs, lp.tolist())
            if a == a]  # not nan
    return max(gaps, default=float("nan"))


def _pad_like(rows: Sequence[Sequence[float]], like: torch.Tensor) -> torch.Tensor:
    """`rows` as a tensor shaped like `like`; nan where a row has no value (shorter, or empty)."""
    out = torch.full(like.shape, float("nan"), dtype=like.dtype, device=like.device)
    for i, row in enumerate(rows):
        if row:
            out[i, : len(row)] = torch.tensor(row, dtype=like.dtype)
    return out


def _reference_logprobs(reference: KLReference, policy: Policy, prompts: Sequence[Sequence[int]],
                        responses: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """Log-probs under the frozen reference (a separate model, or the base with adapters off)."""
    with torch.no_grad():
        return reference.logprobs(policy.model, prompts, responses, pad_id)
