"""`masdsl warm-start FILE --out DIR [--roles R ...] [--tasks N] [--epochs N] [--lr X] [overrides...]`.

A short supervised warm start on the env's own demonstrations (`masdsl.training.warm_start`):
the roles' shared policy learns, for the last N train tasks, the reply the env knows to be good
at turn 0 (Plan-Path: the tool program, the planner's shortest path). Writes a Hugging Face
folder; train from it with `masdsl run FILE policy.<name>.model=DIR` (what `make run` does).
Use it when the base rates show every group flat (docs/performance.md `## base rates`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Any

from masdsl.commands import output, split_options
from masdsl.config import resolve_config
from masdsl.errors import UserError
from masdsl.lang import load
from masdsl.plan.run_plan import RunPlan, resolve_rollout
from masdsl.training.loglines import LogLines
from masdsl.training.warm_start import DEFAULT_LR, DEFAULT_TASKS, INFO_FILE, warm_start


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="DIR", default=None,
                   help="the model folder to write (default: runs/<workflow>/warm_start)")
    p.add_argument("--roles", nargs="+", metavar="ROLE", default=None,
                   help="the roles to demonstrate (default: every role the env has a demonstration for)")
    p.add_argument("--tasks", type=int, metavar="N", default=None, help=f"train tasks, from the end of the split (default {DEFAULT_TASKS})")
    p.add_argument("--epochs", type=int, metavar="N", default=None, help="passes over the demonstrations (default 1)")
    p.add_argument("--lr", type=float, metavar="X", default=None, help=f"AdamW learning rate (default {DEFAULT_LR})")
    p.add_argument("--seed", type=int, metavar="N", default=None, help="the order of the demonstrations (default 0)")
    p.add_argument("--force", action="store_const", const=True, default=None, help="overwrite DIR if it holds a warm start already")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="the .mas workflow")
    _options(p)
    p.add_argument("overrides", nargs=argparse.REMAINDER, help="dotted config overrides, e.g. policy.shared.model=NAME")


def _logged(plan: RunPlan, out: Path, run: dict[str, Any], err: Any) -> Any:
    """`warm_start` with its progress as plain lines: the loss in a heartbeat every 30 s, a line at the end."""
    lines, phase = LogLines(err), []

    def on_step(step: int, total: int, loss: float) -> None:
        if not phase:  # started at the first step: the checks before it may still refuse
            phase.append(lines.begin("warm start", total, unit="steps"))
        lines.advance(phase[0], step - phase[0].done, note=f"loss {loss:.3f}")

    with lines.live():
        return warm_start(plan, out, on_step=on_step, **run)


def main(args: argparse.Namespace) -> int:
    split_options(args, "masdsl warm-start", _options, ("out", "roles", "tasks", "epochs", "lr", "seed", "force"))
    workflow = load(args.file)
    plan = resolve_rollout(workflow, resolve_config(workflow.train, None, args.overrides))  # once, before any model
    out = Path(args.out or Path("runs") / workflow.name / "warm_start")
    if (out / INFO_FILE).exists() and not args.force:
        raise UserError(f"{out} holds a warm start already ({INFO_FILE}); give --force to overwrite it, "
                        f"or train from it: masdsl run {args.file} policy.<name>.model={out}")
    err = output.console(stderr=True)
    given = {"tasks": args.tasks, "epochs": args.epochs, "lr": args.lr, "seed": args.seed}  # None: not given
    defaults = {"tasks": DEFAULT_TASKS, "epochs": 1, "lr": DEFAULT_LR, "seed": 0}
    run = {"roles": args.roles, **{k: defaults[k] if v is None else v for k, v in given.items()}}
    if output.quiet():
        info = warm_start(plan, out, **run)
    elif not output.is_terminal(err.file):  # a log file: plain lines, a heartbeat while it runs (loglines.py)
        info = _logged(plan, out, run, err)
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # start-up

        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("steps"), TimeElapsedColumn())
        with contextlib.ExitStack() as stack:
            bar: list = []  # started at the first step: the checks before it may still refuse

            def on_step(step: int, total: int, loss: float) -> None:
                if not bar:
                    bar.append(stack.enter_context(Progress(*columns, console=err, transient=False)))
                    bar.append(bar[0].add_task("warm start", total=total))
                bar[0].update(bar[1], completed=step, description=f"warm start, loss {loss:.3f}")

            info = warm_start(plan, out, on_step=on_step, **run)
    policy = workflow.roles[info.roles[0]].policy
    err.print(f"warm start: {info.steps} steps on {info.tasks} tasks ({', '.join(info.roles)}), loss "
              f"{info.loss_first:.3f} -> {info.loss_last:.3f}, {info.wall_s:.0f} s -> {out}", highlight=False, markup=False)
    err.print(f"train from it: masdsl run {args.file} policy.{policy}.model={out}", highlight=False, markup=False)
    if output.quiet():
        print(json.dumps({"out": str(out), "policy": policy}))
    return 0
