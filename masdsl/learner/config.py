"""Checks of the `train` section of the configuration alone, run before any model loads.

`masdsl.config.TrainConfig` holds the knobs and `masdsl.config.CHOICES` the allowed values of
the string ones (checked when the config resolves). `problems` checks the numeric ranges;
`masdsl.learner.plan.resolve_run` adds the checks that need the workflow and the runtime.

>>> from masdsl.config import resolve_config
>>> problems(resolve_config(overrides=["train.clip_eps=1.5"]).train)
['`train.clip_eps` must be in (0, 1); got 1.5']
>>> problems(resolve_config().train)
[]
"""

from __future__ import annotations

from masdsl.config import LOSSES, TrainConfig


def problems(tc: TrainConfig) -> list[str]:
    """Every problem with the `train` section alone (empty when it is valid)."""
    out = []
    if tc.loss not in LOSSES:
        out.append(f"`train.loss` must be one of {', '.join(LOSSES)}; got `{tc.loss}`")
    if not 0 < tc.clip_eps < 1:
        out.append(f"`train.clip_eps` must be in (0, 1); got {tc.clip_eps}")
    if tc.lr <= 0:
        out.append(f"`train.lr` must be positive; got {tc.lr}")
    for name in ("kl_coef", "weight_decay", "eval_every", "checkpoint_every", "eval_tasks"):
        if getattr(tc, name) < 0:
            out.append(f"`train.{name}` must be >= 0; got {getattr(tc, name)}")
    if tc.dual_clip != 0 and tc.dual_clip <= 1:
        out.append(f"`train.dual_clip` must be 0 (off) or greater than 1 (the paper uses 3); got {tc.dual_clip}")
    if tc.mini_batch_size < 0:
        out.append(f"`train.mini_batch_size` must be >= 0 (0: one optimizer step per rollout); got {tc.mini_batch_size}")
    if not 0 <= tc.drop_lowest_groups < 1:
        out.append(f"`train.drop_lowest_groups` must be in [0, 1); got {tc.drop_lowest_groups}")
    if tc.max_grad_norm <= 0:
        out.append(f"`train.max_grad_norm` must be positive; got {tc.max_grad_norm}")
    if tc.micro_batch_tokens < 1:
        out.append(f"`train.micro_batch_tokens` must be at least 1; got {tc.micro_batch_tokens}")
    if tc.grouping == "trajectory" and tc.samples < 2:
        out.append("`train.grouping=trajectory` needs `train.samples` >= 2 episodes per task to compare")
    return out
