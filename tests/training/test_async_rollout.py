"""`train.async_rollout=1` (one-step off-policy, masdsl/learner/ahead.py) on the tiny toy: every
record names the weights that sampled it, staleness is 0 at step 1 and exactly 1 after, the
records' log-probs are those of the weights they name (so the PPO ratio divides by the behaviour
policy), two runs are identical, the toy learns as the synchronous run does, and the plan refuses
what it cannot run exactly."""

from __future__ import annotations

import shutil

import pytest
import torch

from masdsl.config import ConfigError
from masdsl.learner.ahead import RESUME_REFUSED
from masdsl.learner.logprobs import sequence_logprobs
from masdsl.models.load import load_model
from masdsl.plan.run_plan import RunPlanError, resolve_run
from masdsl.training import checkpoint

from tests.support.toy import SHORT, dense_toy, records_without_timings, run_short, toy, toy_config, train_into

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py

ASYNC = "train.async_rollout=1"


def test_records_name_their_weights_and_lag_one_update(tiny_model_dir, tmp_path):
    wf = dense_toy()

    def keep_weights(step, metrics):  # the run keeps its 2 newest checkpoints; these tests want each step's
        shutil.copy(checkpoint.latest(tmp_path / "a") / "policies" / "shared.safetensors", tmp_path / f"w{step}.safetensors")

    a = run_short(wf, tiny_model_dir, tmp_path / "a", ASYNC, "train.checkpoint_every=1", on_step=keep_weights)
    recs = records_without_timings(tmp_path / "a")
    assert len(recs) == 4 * 5 * 4 * 2
    assert {(r.step, r.weights_step) for r in recs} == {(1, 0), (2, 0), (3, 1), (4, 2)}
    assert [h["staleness"] for h in a.history] == [0.0, 1.0, 1.0, 1.0]
    assert all(h["time/rollout_wait_s"] >= 0 for h in a.history)
    # the records' log-probs are the sampling weights' (step 3 sampled by step 1's, not step 2's)
    model, tok = load_model(tiny_model_dir)
    step3 = [r for r in recs if r.step == 3][:8]
    gaps = {}
    for ck in ("w1", "w2"):
        model.load_state_dict(checkpoint.load_weights(tmp_path / f"{ck}.safetensors"))
        with torch.no_grad():
            lp, _ = sequence_logprobs(model, [r.prompt_ids for r in step3], [r.response_ids for r in step3],
                                      tok.pad_token_id)
        gaps[ck] = max((lp[i, : len(r.logprobs)] - torch.tensor(r.logprobs)).abs().max().item()
                       for i, r in enumerate(step3))
    assert gaps["w1"] < 1e-4 < gaps["w2"], gaps
    # step 1 samples before any update, as the synchronous run does: the same records
    run_short(wf, tiny_model_dir, tmp_path / "s")
    assert [r for r in recs if r.step == 1] == [r for r in records_without_timings(tmp_path / "s") if r.step == 1]
    assert {r.weights_step for r in records_without_timings(tmp_path / "s") if r.step == 3} == {2}  # synchronous: step - 1


def test_async_is_deterministic(tiny_model_dir, tmp_path):
    wf = dense_toy()
    a = run_short(wf, tiny_model_dir, tmp_path / "a", ASYNC)
    b = run_short(wf, tiny_model_dir, tmp_path / "b", ASYNC)
    assert records_without_timings(tmp_path / "a") == records_without_timings(tmp_path / "b")
    wa = checkpoint.load_weights(a.checkpoints[-1] / "policies" / "shared.safetensors")
    wb = checkpoint.load_weights(b.checkpoints[-1] / "policies" / "shared.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def _train_reward(wf, model_dir, run_dir, *extra):
    """The mean train reward (both roles) of the first two and of the last two of 12 steps."""
    cfg = toy_config(wf, model_dir, *SHORT, "train.steps=12", "train.lr=0.002", "train.checkpoint_every=0", *extra)
    h = train_into(resolve_run(wf, cfg), run_dir).history
    mean = [(x["reward/namer/turn0/mean"] + x["reward/copier/turn0/mean"]) / 2 for x in h]
    print(run_dir.name, "train reward by step:", [round(m, 2) for m in mean])
    return sum(mean[:2]) / 2, sum(mean[-2:]) / 2


def test_toy_learns_as_the_synchronous_run_does(tiny_model_dir, tmp_path):
    """The dense toy (reward: the reply's length, in characters): its train reward rises over 12
    steps in both modes. Measured (seed 0, first two steps -> last two): sync 7.6 -> 10.2, async 7.7 -> 9.6; the synchronous
    run's own spread over seeds 0 and 1 is 0.8 at the end. At lr 0.01 async learns far slower
    (its clip fraction is 0.2-0.35: one update moves the policy past the clip range), see
    docs/performance.md, "train.async_rollout"."""
    wf = dense_toy()
    sync_first, sync_last = _train_reward(wf, tiny_model_dir, tmp_path / "sync")
    async_first, async_last = _train_reward(wf, tiny_model_dir, tmp_path / "async", ASYNC)
    assert sync_last > sync_first + 1.0 and async_last > async_first + 1.0
    assert abs(async_last - sync_last) < 1.5


def test_lora_policy_trains_async(tiny_model_dir, tmp_path):
    """Per-role adapters on one shared base: the engines sample from a copy whose adapters sync."""
    wf = toy("toy_digits_lora.mas")
    result = run_short(wf, tiny_model_dir, tmp_path / "lora", ASYNC, "train.steps=3")
    assert [h["staleness"] for h in result.history] == [0.0, 1.0, 1.0]
    assert {(r.step, r.weights_step) for r in records_without_timings(tmp_path / "lora")} == {(1, 0), (2, 0), (3, 1)}


@pytest.mark.parametrize("override, words", [
    ("runtime.engine=vllm", "`runtime.engine=hf` only"),
    ("train.old_logprobs=trainer", "behaviour policy's"),
    ("runtime.learner_workers=1", "`runtime.learner_workers=0`"),
    ("runtime.ray=true", "`runtime.ray=false`"),
    ("train.gradient_checkpointing=true", "`train.gradient_checkpointing=false`"),
])
def test_plan_refuses_what_async_cannot_run_exactly(tiny_model_dir, override, words):
    wf = toy()
    with pytest.raises(RunPlanError, match="async_rollout") as err:
        resolve_run(wf, toy_config(wf, tiny_model_dir, ASYNC, override))
    assert words in str(err.value)


def test_plan_accepts_kl_dynamic_sampling_and_schedules(tiny_model_dir):
    wf = toy()
    resolve_run(wf, toy_config(wf, tiny_model_dir, ASYNC, "train.kl_coef=0.1", "train.dynamic_sampling=2"))
    with pytest.raises(RunPlanError, match="must be 0"):
        resolve_run(wf, toy_config(wf, tiny_model_dir, "train.async_rollout=2"))


def test_resume_is_refused_with_how_to_continue(tiny_model_dir, tmp_path):
    wf = toy()
    plan = resolve_run(wf, toy_config(wf, tiny_model_dir, ASYNC))
    with pytest.raises(ConfigError) as err:
        train_into(plan, tmp_path / "r", resume=tmp_path / "r")
    assert str(err.value) == RESUME_REFUSED and "train.async_rollout=0" in str(err.value)


def test_dropout_is_refused_before_training(tiny_model_dir, tmp_path):
    """An update with dropout draws from the RNG the rollout beside it samples with."""
    wf = toy("toy_digits_lora.mas")
    lora = [f"policy.{p}.lora={{r: 4, dropout: 0.1}}" for p in wf.policies]
    with pytest.raises(ConfigError, match="has dropout"):
        run_short(wf, tiny_model_dir, tmp_path / "d", ASYNC, *lora)


def test_private_lora_engine_syncs_its_adapter_and_only_then(tiny_model_dir):
    """The engines' copy of a shared `PeftModel` keeps its adapter while the learner's changes,
    and samples from the learner's adapter after `sync`."""
    from masdsl.learner.policies import load_policies, sync
    from masdsl.plan.run_plan import resolve_rollout
    from masdsl.runtime.backends.base import GenRequest
    from masdsl.runtime.engine_factory import build_engines

    wf = toy("toy_digits_lora.mas")
    plan = resolve_rollout(wf, toy_config(wf, tiny_model_dir, ASYNC))
    policies = load_policies(plan)
    p = policies["namer_p"]
    engine = build_engines(plan, policies)["namer_p"]
    assert engine.model is not p.model
    prompt = list(range(5, 25))
    req = GenRequest(prompt_ids=prompt, n=1, temperature=1.0, max_tokens=4, seed=3)

    def learner_logprobs(cand):
        with p.lock, torch.no_grad():
            p.activate()
            lp, _ = sequence_logprobs(p.model, [prompt], [cand.token_ids], p.tokenizer.pad_token_id)
        return lp[0, : len(cand.token_ids)]

    (before,) = engine.generate([req])[0]
    with torch.no_grad():  # an update of the namer's adapter only
        for w in p.parameters():
            w.add_(0.5 * torch.randn_like(w))
    (same,) = engine.generate([req])[0]
    assert same.token_ids == before.token_ids and same.logprobs == before.logprobs  # the copy kept its weights
    sync(p, engine)
    (after,) = engine.generate([req])[0]
    assert torch.allclose(learner_logprobs(after), torch.tensor(after.logprobs), atol=1e-4)
    assert not torch.allclose(learner_logprobs(before), torch.tensor(before.logprobs), atol=1e-3)


def test_chunked_logprobs_leave_the_global_rng_alone(tiny_model_dir, monkeypatch):
    """The update's checkpointed logit chunks must not save and restore the global RNG: under
    async, a restore in the backward rewinds the stream the rollout beside it samples from (seen
    as every reply's last token repeating the one before it, in some runs and not others)."""
    from masdsl.learner.logit_chunks import Chunks
    from masdsl.models.load import load_model

    model, tok = load_model(tiny_model_dir)
    model.train()
    sets = []
    real = torch.set_rng_state
    monkeypatch.setattr(torch, "set_rng_state", lambda state: (sets.append(1), real(state))[1])
    lp, mask = sequence_logprobs(model, [[5, 6, 7, 8]] * 3, [[9, 10, 11], [12, 13], [14]], tok.pad_token_id,
                                 chunks=Chunks(rows=2, positions=2))
    (lp * mask).sum().backward()
    assert mask.sum() == 6 and sets == []


def test_dynamic_sampling_and_kl_run_async(tiny_model_dir, tmp_path):
    """Every round of a step's dynamic sampling samples ahead from one weight version, and the KL
    term's frozen reference is the same whatever the lag."""
    wf = dense_toy()
    result = run_short(wf, tiny_model_dir, tmp_path / "dk", ASYNC, "train.steps=3", "train.kl_coef=0.1",
                  "train.dynamic_sampling=31", "train.dynamic_sampling_rounds=2")
    assert [h["dynamic/rounds"] for h in result.history] == [2.0, 2.0, 2.0]
    assert [h["staleness"] for h in result.history] == [0.0, 1.0, 1.0]
    assert all(h["kl/shared"] >= 0 for h in result.history) and result.history[-1]["kl/shared"] > 0
    recs = records_without_timings(tmp_path / "dk")
    assert {(r.step, r.weights_step) for r in recs} == {(1, 0), (2, 0), (3, 1)}
    assert len({r.task_id for r in recs if r.step == 2}) == 10  # two batches of 5 tasks
