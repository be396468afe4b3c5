"""benchmarks/update_throughput.py compares like with like: its plain torch loop takes the same
optimizer step as masdsl's `update_policy` on the same rows, and the FLOPs it credits both paths
with count a group's prompt once."""

from __future__ import annotations

import copy
import dataclasses
import pytest
import torch

from masdsl.config import resolve_config
from masdsl.learner.policies import Policy
from masdsl.learner.update import update_policy
from masdsl.models.load import load_model
from tests.support.benchmarks import benchmark_module


@pytest.fixture(scope="module")
def bench():
    yield from benchmark_module("update_throughput")


@pytest.mark.parametrize("mini_batch, steps", [(16, 1), (3, 2)])
def test_plain_loop_takes_masdsl_steps(bench, tiny_model_dir, mini_batch, steps):
    torch.manual_seed(0)
    model, tok = load_model(tiny_model_dir)
    twin = copy.deepcopy(model)
    recs, adv = bench.rows(tok, prompts=2, k=3, prompt_tokens=12, response_tokens=6)
    # micro-batches of a few rows: the plain loop and masdsl split them differently
    tc = resolve_config(overrides=["train.micro_batch_tokens=40", f"train.mini_batch_size={mini_batch}"]).train
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    policy = Policy("p", None, ["r"], model, tok, str(tiny_model_dir))
    stats = update_policy(policy, torch.optim.SGD(model.parameters(), lr=1.0), recs, adv, tc)
    assert stats.optimizer_steps == steps
    twin.train()
    bench.plain_update(twin, torch.optim.SGD(twin.parameters(), lr=1.0), recs, adv, 40, "cpu", "float32", pad,
                       mini_batch)
    before = dict(load_model(tiny_model_dir)[0].named_parameters())
    moved = 0.0
    for (name, a), (_, b) in zip(model.named_parameters(), twin.named_parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)
        moved = max(moved, (a - before[name]).abs().max().item())
    assert moved > 1e-4  # the step did something


def test_needed_flops_count_each_prompt_once(bench, tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    recs, _ = bench.rows(tok, prompts=2, k=3, prompt_tokens=12, response_tokens=6)
    full, lora = bench.needed_flops(model, recs, lora=False), bench.needed_flops(model, recs, lora=True)
    assert full == pytest.approx(1.5 * lora)  # backward 2x the forward, against 1x with LoRA
    doubled = recs + [dataclasses.replace(r, response_ids=list(r.response_ids)) for r in recs]  # same prompts
    responses = sum(len(r.response_ids) for r in recs)
    emb = model.get_input_embeddings().weight
    extra = bench.needed_flops(model, doubled, lora=True) - lora
    non_embedding = sum(p.numel() for n, p in model.named_parameters() if "embed" not in n and "lm_head" not in n)
    # only the new responses add FLOPs: 2 (forward) x 2 (LoRA's backward) per token and weight
    assert extra == pytest.approx(4 * responses * (non_embedding + emb.shape[0] * emb.shape[1]))


def test_replayed_rows_are_a_steps_records_with_the_trainers_advantages(bench, tmp_path):
    """`--records`: one step's rows of a run's records.jsonl, scored by masdsl's own grouping;
    `--live-groups N` keeps N of the groups that train (a flat group never)."""
    from masdsl.runtime.records import StepRecord, write_records

    def rec(step, episode, role, cand, reward):
        return StepRecord(step=step, episode=episode, task_id=f"t{episode}", role=role, turn=0, node=role,
                          candidate=cand, selected=cand == 0, policy="shared", prompt_ids=[episode, 7],
                          response_ids=[cand + 1] * 3, logprobs=[], reward=reward, reward_team=0.0,
                          reward_local=reward, finish_reason="stop", parse_ok=True)

    rows = [rec(1, e, role, c, float(c == 0 and role != "flat")) for e in range(3) for role in ("a", "flat")
            for c in range(2)] + [rec(2, 0, "a", c, float(c)) for c in range(2)]
    path = tmp_path / "records.jsonl"
    write_records(path, rows)
    recs, adv = bench.replayed(str(path), 1, "at")
    assert len(recs) == 12 and {r.step for r in recs} == {1} and {r.policy for r in recs} == {"p"}
    assert [a != 0.0 for a in adv] == [r.role == "a" for r in recs]
    recs, adv = bench.replayed(str(path), 1, "at", live_groups=2)
    assert len(recs) == 4 and {r.role for r in recs} == {"a"} and all(a != 0.0 for a in adv)
    with pytest.raises(SystemExit, match="no records of step 5"):
        bench.replayed(str(path), 5, "at")
