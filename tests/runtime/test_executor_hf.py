"""The executor on a real (tiny, random) model through the `hf` engine: tags, groups, ids, log-probs."""

from __future__ import annotations

from collections import defaultdict

from masdsl.runtime.sampling import select
from tests.support.overrides import NO_TRACKING
from tests.support.rollouts import RUNTIME_TOY, rollout_two_tasks, sampled_toy


def test_tree_sampling_on_tiny_model(hf_engine):
    wf = sampled_toy()
    assert wf.roles["a"].sample["max_tokens"] == 12
    ro = rollout_two_tasks(hf_engine, wf)
    groups = defaultdict(list)
    for r in ro.records:
        groups[(r.task_id, r.role, r.turn)].append(r)
    assert {k[0] for k in groups} == {"train0", "train1"}
    tok = hf_engine.tokenizer
    for (task, role, turn), recs in groups.items():
        assert [r.candidate for r in recs] == [0, 1, 2] and all(r.step == 2 for r in recs)
        assert len({tuple(r.prompt_ids) for r in recs}) == 1
        assert recs[0].prompt_ids == tok(recs[0].prompt_text, add_special_tokens=False)["input_ids"]
        assert recs[0].prompt_text.startswith("<|im_start|>user\n") and recs[0].prompt_text.endswith("assistant\n")
        assert [r.selected for r in recs].index(True) == select([r.reward for r in recs])
        for r in recs:
            assert 1 <= len(r.response_ids) <= 12 and len(r.logprobs) == len(r.response_ids)
            assert all(lp <= 0.0 for lp in r.logprobs)
    for e in ro.episodes:  # max_turns 2 over a&b: at most 2 turns per role
        assert set(e.turns) == {"a", "b"} and max(e.turns.values()) <= 2
    assert ro.tokens_generated == sum(len(r.response_ids) for r in ro.records) > 0
    assert ro.gen_s > 0 and ro.wall_s >= ro.gen_s


def test_stored_ids_reproduce_the_sampling_logprobs(hf_engine):
    """The ids kept are exactly the sampled ones: a teacher-forced forward pass on
    prompt_ids + response_ids gives back the engine's log-probs."""
    import torch

    ro = rollout_two_tasks(hf_engine, sampled_toy(), samples=2)
    model = hf_engine.model
    for r in ro.records[:4]:
        ids = torch.tensor([r.prompt_ids + r.response_ids])
        with torch.no_grad():
            logits = model(ids).logits[0].float()
        n = len(r.prompt_ids)
        lp = torch.log_softmax(logits[n - 1 : -1], dim=-1).gather(1, ids[0, n:, None]).squeeze(1)
        assert torch.allclose(lp, torch.tensor(r.logprobs), atol=1e-3), (lp, r.logprobs)


def test_the_engine_returns_log_probs_only_where_training_reads_them(hf_engine):
    """float32: the update divides by the sampler's log-probs; bfloat16: the trainer recomputes
    them, so the rollout does not ask (unless `train.logprob_gap` measures the gap); an
    evaluation always asks (`masdsl eval`'s records are read). Asking or not samples the same tokens."""
    wf = sampled_toy()
    runs = {name: rollout_two_tasks(hf_engine, wf, samples=2, overrides=o).records for name, o in (
        ("float32", []), ("bfloat16", ["runtime.dtype=bfloat16"]),
        ("gap", ["runtime.dtype=bfloat16", "train.logprob_gap=true"]))}
    assert all(len(r.logprobs) == len(r.response_ids) > 0 for name in ("float32", "gap") for r in runs[name])
    assert all(r.logprobs == [] for r in runs["bfloat16"])
    assert [r.response_ids for r in runs["bfloat16"]] == [r.response_ids for r in runs["float32"]]
    assert [r.logprobs for r in runs["gap"]] == [r.logprobs for r in runs["float32"]]
    evals = rollout_two_tasks(hf_engine, wf, mode="eval", overrides=["runtime.dtype=bfloat16"]).records
    assert all(len(r.logprobs) == len(r.response_ids) > 0 for r in evals)


def test_same_seed_same_rollout(hf_engine):
    wf = sampled_toy()
    a, b = rollout_two_tasks(hf_engine, wf, samples=2), rollout_two_tasks(hf_engine, wf, samples=2)
    assert [r.response_ids for r in a.records] == [r.response_ids for r in b.records]
    assert [r.reward for r in a.records] == [r.reward for r in b.records]
    ev = rollout_two_tasks(hf_engine, wf, mode="eval")
    assert all(r.candidate == 0 and r.selected for r in ev.records)


def test_masdsl_eval_with_the_hf_engine_on_the_tiny_model(tiny_model_dir, tmp_path, capsys):
    from masdsl.cli import main

    assert main(["eval", str(RUNTIME_TOY), "runtime.engine=hf", f"policy.shared.model={tiny_model_dir}",
                 f"runtime.runs_dir={tmp_path}", NO_TRACKING, "--tasks", "1"]) == 0
    out = capsys.readouterr().out
    assert "success rate" in out and "tokens/s" in out and "mean reward · a · turn 0" in out
    (run,) = (tmp_path / "toy").iterdir()
    from masdsl.runtime.records import read_records

    recs = list(read_records(run / "records.jsonl"))
    assert recs and {r.task_id for r in recs} == {"eval0"} and all(r.response_ids for r in recs)
