"""Dynamic sampling (`train.dynamic_sampling`): a step draws more tasks while it holds fewer
non-flat groups than asked for, and stops at its cap (`train.dynamic_sampling_rounds`)."""

from __future__ import annotations

from pathlib import Path

import pytest

import masdsl
from masdsl.config import resolve_config
from masdsl.learner.trainer import train
from masdsl.runtime.records import read_records

TOY = Path(__file__).parent / "toy"
pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py
BASE = ("train.steps=1", "train.samples=4", "train.batch=5", "train.eval_every=0", "train.lr=0.01",
        "train.checkpoint_every=0", "train.eval_tasks=2", "tracking.enabled=false", "runtime.engine=hf")


def toy(reward: str):
    """The two-role toy with every role's reward replaced by `reward` (and no team reward)."""
    text = (TOY / "toy_digits.mas").read_text()
    for role_reward in ("reward same(digit, task.target)", "reward same(digit, namer.digit)"):
        text = text.replace(role_reward, f"reward {reward}")
    text = text.replace("team    same(namer.digit, task.target) and same(copier.digit, task.target)\n", "")
    text = text.replace("max_tokens: 1", "max_tokens: 4")
    return masdsl.loads(text, name="toy_dynamic", base_dir=TOY)


def run(wf, model_dir, tmp_path, *extra):
    cfg = resolve_config(wf.train, overrides=[*BASE, *(f"policy.{p}.model={model_dir}" for p in wf.policies), *extra])
    result = train(wf, cfg, run_dir=tmp_path / "run")
    return result.history[-1], list(read_records(tmp_path / "run" / "records.jsonl"))


def test_all_flat_groups_draw_until_the_cap(tiny_model_dir, tmp_path):
    """A constant reward makes every group flat: the step draws 3 batches (the cap), 15 distinct
    tasks, and the data cursor moves past all of them."""
    h, records = run(toy("0"), tiny_model_dir, tmp_path, "train.dynamic_sampling=1", "train.dynamic_sampling_rounds=3")
    assert h["dynamic/rounds"] == 3
    assert h["dynamic/tasks"] == 15
    assert len({r.task_id for r in records}) == 15
    assert h["groups/nonflat_frac"] == 0.0
    episodes = {(r.task_id, r.episode) for r in records}
    assert len({e for _, e in episodes}) == 15  # each task its own episode index


def test_stops_as_soon_as_enough_groups_differ(tiny_model_dir, tmp_path):
    """A dense reward (the output's length) gives non-flat groups in the first batch already."""
    h, records = run(toy("len(output)"), tiny_model_dir, tmp_path, "train.dynamic_sampling=1")
    assert h["dynamic/rounds"] == 1 and h["dynamic/tasks"] == 5
    assert h["groups/nonflat_frac"] > 0
    assert len({r.task_id for r in records}) == 5


def test_fills_the_batch_with_more_non_flat_groups(tiny_model_dir, tmp_path):
    """Asking for more non-flat groups than three batches can hold (3 x 5 tasks x 2 roles = 30)
    makes the step roll out more batches, and it then holds more non-flat groups than one."""
    h1, rec1 = run(toy("len(output)"), tiny_model_dir, tmp_path / "one")
    h3, rec3 = run(toy("len(output)"), tiny_model_dir, tmp_path / "three", "train.dynamic_sampling=31",
                   "train.dynamic_sampling_rounds=3")
    assert h1["dynamic/rounds"] == 1 and h3["dynamic/rounds"] == 3
    nonflat1 = round(h1["groups/nonflat_frac"] * h1["groups/count"])
    nonflat3 = round(h3["groups/nonflat_frac"] * h3["groups/count"])
    groups3 = {(r.task_id, r.role, r.turn) for r in rec3}
    assert len(groups3) == 30 and len({(r.task_id, r.role, r.turn) for r in rec1}) == 10
    # the first rollout of the dynamic step is the plain step's rollout (same seed, same tasks)
    first = [r for r in rec3 if r.episode < 5]
    assert [(r.task_id, r.response_ids) for r in first] == [(r.task_id, r.response_ids) for r in rec1]
    assert h3["groups/count"] == 30 and nonflat3 > nonflat1


def test_settings_are_range_checked():
    from masdsl.config import ConfigError

    wf = toy("0")
    with pytest.raises(ConfigError, match="dynamic_sampling_rounds"):
        resolve_config(wf.train, overrides=["train.dynamic_sampling_rounds=0"])
    with pytest.raises(ConfigError, match="dynamic_sampling"):
        resolve_config(wf.train, overrides=["train.dynamic_sampling=-1"])
