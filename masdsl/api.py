"""The Python API: what the CLI does, as functions (docs/api.md).

    result = masdsl.train("workflows/coder_tester.mas", ["train.steps=2"])      # -> TrainResult
    ev = masdsl.evaluate("workflows/coder_tester.mas", checkpoint=result.run_dir)  # -> EvalResult
    ro = masdsl.rollout(workflow, ["runtime.engine=hf"], tasks=2)                 # -> Rollout

`workflow` is a path to a `.mas` file, `.mas` text, or a loaded `Workflow`; `overrides` are the
dotted `key=value` strings of the command line; `config` is a YAML file (as `--config`) or a
`Config`. The configuration is layered as on the command line: defaults < the file's `train { }`
< `config` < `overrides`. Mistakes raise `masdsl.errors.UserError` subclasses before any model
loads. `train` and `evaluate` share their code with `masdsl run` and `masdsl eval`
(`masdsl.training.trainer.train`, `masdsl.training.evaluation.run_evaluation`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from masdsl.config import Config, check_names, resolve_config, to_yaml
from masdsl.errors import UserError
from masdsl.lang import load, loads
from masdsl.lang.workflow import Workflow
from masdsl.plan.run_plan import resolve_rollout, resolve_run
from masdsl.runtime.engine_factory import build_engines, close_engines
from masdsl.runtime.executor import Rollout
from masdsl.runtime.executor import rollout as _rollout
from masdsl.runtime.inputs import load_split, make_env
from masdsl.runtime.rundir import RunDir
from masdsl.training import checkpoint as ckpt
from masdsl.training.checkpoint_folder import PlannedCheckpoint, checkpoint_config, checkpoint_of, trained_of
from masdsl.training.evaluation import EvalResult, eval_tasks, run_evaluation
from masdsl.training.trainer import TrainResult
from masdsl.training.trainer import train as _train

__all__ = ["train", "evaluate", "rollout", "TrainResult", "EvalResult", "Rollout", "workflow_of", "config_of"]


def workflow_of(workflow: str | os.PathLike | Workflow) -> Workflow:
    """A `Workflow` from a path, `.mas` text (anything with a newline), or a `Workflow`."""
    if isinstance(workflow, Workflow):
        return workflow
    if isinstance(workflow, str) and "\n" in workflow:
        return loads(workflow)
    return load(workflow)


def config_of(workflow: Workflow, overrides: Sequence[str] = (), config: str | os.PathLike | Config | None = None) -> Config:
    """The configuration as the CLI layers it; `config` a YAML file or a `Config`."""
    if isinstance(overrides, str):
        overrides = [overrides]
    if isinstance(config, Config):
        with tempfile.TemporaryDirectory() as tmp:  # a complete Config replaces the defaults and train { }
            (Path(tmp) / "config.yaml").write_text(to_yaml(config))
            cfg = resolve_config(None, Path(tmp) / "config.yaml", list(overrides))
    else:
        cfg = resolve_config(workflow.train, config, list(overrides))
    check_names(cfg, workflow)
    return cfg


def train(workflow: str | os.PathLike | Workflow, overrides: Sequence[str] = (),
          config: str | os.PathLike | Config | None = None, run_dir: str | os.PathLike | None = None,
          resume: str | os.PathLike | None = None,
          on_step: Callable[[int, dict], None] | None = None) -> TrainResult:
    """Train with AT-GRPO, as `masdsl run`: a fresh run folder (`runtime.runs_dir/<workflow>/<time>`,
    or `run_dir`), or with `resume` the newest checkpoint of that run, continued in its folder
    with the checkpoint's configuration plus `overrides`. `on_step(step, metrics)` after each step."""
    wf = workflow_of(workflow)
    if resume is not None:
        if config is not None:
            raise UserError("resume continues with the checkpoint's configuration; pass changes as overrides")
        path = ckpt.find(resume)
        ckpt.read_state(path, wf)  # a checkpoint of a workflow that meant something else: refuse early
        cfg = config_of(wf, overrides, path / "config.yaml")
        run_dir = path.parent.parent
    else:
        path, cfg = None, config_of(wf, overrides, config)
    plan = resolve_run(wf, cfg)  # refuse what `masdsl run` refuses before the run folder is made
    return _train(plan, RunDir.open(plan, run_dir), resume=path, on_step=on_step)


def evaluate(workflow: str | os.PathLike | Workflow, overrides: Sequence[str] = (), tasks: int | None = None,
             checkpoint: str | os.PathLike | None = None,
             config: str | os.PathLike | Config | None = None) -> EvalResult:
    """Evaluate on the eval split, as `masdsl eval`: the first `tasks` tasks (default
    `train.eval_tasks`; 0: all); with `checkpoint` (a run folder or one checkpoint) the run's
    trained policies instead of the models the workflow names. Writes its own run folder."""
    wf = workflow_of(workflow)
    plan = resolve_rollout(wf, config_of(wf, overrides, config))
    trained = None
    if checkpoint is not None:  # the checkpoint's own plan, from the configuration saved with it
        path = checkpoint_of(wf, checkpoint)
        trained = PlannedCheckpoint(path, resolve_rollout(wf, checkpoint_config(path)).with_policies(trained_of(wf, path)))
    return run_evaluation(plan, eval_tasks(wf, plan.train, tasks), checkpoint=trained)


def rollout(workflow: str | os.PathLike | Workflow, overrides: Sequence[str] = (), split: str = "eval",
            tasks: int | Sequence[dict] | None = None,
            config: str | os.PathLike | Config | None = None) -> Rollout:
    """One episode per task in evaluation mode (one candidate per step at
    `train.eval_temperature`), nothing written: the records and episodes in memory.
    `tasks`: the first N tasks of `split`, or the task rows themselves (default: all of `split`)."""
    wf = workflow_of(workflow)
    plan = resolve_rollout(wf, config_of(wf, overrides, config))
    if tasks is None or isinstance(tasks, int):
        if split not in wf.data:
            raise UserError(f"workflow `{wf.name}` has no `data {split} ...` line; splits: {', '.join(wf.data)}")
        rows = load_split(wf, split)
        tasks = rows[:tasks] if tasks else rows
    env = make_env(wf, plan.sandbox)
    engines = build_engines(plan)
    try:
        return _rollout(plan, env, list(tasks), engines, mode="eval", step=-1)
    finally:
        close_engines(engines)
