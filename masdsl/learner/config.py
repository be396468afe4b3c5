"""Checks of the training configuration against a workflow, run before any model loads.

`masdsl.config.TrainConfig` holds the knobs and `masdsl.config.CHOICES` the allowed values of
the string ones (checked when the config resolves). `problems` checks the numeric ranges,
`validate` adds the cross-field checks that need the workflow.

>>> from masdsl.config import resolve_config
>>> problems(resolve_config(overrides=["train.clip_eps=1.5"]).train)
['`train.clip_eps` must be in (0, 1); got 1.5']
>>> problems(resolve_config().train)
[]
"""

from __future__ import annotations

from masdsl.config import LOSSES, Config, ConfigError, TrainConfig
from masdsl.lang.workflow import Workflow
from masdsl.runtime.placement import engine_problems
from masdsl.runtime.session import effective_policies


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


def validate(workflow: Workflow, cfg: Config) -> None:
    """Raise one ConfigError listing every problem of `cfg` for `workflow` (no models loaded)."""
    specs = effective_policies(workflow, cfg)  # raises on unknown role/policy names and lora keys
    errors = problems(cfg.train) + engine_problems(cfg)
    if cfg.runtime.learner_workers < 0:
        errors.append(f"`runtime.learner_workers` must be >= 0 (0: train in the driver); got {cfg.runtime.learner_workers}")
    if cfg.runtime.learner_fsdp and cfg.runtime.learner_workers < 1:
        errors.append("`runtime.learner_fsdp=true` shards the learner over its workers: set `runtime.learner_workers` >= 1")
    lora = [n for n, s in specs.items() if s.lora and not s.frozen and workflow.roles_of_policy(n)]
    if cfg.runtime.learner_workers > 0 and lora:
        errors.append(f"`runtime.learner_workers` trains full policies only; LoRA polic{'ies' if len(lora) > 1 else 'y'} "
                      f"{', '.join(lora)} would need the driver: set `runtime.learner_workers=0`")
    if all(s.frozen or not workflow.roles_of_policy(n) for n, s in specs.items()):
        errors.append("every policy is frozen (or has no role): `masdsl run` would train nothing; use `masdsl eval`")
    for name in ("train", "eval"):
        if name not in workflow.data:
            errors.append(f"workflow `{workflow.name}` has no `data {name} ...` line; training needs both splits")
    if errors:
        raise ConfigError("\n".join(errors) if len(errors) == 1 else "invalid configuration:\n  - " + "\n  - ".join(errors))

