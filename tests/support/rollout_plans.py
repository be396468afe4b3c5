"""A rollout's plan with its shape set: the executor reads the candidates per role step
(`train.samples`), the episodes per eval task (`train.eval_samples`) and the seed (`train.seed`)
from the plan, so a test that wants K candidates or seed 7 plans them."""

from __future__ import annotations

import copy

from masdsl.config import Config
from masdsl.lang.workflow import Workflow
from masdsl.plan.run_plan import RunPlan, resolve_rollout


def plan_of(wf: Workflow, cfg: Config, *, samples: int | None = None, seed: int = 0,
            repeats: int | None = None) -> RunPlan:
    """The rollout plan of `wf` under `cfg` with `train.samples=samples`, `train.seed=seed` and
    `train.eval_samples=repeats` (`cfg` itself is left as it was)."""
    cfg = copy.deepcopy(cfg)
    cfg.train.seed = int(seed)
    if samples is not None:
        cfg.train.samples = int(samples)
    if repeats is not None:
        cfg.train.eval_samples = int(repeats)
    return resolve_rollout(wf, cfg)
