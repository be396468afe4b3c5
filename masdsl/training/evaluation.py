"""Evaluation: the eval split, plain sampling, one metrics function for every caller.

`masdsl eval`, `masdsl.evaluate` (the Python API) and the evaluations of `masdsl run` compute
their numbers with the same `metrics.eval_metrics`.

- `run_evaluation`: a stand-alone evaluation, the one code path of `masdsl eval` and
  `masdsl.evaluate`: engines up, the rollout, records, metrics, summary and MLflow in a fresh
  run folder; with `checkpoint=` (a `PlannedCheckpoint` the caller planned) the checkpoint's
  trained policies are exported to a temporary folder (LoRA merged, `masdsl.training.export`)
  and evaluated as `policy.NAME.model=` (`RunPlan.with_policies`);
- `evaluate`: what the trainer does at a step (records in the run folder's `eval/`, MLflow
  metrics, a transcript);
- `greedy_repeats_warning`: the warning both commands print for greedy repeats.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from masdsl.config import TrainConfig
from masdsl.envs.base import Env
from masdsl.errors import UserError
from masdsl.lang.workflow import Workflow
from masdsl.plan.run_plan import RunPlan
from masdsl.runtime.backends.base import Engine
from masdsl.runtime.engine_factory import build_engines, close_engines
from masdsl.runtime.executor import Hooks, rollout
from masdsl.runtime.inputs import load_split, make_env
from masdsl.runtime.judge import judge_metrics
from masdsl.runtime.records import StepRecord
from masdsl.runtime.rundir import RunDir
from masdsl.tracking import Tracker, start_run
from masdsl.training.checkpoint_folder import PlannedCheckpoint
from masdsl.training.export import export_checkpoint
from masdsl.training.interrupt import deferred
from masdsl.training.metrics import eval_metrics, reply_counts
from masdsl.training.skills import SkillCounts, skill_counts
from masdsl.training.viewpage import log_view


@dataclass
class EvalResult:
    """What a stand-alone evaluation produced."""

    workflow: str
    metrics: dict[str, float]  # `metrics.eval_metrics`: success/eval, mean@N, pass@k, rewards by role and turn, ...
    run_dir: Path  # the evaluation's own run folder
    records: Path  # its records.jsonl (`masdsl trace RUN_DIR` reads it)
    tasks: int
    errors: dict[str, int] = field(default_factory=dict)  # expression errors (scored 0), by message
    checkpoint: Path | None = None  # the checkpoint whose weights were evaluated


def eval_tasks(workflow: Workflow, train: TrainConfig, n: int | None = None) -> list[dict]:
    """The first `n` tasks of the eval split (default `train.eval_tasks`; 0: all)."""
    if "eval" not in workflow.data:
        raise UserError(f"workflow `{workflow.name}` has no `data eval ...` line to evaluate on")
    n = train.eval_tasks if n is None else n
    if n < 0:
        raise UserError("the number of eval tasks must be 0 (all) or more")
    tasks = load_split(workflow, "eval")
    return tasks[:n] if n else tasks


def run_evaluation(plan: RunPlan, tasks: Sequence[dict] | None = None, *,
                   checkpoint: PlannedCheckpoint | None = None,
                   progress: Callable[[int], None] | None = None) -> EvalResult:
    """Evaluate the plan's workflow (its policies' models, or a checkpoint's trained weights) on
    `tasks` (default: `eval_tasks`): `train.eval_samples` episodes per task at
    `train.eval_temperature`. The caller resolved `plan` (`masdsl.plan.run_plan.resolve_rollout`)
    and the checkpoint's plan (`masdsl.training.checkpoint_folder`), once each; the exported
    policies go into `plan` with `RunPlan.with_policies(models=...)`."""
    tasks = eval_tasks(plan.workflow, plan.train) if tasks is None else list(tasks)
    if checkpoint is None:
        return _evaluate_models(plan, tasks, progress, None)
    with tempfile.TemporaryDirectory(prefix="masdsl-eval-") as tmp:
        exported = export_checkpoint(checkpoint, tmp, merge=True)
        return _evaluate_models(plan.with_policies(models=exported), tasks, progress, checkpoint.path)


def _evaluate_models(plan: RunPlan, tasks: list[dict], progress: Callable[[int], None] | None,
                     checkpoint: Path | None) -> EvalResult:
    """Engines up, the eval rollout, records and metrics saved, engines down."""
    workflow = plan.workflow
    env = make_env(workflow, plan.sandbox)
    engines = build_engines(plan)
    tc, tracker = plan.train, None
    try:
        run_dir = RunDir.open(plan)
        tracker = start_run(workflow, plan.record(), kind="eval", run_dir=run_dir.path)
        replies: dict[str, list[int]] = {}  # role -> replies, cut, parse failed: the records go to disk
        skills: SkillCounts = {}

        def stream(records: list[StepRecord]) -> None:
            run_dir.write_records(records)
            reply_counts(records, replies)
            skill_counts(records, skills)

        ro = rollout(plan, env, tasks, engines, mode="eval", step=-1,
                     hooks=Hooks(on_records=stream, progress=progress, keep_records=False))
    except BaseException as exc:
        if tracker is not None:  # never leave the MLflow run marked RUNNING
            tracker.finish("KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED")
        raise
    finally:
        close_engines(engines)
    m = eval_metrics(ro.records, ro.episodes, rollout=ro, replies=replies, skills=skills)
    run_dir.write_summary({"metrics": m, "errors": ro.errors, "workflow": workflow.name, "tasks": len(tasks),
                           "samples_per_task": tc.eval_samples, "temperature": tc.eval_temperature,
                           "probe": tc.eval_probe, "checkpoint": str(checkpoint) if checkpoint else None})
    tracker.log_metrics(m, step=0)
    tracker.log_artifact(run_dir.records_path, "records")
    log_view(run_dir.path, tracker, tc.grouping)  # the groups page, as the artifact view/view.html
    tracker.finish()
    return EvalResult(workflow.name, m, run_dir.path, run_dir.records_path, len(tasks), dict(ro.errors), checkpoint)


def evaluate(env: Env, tasks: Sequence[dict], engines: Mapping[str, Engine], plan: RunPlan,
             step: int, run_dir: RunDir, tracker: Tracker,
             progress: Callable[[int], None] | None = None) -> dict[str, float]:
    """Plain sampling (one candidate, `train.eval_temperature`) on the eval tasks, `train.eval_samples`
    independent episodes per task (mean@N and pass@k when N > 1)."""
    roll = rollout(plan, env, tasks, engines, mode="eval", step=step, hooks=Hooks(progress=progress))
    for r in roll.records:
        r.weights_step = step  # the engines were synced to this step's weights
    run_dir.write_evaluation(step, roll.records)
    result = {"step": step, **eval_metrics(roll.records, roll.episodes), "reward_errors/eval": float(roll.reward_errors),
              "env_lost/eval": float(roll.env_lost), **judge_metrics(roll, "/eval")}
    with deferred():  # an interrupt inside MLflow's store would leave it locked (training/interrupt.py)
        tracker.log_metrics({k: v for k, v in result.items() if k != "step"}, step=step)
        tracker.log_text(transcript(roll.records[:40]), f"traces/eval_step{step:06d}.md")
    return result


def greedy_repeats_warning(train: TrainConfig) -> str | None:
    """The warning for N > 1 episodes per task at temperature 0 (they would all be the same).

    >>> from masdsl.config import resolve_config
    >>> greedy_repeats_warning(resolve_config(overrides=["train.eval_samples=4"]).train)[:38]
    'warning: 4 samples per task at train.e'
    >>> greedy_repeats_warning(resolve_config(overrides=["train.eval_samples=4", "train.eval_temperature=0.6"]).train)
    """
    n, t = train.eval_samples, train.eval_temperature
    if n > 1 and t <= 0:
        return (f"warning: {n} samples per task at train.eval_temperature=0 (greedy) are {n} identical episodes; "
                "pass --temperature 0.6 (or set train.eval_temperature) for pass@k")
    return None


def transcript(records: Sequence[StepRecord]) -> str:
    """A readable transcript of evaluation episodes (markdown)."""
    lines = []
    for r in records:
        lines += [f"### task `{r.task_id}` · {r.role} · turn {r.turn} · reward {r.reward:.3f}",
                  "", "```", r.prompt_text.strip(), "```", "", "```", r.response_text.strip(), "```", ""]
    return "\n".join(lines)
