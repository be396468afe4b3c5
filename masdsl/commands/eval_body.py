"""The body of `masdsl eval` (`masdsl.commands.eval` is its light half): evaluate the plans the
light half made, under a progress bar, and print the table (or `--json`).

Imported by the CLI only once the plan is made: it imports the evaluation, hence the engines and torch.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from masdsl.commands import output
from masdsl.commands.eval import Planned, table
from masdsl.config import PROBE_TABLE
from masdsl.plan.run_plan import RunPlan
from masdsl.sandbox import isolation_summary, limits_from_config
from masdsl.training.checkpoint_folder import PlannedCheckpoint
from masdsl.training.display import cut_warnings, judge_warning, role_budgets
from masdsl.training.evaluation import EvalResult, eval_tasks, greedy_repeats_warning, run_evaluation
from masdsl.training.loglines import LogLines


def main(args: argparse.Namespace, planned: Planned) -> int:
    plan = planned.plan
    err, out = output.console(stderr=True), output.console(stderr=False)
    tasks = eval_tasks(plan.workflow, plan.train, args.tasks)
    warning = greedy_repeats_warning(plan.train)
    if warning:
        err.print(warning, highlight=False, markup=False, soft_wrap=True)
    summary = None if output.quiet() else isolation_summary(limits_from_config(plan.sandbox))
    if summary:
        err.print(summary if summary.startswith("sandbox") else f"sandbox: {summary}", highlight=False, markup=False)
    result = _evaluate(plan, tasks, planned.checkpoint, err)
    for message, count in result.errors.items():
        err.print(f"warning: {message} ({count}x, scored 0)", highlight=False, markup=False)
    for line in cut_warnings(result.metrics, role_budgets(plan), what="eval_cut") + judge_warning(result.metrics):
        err.print(line, highlight=False, markup=False, soft_wrap=True)
    if args.json:
        print(json.dumps({"workflow": plan.workflow.name, "run_dir": str(result.run_dir), "tasks": result.tasks,
                          "checkpoint": str(result.checkpoint) if result.checkpoint else None,
                          "metrics": result.metrics}, indent=2))
    else:
        out.print(table(plan.workflow, result.metrics, result.run_dir))
    return 0


def _evaluate(plan: RunPlan, tasks: list[dict], checkpoint: PlannedCheckpoint | None, err: Any) -> EvalResult:
    """`run_evaluation` of the command's plans, under a progress bar on stderr."""
    if output.quiet():  # no progress bar, no status lines
        return run_evaluation(plan, tasks, checkpoint=checkpoint)
    if checkpoint:
        err.print(f"evaluating the trained policies of {checkpoint.path}", highlight=False, markup=False)
    tc = plan.train
    if tc.eval_probe != "none":  # the prompts differ from the plain evaluation's on purpose
        err.print(f"probe {tc.eval_probe}: evaluation prompts show `env.tool_output` {PROBE_TABLE[tc.eval_probe].shows}",
                  highlight=False, markup=False)
    err.print("loading models ...", highlight=False, markup=False)
    if not output.is_terminal(err.file):  # a log file: plain lines, a heartbeat while it runs (loglines.py)
        lines = LogLines(err)
        with lines.live():
            phase = lines.begin("eval", len(tasks) * tc.eval_samples)
            return run_evaluation(plan, tasks, checkpoint=checkpoint, progress=lambda k: lines.advance(phase, k))
    columns = (TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TextColumn("episodes"), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=False) as bar:
        job = bar.add_task("eval", total=len(tasks) * tc.eval_samples)
        return run_evaluation(plan, tasks, checkpoint=checkpoint, progress=lambda k: bar.advance(job, k))
