"""The trainer end to end on tiny random models (CPU, seeded): it learns, it is deterministic,
it resumes exactly, per-role LoRA adapters learn only from their own roles, and the engine
samples from the updated weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from masdsl.errors import CheckpointError
from masdsl.plan.run_plan import resolve_run
from masdsl.plan.run_plan import resolve_rollout
from masdsl.training import checkpoint

from tests.support.toy import dense_toy, records_without_timings, run_short, toy, toy_config, train_into

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


def weights(policy_state: Path) -> dict[str, torch.Tensor]:
    return checkpoint.load_weights(policy_state)


def test_toy_learns_from_chance_to_090(tiny_model_dir, tmp_path):
    """Two roles on a shared policy, a tiny random model from scratch: the eval success rate
    (both digits right, greedy) starts near 0 (a random 512-token model rarely even says a
    digit; saying a random digit would score 0.1 per role) and must reach >= 0.9 in 60 steps."""
    wf = toy()
    cfg = toy_config(wf, tiny_model_dir, "train.seed=0")
    assert (cfg.train.samples, cfg.train.batch, cfg.train.steps) == (16, 20, 60)
    result = train_into(resolve_run(wf, cfg), tmp_path / "run")
    curve = [(e["step"], e["success/eval"]) for e in result.evals]
    print("eval success by step:", curve)
    assert curve[0] == (0, 0.0) or curve[0][1] <= 0.2
    assert result.eval_after["success/eval"] >= 0.9, curve
    assert result.eval_after["reward/eval"] >= 0.9
    # both roles learned: the copier's reward in training is high too at the end
    assert result.history[-1]["reward/copier/turn0/mean"] > 0.8
    # the second role's groups were not flat copies (reference bug 2): it got nonzero advantages
    assert min(h["groups/zero_variance_frac"] for h in result.history) < 0.5


def test_deterministic_and_resume_is_exact(tiny_model_dir, tmp_path):
    wf = dense_toy()
    a = run_short(wf, tiny_model_dir, tmp_path / "a")
    b = run_short(wf, tiny_model_dir, tmp_path / "b")
    assert records_without_timings(tmp_path / "a") == records_without_timings(tmp_path / "b")
    assert len(records_without_timings(tmp_path / "a")) == 4 * 5 * 4 * 2  # steps * tasks * K * roles
    wa = weights(a.checkpoints[-1] / "policies" / "shared.safetensors")
    wb = weights(b.checkpoints[-1] / "policies" / "shared.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    from safetensors.torch import load_file

    initial = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    assert any(not torch.equal(initial[k], wa[k]) for k in initial)  # the runs did train
    assert any(h["groups/zero_variance_frac"] < 1 for h in a.history)

    # interrupt after the step-2 checkpoint, then resume: same records and weights as `a`
    class Stop(Exception):
        pass

    def stop_at_2(step, metrics):
        if step == 2:
            raise Stop

    with pytest.raises(Stop):
        run_short(wf, tiny_model_dir, tmp_path / "c", on_step=stop_at_2)
    assert [p.name for p in checkpoint.list_complete(tmp_path / "c")] == ["step_000002"]
    c = run_short(wf, tiny_model_dir, tmp_path / "c", resume=tmp_path / "c")
    assert c.steps == 4
    wc = weights(c.checkpoints[-1] / "policies" / "shared.safetensors")
    assert all(torch.equal(wa[k], wc[k]) for k in wa)
    assert records_without_timings(tmp_path / "c") == records_without_timings(tmp_path / "a")
    state = json.loads((c.checkpoints[-1] / "state.json").read_text())
    assert state["cursor"] == 4 * 5 and state["step"] == 4


def test_resume_refuses_another_workflow(tiny_model_dir, tmp_path):
    wf = dense_toy()
    run_short(wf, tiny_model_dir, tmp_path / "a", "train.steps=2")
    other = toy()
    with pytest.raises(CheckpointError, match="means something else"):
        run_short(other, tiny_model_dir, tmp_path / "a", "train.steps=2", resume=tmp_path / "a")
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        run_short(wf, tiny_model_dir, tmp_path / "empty", resume=tmp_path)


def test_atomic_checkpoint_ignores_partial_folders(tiny_model_dir, tmp_path):
    wf = toy()
    run_short(wf, tiny_model_dir, tmp_path / "a", "train.steps=2")
    root = tmp_path / "a" / "checkpoints"
    (root / ".tmp-step_000009-x").mkdir()  # a save killed before its rename
    (root / "step_000010").mkdir()  # no state.json: incomplete
    assert checkpoint.latest(tmp_path / "a").name == "step_000002"


def _adapter(policy_file: Path) -> dict[str, torch.Tensor]:
    return weights(policy_file)


def test_lora_adapters_train_only_on_their_own_roles(tiny_model_dir, tmp_path):
    from masdsl.learner.policies import load_policies
    from masdsl.learner.update import update_policy
    from masdsl.runtime.engine_factory import build_engines
    from masdsl.runtime.executor import rollout
    from tests.support.rollout_plans import plan_of
    from masdsl.runtime.inputs import prepare

    wf = toy("toy_digits_lora.mas")
    cfg = toy_config(wf, tiny_model_dir, "train.samples=8", "train.batch=10", "train.lr=0.01")
    policies = load_policies(resolve_rollout(wf, cfg))
    assert policies["namer_p"].model is policies["copier_p"].model  # one base in memory
    base = {n: p.detach().clone() for n, p in policies["namer_p"].model.named_parameters() if "lora_" not in n}
    env, data = prepare(wf, cfg.sandbox)
    engines = build_engines(resolve_rollout(wf, cfg), policies)
    roll = rollout(plan_of(wf, cfg, samples=8, seed=3), env, data["train"][:10], engines, mode="train", step=0)
    # the namer's samples get advantages (alternating signs within each group: a random tiny
    # model rarely earns a real reward), the copier's none: the copier's adapter must not move
    namer_only = [(1.0 if r.candidate % 2 else -1.0) if r.role == "namer" else 0.0 for r in roll.records]
    assert {r.policy for r in roll.records} == {"namer_p", "copier_p"}
    before = {n: {k: v.clone() for k, v in p.state_dict().items()} for n, p in policies.items()}
    for name, p in policies.items():
        opt = torch.optim.AdamW(p.parameters(), lr=0.01)
        update_policy(p, opt, roll.records, namer_only, cfg.train)
    after = {n: p.state_dict() for n, p in policies.items()}
    assert any(not torch.equal(before["namer_p"][k], after["namer_p"][k]) for k in after["namer_p"])
    assert all(torch.equal(before["copier_p"][k], after["copier_p"][k]) for k in after["copier_p"])
    for n, p in policies["namer_p"].model.named_parameters():
        if "lora_" not in n:
            assert torch.equal(base[n], p.detach()), n  # the shared base never trains


def test_lora_run_and_frozen_policy(tiny_model_dir, tmp_path):
    wf = dense_toy("toy_digits_lora.mas")
    result = run_short(wf, tiny_model_dir, tmp_path / "r", "train.steps=2", "policy.copier_p.frozen=true")
    ck = result.checkpoints[-1] / "policies"
    assert (ck / "namer_p.safetensors").is_file() and not (ck / "copier_p.safetensors").exists()  # frozen: not trained
    assert set(h for h in result.history[-1] if h.startswith("loss/")) == {"loss/namer_p"}
    adapter = _adapter(ck / "namer_p.safetensors")
    assert adapter and all("lora_" in k for k in adapter)  # an adapter checkpoint, not the base
    assert any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k)  # B starts at 0: it trained


def test_engine_samples_from_updated_weights(tiny_model_dir, tmp_path):
    """After an update, the engine's sampling log-probs are those of the updated model."""
    from masdsl.learner.logprobs import sequence_logprobs
    from masdsl.learner.policies import load_policies, sync
    from masdsl.runtime.backends.base import GenRequest
    from masdsl.runtime.engine_factory import build_engines

    wf = toy()
    cfg = toy_config(wf, tiny_model_dir)
    policies = load_policies(resolve_rollout(wf, cfg))
    p = policies["shared"]
    engine = build_engines(resolve_rollout(wf, cfg), policies)["shared"]
    prompt = p.tokenizer.apply_chat_template([{"role": "user", "content": "target:7:7:7"}], add_generation_prompt=True)
    prompt = list(getattr(prompt, "input_ids", prompt))
    req = GenRequest(prompt_ids=prompt, n=1, temperature=1.0, max_tokens=4, seed=11)
    (before,) = engine.generate([req])[0:1]
    with torch.no_grad():  # an update: any change of the policy's weights
        for w in p.model.parameters():
            w.add_(0.05 * torch.randn_like(w))
    sync(p, engine)
    (cand,) = engine.generate([req])[0]
    with torch.no_grad():
        lp, _ = sequence_logprobs(p.model, [prompt], [cand.token_ids], p.tokenizer.pad_token_id)
    assert torch.allclose(lp[0, : len(cand.token_ids)], torch.tensor(cand.logprobs), atol=1e-4)
    assert before[0].logprobs != cand.logprobs or before[0].token_ids != cand.token_ids


def test_trajectory_grouping_runs_k_independent_episodes(tiny_model_dir, tmp_path):
    """Vanilla GRPO for the ablation: K whole episodes per task (not tree sampling), equal samples."""
    wf = dense_toy()
    run_short(wf, tiny_model_dir, tmp_path / "t", "train.grouping=trajectory", "train.steps=1")
    recs = records_without_timings(tmp_path / "t")
    assert len(recs) == 5 * 4 * 2  # tasks * K episodes * roles: the same count as `at`
    by_task: dict[str, set[int]] = {}
    for r in recs:
        assert r.candidate == 0 and r.selected
        by_task.setdefault(r.task_id, set()).add(r.episode)
    assert len(by_task) == 5 and all(len(eps) == 4 for eps in by_task.values())
    texts = {(r.task_id, r.response_text) for r in recs if r.role == "namer"}
    assert len(texts) > 5  # the K episodes of a task were sampled with different seeds
