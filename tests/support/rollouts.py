"""tests/support/adder/toy.mas (roles `a` and `b` adding numbers, one `shared` policy) sampled through
one engine: the same rollout for the hf engine and the vllm engine tests."""

from __future__ import annotations

from pathlib import Path

import masdsl
from masdsl.config import resolve_config
from masdsl.runtime.inputs import prepare
from masdsl.runtime.executor import rollout
from tests.support.rollout_plans import plan_of
from tests.support.paths import ADDER_DIR

RUNTIME_DATA = ADDER_DIR
RUNTIME_TOY = RUNTIME_DATA / "toy.mas"


def sampled_toy() -> masdsl.Workflow:
    """The runtime toy with temperature 1 and 12 tokens per reply, so candidates differ."""
    text = RUNTIME_TOY.read_text().replace("  sample { max_tokens: 16 }\n", "  sample { temperature: 1.0, max_tokens: 12 }\n")
    return masdsl.loads(text, name=str(RUNTIME_TOY), base_dir=RUNTIME_DATA)


def rollout_two_tasks(engine, wf, mode="train", samples=3, overrides=()):
    """A rollout of the first 2 train tasks, K `samples`, step 2, seed 7, on `engine` as policy `shared`."""
    cfg = resolve_config(wf.train, overrides=list(overrides))
    env, splits = prepare(wf, cfg.sandbox)
    return rollout(plan_of(wf, cfg, samples=samples, seed=7), env, splits["train"][:2], {"shared": engine},
                   mode=mode, step=2)
