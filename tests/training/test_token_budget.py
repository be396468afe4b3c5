"""`train.token_budget`: a run stops after the step at which its training rollouts have generated
the budget, evaluates and checkpoints there as at a last step, and resumes to the same stop."""

from __future__ import annotations

from pathlib import Path

import pytest

import masdsl
from masdsl.config import ConfigError, resolve_config
from masdsl.plan.run_plan import resolve_run
from masdsl.training import checkpoint as ckpt
from tests.support.toy import train_into
from tests.support.overrides import NO_TRACKING
from tests.support.paths import TOY_DIR

TOY = TOY_DIR
pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py
BASE = ("train.steps=6", "train.samples=2", "train.batch=2", "train.eval_every=0", "train.lr=0.01",
        "train.checkpoint_every=0", "train.eval_tasks=2", NO_TRACKING, "runtime.engine=hf")


def run(model_dir, folder, *extra, resume=None):
    wf = masdsl.load(TOY / "toy_digits.mas")
    cfg = resolve_config(wf.train, overrides=[*BASE, *(f"policy.{p}.model={model_dir}" for p in wf.policies), *extra])
    return train_into(resolve_run(wf, cfg), folder, resume=resume)


def test_the_run_stops_at_the_step_that_spends_the_budget(tiny_model_dir, tmp_path):
    free = run(tiny_model_dir, tmp_path / "free", "train.steps=3")
    per_step = [h["tokens/generated"] for h in free.history]
    assert all(t > 0 for t in per_step)
    budget = int(per_step[0] + per_step[1] // 2)  # spent during step 2

    capped = run(tiny_model_dir, tmp_path / "capped", f"train.token_budget={budget}")
    assert capped.steps == 2  # not 6: step 1 is under the budget, step 2 reaches it
    assert [e["step"] for e in capped.evals] == [0, 2]  # the evaluation of a last step
    assert [p.name for p in ckpt.list_complete(tmp_path / "capped")] == ["step_000002"]
    assert [h["tokens/generated"] for h in capped.history] == per_step[:2]  # the same seeded steps


def test_a_resumed_run_keeps_the_same_stop(tiny_model_dir, tmp_path):
    first = run(tiny_model_dir, tmp_path / "a", "train.steps=1", "train.checkpoint_every=1")
    budget = int(first.history[0]["tokens/generated"] * 2.5)  # spent during step 3
    resumed = run(tiny_model_dir, tmp_path / "a", f"train.token_budget={budget}", resume=tmp_path / "a")
    assert resumed.steps == 3
    assert sum(h["tokens/generated"] for h in resumed.history) >= budget


def test_a_negative_budget_is_refused():
    wf = masdsl.load(TOY / "toy_digits.mas")
    with pytest.raises(ConfigError, match="token_budget"):
        resolve_config(wf.train, overrides=["train.token_budget=-1"])


def test_the_dry_run_plan_names_the_budget(tiny_model_dir):
    wf = masdsl.load(TOY / "toy_digits.mas")
    cfg = resolve_config(wf.train, overrides=[*BASE, "train.token_budget=5000"])
    text = "\n".join(resolve_run(wf, cfg).lines())
    assert "steps 1..6, or until the training rollouts have generated 5,000 tokens" in text
