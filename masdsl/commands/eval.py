"""`masdsl eval [FILE] [overrides] [--config Y] [--tasks N | --all] [--samples N] [--temperature T]
[--checkpoint RUN_DIR] [--json]`.

Loads and checks the workflow, resolves the configuration (defaults < `train { }` < `--config`
< overrides < these flags), builds the env and one engine per distinct model, runs the eval
split in evaluation mode (one candidate per step at `train.eval_temperature`) with a progress
bar, writes the run folder (records, graph, config, summary) and prints a table: success rate,
mean@N and pass@k, mean reward by role and turn, the shares of each role's replies cut by
`max_tokens` and whose parse failed, episodes, tokens generated, tokens/s, wall time. A role with
more than a fifth of its replies cut gets a warning naming its budget and the override that
raises it.

Greedy, one episode per task is the default. `--samples N` (`train.eval_samples`) runs N
independent episodes per task (distinct seeds, one batch) and reports mean@N and the unbiased
pass@k for k = 1, 2, 4, ... and N; it is meant with `--temperature T > 0`
(`train.eval_temperature`): greedy episodes of one task are identical (a warning says so).

`--checkpoint RUN_DIR` (or `RUN_DIR/checkpoints/step_N`) evaluates the run's trained policies
(without FILE: on the workflow the run folder keeps, `masdsl.runtime.run_files`):
they are exported to a temporary folder (`masdsl.training.export`, LoRA merged) and evaluated
as `policy.NAME.model=FOLDER`; the other settings come from the file and the overrides, as
without it. This light half plans both, once each: the evaluation from the file and the
overrides, and the checkpoint's trained policies from the configuration saved with it
(`masdsl.training.checkpoint_folder`). `--json` prints `{"workflow", "run_dir", "tasks", "checkpoint", "metrics"}` on stdout
(the progress bar and warnings stay on stderr). The evaluation itself is
`masdsl.training.evaluation.run_evaluation`, shared with `masdsl.evaluate`.

This module is the light half (the arguments, the configuration and the plans: no torch);
`masdsl.commands.eval_body` evaluates the plans it hands over.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from masdsl.commands import split_options as split
from masdsl.config import resolve_config
from masdsl.errors import UserError
from masdsl.lang import load
from masdsl.lang.workflow import Workflow
from masdsl.plan.run_plan import RunPlan, resolve_rollout
from masdsl.training.checkpoint_folder import (PlannedCheckpoint, checkpoint_config, checkpoint_of, find_checkpoint,
                                               run_workflow, trained_of)

BODY = "masdsl.commands.eval_body"  # the evaluation (engines, torch): imported by the CLI once the plan is made


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", default=None,
                   help="the .mas workflow (with --checkpoint RUN_DIR it may be left out: the run folder's copy)")
    _options(p)
    # REMAINDER so options may follow the overrides (`FILE a=1 --tasks 2 b=2`); split in main
    p.add_argument("overrides", nargs=argparse.REMAINDER, help="dotted config overrides, e.g. train.eval_temperature=0.7")


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="YAML", action="append", default=None,
                   help="a YAML config file layered under the overrides (again for more: later wins)")
    p.add_argument("--tasks", type=int, metavar="N", default=None,
                   help="evaluate the first N eval tasks (default: train.eval_tasks; 0: all)")
    p.add_argument("--all", action="store_const", const=True, default=None,
                   help="evaluate the whole eval split (same as --tasks 0)")
    p.add_argument("--samples", type=int, metavar="N", default=None,
                   help="N independent episodes per task: mean@N and pass@k (train.eval_samples; default 1)")
    p.add_argument("--temperature", type=float, metavar="T", default=None,
                   help="sampling temperature of every role (train.eval_temperature; default 0: greedy)")
    p.add_argument("--checkpoint", metavar="RUN_DIR", default=None,
                   help="evaluate the trained policies of a run (its newest checkpoint) or of one checkpoint folder")
    p.add_argument("--json", action="store_const", const=True, default=None,
                   help="print the metrics as JSON on stdout instead of the table")


def split_options(args: argparse.Namespace) -> argparse.Namespace:
    """Move options written among the overrides into `args`; anything else dash-led is an error.

    >>> ns = argparse.Namespace(config=None, tasks=None, all=None, samples=None, temperature=None, checkpoint=None,
    ...                         json=None, overrides=["a=1", "--tasks", "2", "b=2", "--samples", "4"])
    >>> split_options(ns).tasks, ns.samples, ns.overrides
    (2, 4, ['a=1', 'b=2'])
    """
    return split(args, "masdsl eval", _options, ("config", "tasks", "all", "samples", "temperature", "checkpoint", "json"))


def flag_overrides(args: argparse.Namespace) -> list[str]:
    """The config overrides the flags stand for (applied after the dotted ones: flags win).

    >>> flag_overrides(argparse.Namespace(tasks=None, all=True, samples=8, temperature=0.6))
    ['train.eval_tasks=0', 'train.eval_samples=8', 'train.eval_temperature=0.6']
    >>> flag_overrides(argparse.Namespace(tasks=3, all=True, samples=None, temperature=None))
    Traceback (most recent call last):
    ...
    masdsl.errors.UserError: --all and --tasks together: pick one (--all is --tasks 0)
    """
    out = []
    if getattr(args, "all", None):
        if args.tasks is not None:
            raise UserError("--all and --tasks together: pick one (--all is --tasks 0)")
        out.append("train.eval_tasks=0")
    if getattr(args, "samples", None) is not None:
        if args.samples < 1:
            raise UserError(f"--samples must be at least 1; got {args.samples}")
        out.append(f"train.eval_samples={args.samples}")
    if getattr(args, "temperature", None) is not None:
        if args.temperature < 0:
            raise UserError(f"--temperature must be at least 0; got {args.temperature}")
        out.append(f"train.eval_temperature={args.temperature}")
    return out


def table(workflow: Any, m: dict[str, float], run_dir: Any) -> Any:
    """The rich table of an eval run's metrics."""
    from rich.table import Table  # start-up: rich tables only when printing one

    t = Table(title=f"masdsl eval · {workflow.name}", caption=f"records: {run_dir}  ·  transcripts: masdsl trace {run_dir}")
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_row("success rate", f"{m['success/eval']:.3f}")
    for key, value in m.items():
        if key.startswith(("mean@", "pass@")):
            name, n = key.split("/")[0].split("@")
            t.add_row(f"{name}@{n}" + (" (unbiased estimator)" if name == "pass" else " (mean success over samples)"),
                      f"{value:.3f}")
    for key, value in m.items():
        parts = key.split("/")
        if parts[0] == "eval_reward" and len(parts) == 3:
            _, role, turn = parts
            t.add_row(f"mean reward · {role} · turn {turn.removeprefix('turn')}", f"{value:.4f}")
    for what, label in (("eval_cut", "replies cut at max_tokens"), ("eval_parse_fail", "replies whose parse failed")):
        for key, value in m.items():
            if key.startswith(f"{what}/"):
                t.add_row(f"{label} · {key.split('/', 1)[1]}", f"{100 * value:.1f} %")
    for label, value in judge_table_rows(m):
        t.add_row(label, value)
    t.add_row("episodes", f"{int(m['episodes'])}")
    t.add_row("  truncated by max_turns", f"{int(m['truncated_episodes'])}")
    t.add_row("tokens generated", f"{int(m['tokens_generated'])}")
    t.add_row("tokens/s", f"{m['tokens_per_s']:.1f}")
    t.add_row("wall time", f"{m['wall_s']:.1f} s (generate {m['gen_s']:.1f} s, env {m['env_s']:.1f} s)")
    if m["truncated_prompts"]:
        t.add_row("truncated prompts", f"{int(m['truncated_prompts'])}")
    if m["expression_errors"]:
        t.add_row("expression errors (scored 0)", f"{int(m['expression_errors'])}")
    return t


def judge_table_rows(m: dict[str, float]) -> list[tuple[str, str]]:
    """The judges' rows of the table: replies, their mean parsed score, those without a score
    (each scored the judge's default) and those that restated an equation; none without a judge.

    >>> judge_table_rows({"judge/calls": 8.0, "judge/score": 6.5, "judge/unparsed": 2.0, "judge/restated": 1.0})
    [('judge replies', '8'), ('  mean parsed score', '6.500'), ('  without a score (scored the default)', '2'), ('  restated an equation (see masdsl trace)', '1')]
    """
    if not m.get("judge/calls"):
        return []
    rows = [("judge replies", f"{int(m['judge/calls'])}")]
    if "judge/score" in m:
        rows.append(("  mean parsed score", f"{m['judge/score']:.3f}"))
    rows.append(("  without a score (scored the default)", f"{int(m.get('judge/unparsed', 0))}"))
    if m.get("judge/restated"):
        rows.append(("  restated an equation (see masdsl trace)", f"{int(m['judge/restated'])}"))
    return rows


def _workflow(args: argparse.Namespace) -> Workflow:
    """FILE's workflow; without FILE, with `--checkpoint RUN_DIR`, the workflow the run folder keeps
    (its hash-checked copies of the source and the files it reads: `masdsl.runtime.run_files`)."""
    if args.file is not None and "=" in args.file and not args.file.endswith(".mas"):
        args.overrides.insert(0, args.file)  # `eval --checkpoint RUN a=1`: argparse took the override for FILE
        args.file = None
    if args.file is not None:
        return load(args.file)
    if not args.checkpoint:
        raise UserError("masdsl eval: name the workflow file (masdsl eval FILE), or a run with --checkpoint RUN_DIR")
    return run_workflow(find_checkpoint(args.checkpoint).parent.parent)


@dataclass(frozen=True)
class Planned:
    """What the light half hands the body: the evaluation's plan, and with `--checkpoint` the
    checkpoint's (its trained policies, rebuilt from the configuration saved with them)."""

    plan: RunPlan
    checkpoint: PlannedCheckpoint | None = None


def prepare(args: argparse.Namespace) -> Planned:
    """The workflow, the configuration and the plans: names, ranges and engine options, and with
    `--checkpoint` the checkpoint's folder, workflow and configuration; every refusal before any
    model loads."""
    split_options(args)  # vLLM's logging: as quiet as `masdsl run` (vllm/environment.py), --verbose shows it
    workflow = _workflow(args)
    cfg = resolve_config(workflow.train, args.config, [*args.overrides, *flag_overrides(args)])
    plan = resolve_rollout(workflow, cfg)
    if args.tasks is not None and args.tasks < 0:
        raise UserError("--tasks must be 0 (all) or more")
    if not args.checkpoint:
        return Planned(plan)
    path = checkpoint_of(workflow, args.checkpoint)  # weights of a workflow that meant something else: refused
    trained = resolve_rollout(workflow, checkpoint_config(path)).with_policies(trained_of(workflow, path))
    return Planned(plan, PlannedCheckpoint(path, trained))
