"""`same_reply/<role>`: the share of a role's groups whose K replies are one and the same reply,
counted by the trainer each step, checked here against the step's records on the tiny model."""

from __future__ import annotations

from collections import defaultdict

import pytest

from masdsl.runtime.records import read_records

from tests.support.toy import dense_toy, run_short


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


def test_same_reply_counts_the_groups_whose_k_replies_are_one(tiny_model_dir, tmp_path):
    # the namer samples greedily, so each of its groups holds one reply four times; the copier
    # samples 4 tokens at temperature 1 from a random model, so its replies differ
    wf = dense_toy()
    history = run_short(wf, tiny_model_dir, tmp_path / "run", "train.steps=2", "sample.namer.temperature=0").history
    replies: dict[tuple, set] = defaultdict(set)
    for r in read_records(tmp_path / "run" / "records.jsonl"):
        replies[(r.step, r.role, r.task_id, r.turn)].add(tuple(r.response_ids))
    for h in history:
        for role in ("namer", "copier"):
            groups = [ids for (step, who, _, _), ids in replies.items() if step == h["step"] and who == role]
            assert h[f"same_reply/{role}"] == sum(len(ids) == 1 for ids in groups) / len(groups)
        assert h["same_reply/namer"] == 1.0 and h["same_reply/copier"] < 0.5
