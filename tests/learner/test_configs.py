"""The shipped config overlay and the learner's config checks."""

from __future__ import annotations

from pathlib import Path
import pytest

import masdsl
from masdsl.config import GROUPINGS, LOSSES, ConfigError, policy_override, resolve_config
from masdsl.learner.grouping import GROUP_FNS
from masdsl.learner.losses import LOSS_FNS
from masdsl.plan.run_plan import resolve_run
from tests.support.toy import TOY, TOY_LORA

ROOT = Path(__file__).resolve().parents[2]


def test_allowed_values_are_the_implemented_ones():
    assert tuple(GROUP_FNS) == GROUPINGS
    assert tuple(LOSS_FNS) == LOSSES


@pytest.mark.parametrize("name", ["coder_tester", "math_tool", "sudoku", "sokoban", "plan_path"])
def test_paper_overlay_applies_to_shipped_workflows(name):
    wf = masdsl.load(ROOT / "workflows" / f"{name}.mas")
    cfg = resolve_config(wf.train, ROOT / "configs" / "paper.yaml")
    t = cfg.train
    assert (t.samples, t.batch, t.steps, t.lr, t.grouping) == (4, 32, 200, 1e-6, "at")
    assert cfg.runtime.engine == "vllm" and policy_override(cfg, "shared").model == "Qwen/Qwen3-1.7B"
    assert resolve_run(wf, cfg).placement.lines() == ["policy shared <- roles " + ", ".join(wf.roles) + " (full weights, Qwen/Qwen3-1.7B)",
                                 "  engine: vllm in the driver, its own engine, loading the learner's new weights after each update",
                                 "  learner: the driver (cuda)"]


def test_validate_collects_problems_before_models_load():
    wf = masdsl.load(TOY)
    cfg = resolve_config(wf.train, overrides=["train.clip_eps=2", "train.loss=ppo", "train.lr=-1"])
    with pytest.raises(ConfigError) as e:
        resolve_run(wf, cfg)
    text = str(e.value)
    assert "clip_eps" in text and "train.loss" in text and "train.lr" in text
    with pytest.raises(ConfigError, match="no policy `sharde`"):
        resolve_run(wf, resolve_config(wf.train, overrides=["policy.sharde.model=x"]))
    with pytest.raises(ConfigError, match="every policy is frozen"):
        resolve_run(wf, resolve_config(wf.train, overrides=["policy.shared.frozen=true"]))
    with pytest.raises(ConfigError, match="unknown lora key"):
        resolve_run(wf, resolve_config(wf.train, overrides=["policy.shared.lora={rank: 4}"]))


def test_describe_lora_and_frozen():
    wf = masdsl.load(TOY_LORA)
    cfg = resolve_config(wf.train, overrides=["policy.copier_p.frozen=true"])
    assert [line for line in resolve_run(wf, cfg).placement.lines() if line.startswith("policy")] == [
        "policy namer_p <- role namer (LoRA r=4 adapter on a shared base, smollm2-135m-instruct)",
        "policy copier_p <- role copier (frozen, smollm2-135m-instruct)",
    ]
    assert [line for line in resolve_run(wf, cfg).placement.lines() if line.startswith("  learner")] == [
        "  learner: the driver (cpu)", "  learner: none (frozen)"]


@pytest.mark.parametrize("block, message", [
    ({"sandbox": {"isolation": "${a}"}}, "`sandbox.isolation`: Interpolation key 'a' not found"),
    ({"runtime": {"engine_replicas": 0}}, "`runtime.engine_replicas` must be at least 1; got 0"),
    ({"eval_samples": 0}, "`train.eval_samples` must be at least 1; got 0"),
])
def test_bad_values_are_config_errors_not_omegaconf_ones(block, message):
    with pytest.raises(ConfigError) as err:
        resolve_config(train_block=block)
    assert str(err.value) == message
