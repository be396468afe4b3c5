"""The shape of a rollout, decided by the plan: candidates per role step and episodes per task.

Training: the grouping decides (`ROLLOUTS`). "tree": K candidates of every (task, role, turn),
the best continues (the paper's tree sampling); "episodes": K independent episodes of every
task, one sample per step (vanilla GRPO), all in one lockstep batch. Evaluation: one candidate
per step, `train.eval_samples` independent episodes per task (mean@N, pass@k).
"""

from __future__ import annotations

from masdsl.config import GROUPINGS, TrainConfig

ROLLOUTS: dict[str, str] = {"at": "tree", "agent": "tree", "turn": "tree", "trajectory": "episodes"}
if tuple(ROLLOUTS) != GROUPINGS:
    raise ImportError(f"masdsl.config.GROUPINGS {GROUPINGS} != the groupings with a rollout {tuple(ROLLOUTS)}")


def rollout_shape(grouping: str, k: int) -> tuple[int, int]:
    """(candidates per role step, independent episodes per task) of `grouping`'s rollout, K = `k`.

    >>> rollout_shape("at", 4), rollout_shape("trajectory", 4)
    ((4, 1), (1, 4))
    """
    return (k, 1) if ROLLOUTS[grouping] == "tree" else (1, k)


def shape_of(train: TrainConfig, mode: str) -> tuple[int, int]:
    """(candidates per role step, episodes per task) of a `mode` rollout under `train`.

    >>> from masdsl.config import resolve_config
    >>> tc = resolve_config(overrides=["train.samples=3", "train.eval_samples=5"]).train
    >>> shape_of(tc, "train"), shape_of(tc, "eval")
    ((3, 1), (1, 5))
    """
    if mode == "train":
        return rollout_shape(train.grouping, max(1, int(train.samples)))
    return 1, int(train.eval_samples)
