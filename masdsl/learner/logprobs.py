"""Log-probabilities of response tokens under a model: padded rows, and a shared prompt run once.

    logp, mask = sequence_logprobs(model, prompts, responses, pad_id)            # [B, T] each
    logp, mask = shared_prefix_logprobs(model, distinct_prompts, group_of_row, responses, pad_id)
    logp, mask = packed_logprobs(model, distinct_prompts, group_of_row, responses, pad_id)   # no padding

What `masdsl.learner.update` trains on (and what tests and benchmarks compare with an engine's
sampled log-probs). The response positions' logits are never made whole: the LM head runs on
the final hidden states in checkpointed chunks (`masdsl.learner.logit_chunks`; `chunks=WHOLE`,
or a model type it does not cover, takes the full-logits path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch
from torch import nn

from masdsl.learner.logit_chunks import Chunks, TokenLogProb, at_least_float32, scoring

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers.cache_utils import Cache


def pad_rows(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
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


def sequence_logprobs(model: nn.Module, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int,
                      chunks: Chunks | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(response token | prefix) for every response position: ([B, T], mask [B, T]).

    Only the last T+1 positions reach the LM head (`logits_to_keep`), in chunks (`scoring`); on
    the full-logits path they are one [B, T+1, V] tensor.
    """
    ids, att, pos, rmask = pad_rows(prompts, responses, pad_id)
    device = next(model.parameters()).device
    t = rmask.shape[1]
    target = ids[:, -t:].to(device)  # position P-1+j predicts response token j
    with scoring(model, target, chunks, needed=rmask.to(device) > 0) as chunked:
        out = model(input_ids=ids.to(device), attention_mask=att.to(device), position_ids=pos.to(device),
                    logits_to_keep=t + 1, use_cache=False)
    if chunked:
        return out.logits, rmask.to(device)
    logp = torch.log_softmax(at_least_float32(out.logits[:, :-1, :]), dim=-1)
    return logp.gather(-1, target.unsqueeze(-1)).squeeze(-1), rmask.to(device)


def shared_prefix_logprobs(model: nn.Module, prompts: Sequence[Sequence[int]], group_of_row: Sequence[int],
                           responses: Sequence[Sequence[int]], pad_id: int, two_calls: bool = False,
                           chunks: Chunks | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Like `sequence_logprobs`, but each distinct prompt goes through the model once.

    `prompts` are the G distinct prompts, `group_of_row[i]` the prompt of response i. The
    prompts run with a KV cache (left-padded, real positions); the cache is gathered to one
    row per response (with gradients), then the responses run on top of it. The first response
    token is scored from the prompt's last logits. For K candidates per prompt, the prompt's
    forward and backward cost is paid once instead of K times.

    With one-token responses the second call is not needed; `two_calls` makes it anyway (on the
    first response tokens, its output added at weight 0), so that the model is called twice
    whatever the data: FSDP with one unit per layer needs every rank to make the same calls.
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
    first = torch.log_softmax(at_least_float32(out.logits[:, -1, :]), dim=-1).index_select(0, idx)  # [R, V]
    parts = [first.gather(-1, resp[:, :1])]
    if t > 1 or two_calls:
        n = max(t - 1, 1)  # t == 1 (`two_calls` only): a call on the first response tokens, at weight 0
        cache = out.past_key_values
        select_cache_rows(cache, idx)
        att = torch.cat([att_p.to(device)[idx], rmask[:, :-1].long() if t > 1 else torch.ones_like(resp)], dim=1)
        pos = att_p.sum(-1).to(device)[idx].unsqueeze(1) + torch.arange(n, device=device).unsqueeze(0)
        target = resp[:, 1:] if t > 1 else resp[:, :1]  # t == 1: scored at weight 0
        with scoring(model, target, chunks, needed=rmask[:, 1:] > 0 if t > 1 else None) as chunked:
            out2 = model(input_ids=resp[:, :n], attention_mask=att, position_ids=pos, past_key_values=cache,
                         use_cache=True)
        if chunked:
            rest = out2.logits
        else:  # gather - logsumexp: no second [R, T, V] tensor (log_softmax's)
            logits = at_least_float32(out2.logits)
            rest = logits.gather(-1, target.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
        if t == 1:
            return parts[0] + 0.0 * rest.sum(1, keepdim=True), rmask
        parts.append(rest)
    return torch.cat(parts, dim=1), rmask


# attention implementations that honour a custom 4D mask as given: sdpa takes a boolean one
# (True: attend), eager adds it to the scores (0 or the dtype's lowest value)
PACKABLE_ATTENTION = ("sdpa", "eager")


def packs(model: nn.Module) -> bool:
    """Whether `packed_logprobs` can run `model`: an attention that reads a custom 4D mask."""
    config = getattr(model, "config", None)
    return getattr(config, "_attn_implementation", None) in PACKABLE_ATTENTION


@dataclass(frozen=True)
class Packing:
    """Where each token of a micro-batch goes when every group is one row without padding inside it.

    A group's row is its prompt but the last token (the body), then, for each of its responses,
    a segment: the prompt's last token followed by the response but its last token. A segment
    sees the body and itself (causally), never another segment, and takes the positions the
    response has after the prompt, so each segment's outputs are the response's log-probs exactly
    as if it ran alone after the prompt. Rows are left-padded to the longest; only the last
    `keep` positions (every segment) reach the LM head.

    >>> pk = Packing.of([[5, 6, 7]], [0, 0], [[1, 2], [3]], pad_id=0)
    >>> pk.ids.tolist(), pk.positions.tolist(), pk.targets.tolist(), pk.keep
    ([[5, 6, 7, 1, 7]], [[0, 1, 2, 3, 2]], [[1, 2, 3]], 3)
    >>> pk.allowed[0, 0].int().tolist()  # body: causal; a segment: the body and itself
    [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 0, 0, 1]]
    >>> pk.gather.tolist(), pk.mask.tolist()  # each response's log-probs in the kept window
    ([[0, 1], [2, 0]], [[1.0, 1.0], [1.0, 0.0]])
    """

    ids: torch.Tensor  # [G, W] token ids
    positions: torch.Tensor  # [G, W] position ids
    allowed: torch.Tensor  # [G, 1, W, W] bool: query row attends key column
    targets: torch.Tensor  # [G, keep] the token each kept position predicts (pad_id where none)
    keep: int  # kept positions: the longest row's segments
    gather: torch.Tensor  # [R, T] index into the flattened [G * keep] log-probs, per response token
    mask: torch.Tensor  # [R, T] 1.0 on real response tokens

    @staticmethod
    def of(prompts: Sequence[Sequence[int]], group_of_row: Sequence[int], responses: Sequence[Sequence[int]],
           pad_id: int) -> "Packing":
        rows_of: list[list[int]] = [[] for _ in prompts]
        for i, g in enumerate(group_of_row):
            rows_of[g].append(i)
        tokens: list[list[int]] = []
        pos: list[list[int]] = []
        seg: list[list[int]] = []
        tgt: list[list[int]] = []
        for g, prompt in enumerate(prompts):
            body = list(prompt[:-1])
            t_ids, t_pos, t_seg, t_tgt = body[:], list(range(len(body))), [-1] * len(body), []
            for k, i in enumerate(rows_of[g]):
                r = list(responses[i])
                t_ids += [prompt[-1], *r[:-1]]
                t_pos += range(len(body), len(body) + len(r))
                t_seg += [k] * len(r)
                t_tgt += r
            tokens.append(t_ids)
            pos.append(t_pos)
            seg.append(t_seg)
            tgt.append(t_tgt)
        width, keep = max(len(t) for t in tokens), max(len(t) for t in tgt)
        n, longest = len(prompts), max(len(r) for r in responses)
        ids = torch.full((n, width), pad_id, dtype=torch.long)
        positions = torch.zeros((n, width), dtype=torch.long)
        segment = torch.full((n, width), -2, dtype=torch.long)  # -2 pad, -1 body, k: response k's segment
        targets = torch.full((n, keep), pad_id, dtype=torch.long)
        gather = torch.zeros((len(responses), longest), dtype=torch.long)
        mask = torch.zeros((len(responses), longest))
        for g in range(n):
            off = width - len(tokens[g])
            ids[g, off:], positions[g, off:] = torch.tensor(tokens[g]), torch.tensor(pos[g])
            segment[g, off:] = torch.tensor(seg[g])
            targets[g, keep - len(tgt[g]):] = torch.tensor(tgt[g])
            col = g * keep + keep - len(tgt[g])  # the group's first segment token in the flat window
            for i in rows_of[g]:
                length = len(responses[i])
                gather[i, :length] = torch.arange(col, col + length)
                mask[i, :length] = 1.0
                col += length
        query, key = segment.unsqueeze(2), segment.unsqueeze(1)  # [G, W, 1], [G, 1, W]
        causal = torch.ones((width, width), dtype=torch.bool).tril()
        allowed = causal & (query >= -1) & ((key == -1) | (key == query))
        allowed |= torch.eye(width, dtype=torch.bool) & (query == -2)  # a pad attends itself: no empty softmax row
        return Packing(ids, positions, allowed.unsqueeze(1), targets, keep, gather, mask)


def packed_logprobs(model: nn.Module, prompts: Sequence[Sequence[int]], group_of_row: Sequence[int],
                    responses: Sequence[Sequence[int]], pad_id: int, chunks: Chunks | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Like `shared_prefix_logprobs` (each distinct prompt runs once), in one call and with no
    padding between a group's responses: each group is one row (`Packing`), whose responses see
    the prompt and themselves only. For K candidates of different lengths, the padded path runs K
    times the longest; this runs their sum. Needs an attention that reads a 4D mask (`packs`).
    """
    device = next(model.parameters()).device
    pk = Packing.of(prompts, group_of_row, responses, pad_id)
    allowed = pk.allowed.to(device)
    if getattr(model.config, "_attn_implementation", None) == "eager":  # added to the scores: 0 or the lowest value
        dtype = next(model.parameters()).dtype
        if torch.is_autocast_enabled(device.type):
            dtype = torch.get_autocast_dtype(device.type)
        attn = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)
    else:
        attn = allowed
    target = pk.targets.to(device)
    needed = torch.zeros(target.numel(), dtype=torch.bool)
    needed[pk.gather[pk.mask > 0]] = True  # the window's left padding between groups is never read
    with scoring(model, target, chunks, needed=needed.view(target.shape).to(device)) as chunked:
        out = model(input_ids=pk.ids.to(device), attention_mask=attn, position_ids=pk.positions.to(device),
                    logits_to_keep=pk.keep, use_cache=False)
    window = out.logits if chunked else TokenLogProb.apply(out.logits, target)
    return window.reshape(-1)[pk.gather.to(device)], pk.mask.to(device)


def select_cache_rows(cache: Cache, idx: torch.Tensor) -> None:
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


@dataclass(frozen=True)
class FrozenModel:
    """The KL reference of a full-weight policy: its starting weights, loaded apart and frozen
    (a fresh load of the starting folder, so a resumed run keeps the same reference)."""

    model: nn.Module

    def logprobs(self, policy_model: nn.Module, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                 pad_id: int) -> torch.Tensor:
        return sequence_logprobs(self.model, prompts, responses, pad_id)[0]


@dataclass(frozen=True)
class AdapterOff:
    """The KL reference of a LoRA policy: the shared base model with every adapter off (no copy)."""

    def logprobs(self, policy_model: PeftModel, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                 pad_id: int) -> torch.Tensor:
        with policy_model.disable_adapter():
            return sequence_logprobs(policy_model, prompts, responses, pad_id)[0]


KLReference = FrozenModel | AdapterOff  # what `train.kl_coef > 0` measures the policy's drift from
