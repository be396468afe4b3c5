"""`masdsl run FILE [overrides...] [--config YAML] [--resume RUN_DIR] [--dry-run] [-m]`: train with AT-GRPO.

Loads and checks the workflow, resolves the configuration (defaults < `train { }` <
`--config` < overrides), plans the run (`masdsl.plan.run_plan.resolve_run`: every mistake of the
configuration for this workflow, before any model loads; `--dry-run` prints the resolved
configuration and the plan and stops there, exit 0), then runs
`masdsl.training.trainer.train` in a fresh run folder (`runs/<workflow>/<timestamp>/`) or, with
`--resume`, continues the newest complete checkpoint of an earlier run in its own folder
(the configuration saved with the checkpoint, plus any overrides given now, e.g. more
`train.steps`). Ends with a table: eval success before vs after, where the run, its
checkpoints and its MLflow record are (on stderr). `--json` also prints the summary
(`summary.json` plus `run_dir`) as one JSON document on stdout at the end.

A step that cannot be completed (an env call still failing after `runtime.env_retries`
retries, an engine actor that keeps dying) ends the command with exit status 2 and one line
naming the step, the role, task and error, the checkpoint saved from before that step, and
the `masdsl run FILE --resume RUN_DIR` that continues it (`masdsl.errors.StepFailed`). Ctrl-C
(SIGINT) prints the same command for the newest complete checkpoint, and exits 130; the resumed
run continues the same MLflow run (docs/tracking.md, "Resuming").

`--multirun` (`-m`, Hydra's flag) runs `masdsl sweep` on the same overrides instead.

This module is the light half (the arguments, the configuration, the plan, `--print-config`
and `--dry-run`: no torch); `masdsl.commands.run_body` trains the plan it hands over.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from masdsl.commands import sweep
from masdsl.commands import split_options as split
from masdsl.config import Config, check_names, resolve_config, to_yaml
from masdsl.errors import UserError
from masdsl.lang import load
from masdsl.lang.workflow import Workflow
from masdsl.plan.run_plan import RunPlan, resolve_run

BODY = "masdsl.commands.run_body"  # the trainer (torch): imported by the CLI once `prepare` accepted the run


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="YAML", action="append", default=None,
                   help="a YAML config file layered under the overrides (again for more: later wins)")
    p.add_argument("--print-config", action="store_const", const=True, default=None,
                   help="print the resolved configuration (YAML, every key) and exit: no model loads")
    p.add_argument("--cfg", choices=("job",), default=None, help="`--cfg job`: Hydra's spelling of --print-config")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue the run in RUN_DIR from its newest complete checkpoint")
    p.add_argument("--dry-run", action="store_const", const=True, default=None,
                   help="check and plan the run, print the resolved configuration and the placement, and exit: "
                        "nothing loads or starts")
    p.add_argument("--json", action="store_const", const=True, default=None,
                   help="print the run's summary (summary.json plus run_dir) as JSON on stdout at the end")
    p.add_argument("-m", "--multirun", action="store_const", const=True, default=None,
                   help="Hydra's spelling of `masdsl sweep`: `key=a,b` trains each value and compares them")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="the .mas workflow")
    _options(p)
    p.add_argument("overrides", nargs=argparse.REMAINDER, help="dotted config overrides, e.g. train.steps=50")


def split_options(args: argparse.Namespace) -> argparse.Namespace:
    """Options written among the overrides (`FILE a=1 --resume D`) move into `args`.

    >>> ns = argparse.Namespace(config=None, resume=None, overrides=["a=1", "--resume", "runs/x"])
    >>> split_options(ns).resume, ns.overrides
    ('runs/x', ['a=1'])
    """
    return split(args, "masdsl run", _options, ("config", "print_config", "cfg", "resume", "json", "dry_run",
                                                  "multirun"))


def resumed(path: str, workflow: Workflow) -> Path:
    """The checkpoint `--resume PATH` continues (PATH: a run folder or one checkpoint), checked
    against the workflow."""
    if not Path(path).exists():  # before torch's import: a mistyped path is answered at once
        raise UserError(f"{path}: no such run folder or checkpoint (--resume)")
    from masdsl.training import checkpoint  # heavy: torch, only for --resume (the checkpoint module saves tensors)

    ck = checkpoint.find(path)
    checkpoint.read_state(ck, workflow)  # a checkpoint of a workflow that meant something else: refuse early
    return ck


def resolve(args: argparse.Namespace, workflow: Workflow) -> tuple[Config, Path | None]:
    """The configuration, and for `--resume` the checkpoint folder."""
    if not args.resume:
        return resolve_config(workflow.train, args.config, args.overrides), None
    if args.config:
        raise UserError("--resume continues with the configuration saved in the checkpoint; "
                        "give changes as overrides (e.g. train.steps=20), not --config")
    ck = resumed(args.resume, workflow)
    return resolve_config(None, ck / "config.yaml", args.overrides), ck


def print_config(cfg: Config, workflow: Workflow) -> int:
    """`--print-config` (`--cfg job`): the resolved configuration as YAML on stdout, every key;
    its policy and role names checked against the workflow. No model loads, nothing starts."""
    check_names(cfg, workflow)
    print(to_yaml(cfg), end="", flush=True)
    return 0


def print_plan(cfg: Config, plan: RunPlan, checkpoint: Path | None) -> int:
    """`--dry-run`: the resolved configuration as YAML on stdout, then the plan as YAML comments
    (so the output still loads as a `--config` file). Nothing loads, nothing starts."""
    lines = ["masdsl run --dry-run: the run would start like this (nothing was loaded or started)"]
    if checkpoint is not None:
        lines.append(f"resuming from {checkpoint}")
    print(to_yaml(cfg), end="", flush=False)
    print("\n".join(f"# {line}" for line in [*lines, *plan.lines()]), flush=True)
    return 0


def multirun(args: argparse.Namespace) -> int:
    """`--multirun` (`-m`), as Hydra users type it: the same sweep as `masdsl sweep FILE OVERRIDES`
    (one seed, 0; `masdsl sweep --seeds` for more), with the run's `--config` files."""
    alone = [flag for flag, given in (("--resume", args.resume), ("--dry-run", args.dry_run),
                                      ("--print-config", args.print_config or args.cfg)) if given]
    if alone:
        raise UserError(f"masdsl run --multirun trains a sweep and cannot take {alone[0]}: "
                        f"run `masdsl run FILE {alone[0]} ...` with one value per key")
    given = {"config": args.config, "json": args.json}  # the run options a sweep shares; its own ones at their defaults
    return sweep.main(argparse.Namespace(file=args.file, overrides=args.overrides,
                                         **{name: given.get(name) for name in sweep.OPTIONS}))


@dataclass(frozen=True)
class Accepted:
    """What `prepare` hands the body: the plan to train, and the checkpoint it resumes (or None)."""

    plan: RunPlan
    checkpoint: Path | None


def prepare(args: argparse.Namespace) -> int | Accepted:
    """Everything before the first model: the workflow, the configuration and the plan, with every
    refusal; `--print-config`, `--dry-run` and `--multirun` end here (an exit status)."""
    split_options(args)
    if args.multirun:
        return multirun(args)
    workflow = load(args.file)
    cfg, ck = resolve(args, workflow)
    if args.print_config or args.cfg:
        return print_config(cfg, workflow)
    plan = resolve_run(workflow, cfg)
    if args.dry_run:
        return print_plan(cfg, plan, ck)
    return Accepted(plan, ck)
