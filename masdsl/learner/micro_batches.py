"""Micro-batches of one optimizer step's rows: which rows run through the model together.

A micro-batch is a list of prompt groups (the K candidates of one decision, which share their
prompt), each a list of row indices, kept within `train.micro_batch_tokens`: on the padded path
(`micro_batches`) a micro-batch costs `groups * longest_prompt + rows * longest_response` tokens,
on the packed one (`packed_micro_batches`) `groups * longest row`, a row being a prompt and its
responses' sum. A group is split over micro-batches only when it exceeds the budget alone
(`split_groups` counts those: their prompt runs once per micro-batch).
"""

from __future__ import annotations

from typing import Any, Hashable, Sequence

from masdsl.runtime.records import StepRecord


def micro_batches(prompt_keys: Sequence[Hashable], prompt_lens: Sequence[int], resp_lens: Sequence[int],
                  budget: int) -> list[list[list[int]]]:
    """Plan micro-batches of rows: each is a list of prompt groups, each group a list of rows.

    Rows with the same prompt (the K candidates of one decision) go through the model's
    prompt once (see `shared_prefix_logprobs`). A micro-batch's padded cost is
    `groups * longest_prompt + rows * longest_response` tokens and stays within `budget`
    unless a single row is larger on its own. A group that does not fit beside the groups
    already in a micro-batch starts the next one whole; only a group too big for the budget on
    its own is split (its prompt then runs once per micro-batch it spans: `split_groups`).

    >>> micro_batches(["a", "a", "b", "b"], [4, 4, 4, 4], [2, 2, 2, 2], budget=12)
    [[[0, 1]], [[2, 3]]]
    >>> micro_batches(["a", "b", "b"], [4, 4, 4], [2, 2, 2], budget=13)   # b fits alone: not split
    [[[0]], [[1, 2]]]
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
        group_p, group_r = max(prompt_lens[i] for i in members), max(resp_lens[i] for i in members)
        beside = cost(len(cur) + 1, max(longest_p, group_p), rows + len(members), max(longest_r, group_r))
        if cur and cost(1, group_p, len(members), group_r) <= budget < beside:
            out.append(cur)  # the group fits a micro-batch of its own: start it there, not split
            cur, longest_p, longest_r, rows = [], 0, 0, 0
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


def packed_micro_batches(prompt_keys: Sequence[Hashable], prompt_lens: Sequence[int], resp_lens: Sequence[int],
                         budget: int) -> list[list[list[int]]]:
    """`micro_batches` for the packed path (`packed_logprobs`), where a group is one row of its
    prompt and its responses' sum, so a micro-batch costs `groups * longest row` tokens.

    >>> packed_micro_batches(["a", "a", "b", "b"], [4, 4, 4, 4], [2, 2, 2, 2], budget=8)
    [[[0, 1]], [[2, 3]]]
    >>> packed_micro_batches(["a", "a", "b", "b"], [4, 4, 4, 4], [2, 2, 2, 2], budget=16)
    [[[0, 1], [2, 3]]]
    >>> packed_micro_batches(["a", "a", "a"], [4, 4, 4], [4, 4, 4], budget=12)   # too big alone: split
    [[[0, 1]], [[2]]]
    >>> packed_micro_batches(["a", "b", "b"], [4, 4, 4], [1, 1, 8], budget=16)   # b fits alone: not split
    [[[0]], [[1, 2]]]
    """
    groups: dict[Any, list[int]] = {}
    for i, key in enumerate(prompt_keys):
        groups.setdefault(key, []).append(i)
    out: list[list[list[int]]] = []
    cur: list[list[int]] = []
    widths: list[int] = []  # each group's row in `cur`: its prompt and the responses so far
    for members in groups.values():
        whole = prompt_lens[members[0]] + sum(resp_lens[i] for i in members)
        if cur and whole <= budget < (len(cur) + 1) * max(*widths, whole):
            out.append(cur)  # the group fits a micro-batch of its own: start it there, not split
            cur, widths = [], []
        for i in members:
            new_group = not cur or cur[-1][0] not in members
            width = (prompt_lens[i] if new_group else widths[-1]) + resp_lens[i]
            rows_after = len(cur) + (1 if new_group else 0)
            if cur and rows_after * max(*widths, width) > budget:
                out.append(cur)
                cur, widths, new_group, width = [], [], True, prompt_lens[i] + resp_lens[i]
            if new_group:
                cur.append([])
                widths.append(0)
            cur[-1].append(i)
            widths[-1] = width
    if cur:
        out.append(cur)
    return out


def split_groups(records: Sequence[StepRecord], rows: Sequence[int], budget: int, packed: bool = False
                 ) -> tuple[int, int, int]:
    """(prompt groups of `rows` that `micro_batches` splits, groups, the largest group's padded
    tokens). It splits exactly the groups of several rows whose own padded cost, prompt + rows x
    longest reply, is over the budget. A split group's prompt runs once per micro-batch it spans
    instead of once: with 300-token prompts and K = 4 replies of 128 tokens, a budget of 512 made
    the update 1.6-2.0x slower than 1,024 (docs/performance.md `## step memory`).

    >>> from types import SimpleNamespace as R
    >>> recs = [R(prompt_ids=[1] * 4, response_ids=[2] * 4) for _ in range(3)] + [R(prompt_ids=[3], response_ids=[4])]
    >>> split_groups(recs, range(4), 12), split_groups(recs, range(4), 16)
    ((1, 2, 16), (0, 2, 16))

    `packed`: a group costs its prompt and its replies' sum (`packed_micro_batches`).
    """
    members: dict[tuple[int, ...], list[int]] = {}
    for i in rows:
        members.setdefault(tuple(records[i].prompt_ids), []).append(len(records[i].response_ids))
    costs = [(len(r), len(k) + (sum(r) if packed else len(r) * max(r))) for k, r in members.items()]
    return sum(n > 1 and c > budget for n, c in costs), len(costs), max((c for _, c in costs), default=0)
