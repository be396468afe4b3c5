"""`masdsl run FILE [overrides...] [--config YAML] [--resume RUN_DIR] [--dry-run] [-m]`: train with AT-GRPO.

Loads and checks the workflow, resolves the configuration (defaults < `train { }` <
`--config` < overrides), plans the run (`masdsl.runtime.plan.resolve_run`: every mistake of the
configuration for this workflow, before any model loads; `--dry-run` prints the resolved
configuration and the plan and stops there, exit 0), then runs
`masdsl.learner.trainer.train` in a fresh run folder (`runs/<workflow>/<timestamp>/`) or, with
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
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from masdsl.commands import output
from masdsl.errors import UserError


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
    from masdsl.commands import split_options as split  # the package imports this module: not at the top

    return split(args, "masdsl run", _options, ("config", "print_config", "cfg", "resume", "json", "dry_run",
                                                  "multirun"))


def resume_dir(path: str) -> tuple[Path, Path]:
    """(run folder, checkpoint folder) for `--resume PATH` (a run folder or one checkpoint)."""
    if not Path(path).exists():  # before torch's import: a mistyped path is answered at once
        raise UserError(f"{path}: no such run folder or checkpoint (--resume)")
    from masdsl.learner import checkpoint  # start-up: the commands import what they use when they run

    ck = checkpoint.find(path)
    return ck.parent.parent, ck


def resolve(args: argparse.Namespace, workflow: Any) -> tuple[Any, Path | None, Path | None]:
    """The configuration, and for `--resume` the run and checkpoint folders."""
    from masdsl.config import resolve_config  # start-up: as above

    if not args.resume:
        return resolve_config(workflow.train, args.config, args.overrides), None, None
    if args.config:
        raise UserError("--resume continues with the configuration saved in the checkpoint; "
                        "give changes as overrides (e.g. train.steps=20), not --config")
    run_dir, ck = resume_dir(args.resume)
    from masdsl.learner import checkpoint  # start-up: torch, only for --resume (not for --print-config)

    checkpoint.read_state(ck, workflow)  # a checkpoint of a workflow that meant something else: refuse early
    cfg = resolve_config(None, ck / "config.yaml", args.overrides)
    return cfg, run_dir, ck


def resume_hint(args: argparse.Namespace, run_dir: str | Path) -> str:
    """What Ctrl-C prints: the exact command that continues the run from its newest complete
    checkpoint (the overrides given now again: the checkpoint may predate them), or that none was
    saved yet."""
    from masdsl.learner import checkpoint  # start-up: as above (torch is loaded by now)

    given = " ".join(shlex.quote(o) for o in args.overrides)
    last = checkpoint.latest(run_dir)
    if last is None:  # nothing to resume: the same command again (with its --config files)
        configs = "".join(f" --config {shlex.quote(c)}" for c in args.config or ())
        return (f"masdsl: interrupted before the first checkpoint of {run_dir} (train.checkpoint_every); "
                f"start again with: masdsl run {shlex.quote(args.file)}{configs}" + (f" {given}" if given else ""))
    return (f"masdsl: interrupted; {last.name} is saved; continue with: masdsl run {shlex.quote(args.file)} "
            f"--resume {shlex.quote(str(run_dir))}" + (f" {given}" if given else ""))


def print_config(cfg: Any, workflow: Any) -> int:
    """`--print-config` (`--cfg job`): the resolved configuration as YAML on stdout, every key;
    its policy and role names checked against the workflow. No model loads, nothing starts."""
    from masdsl.config import check_names, to_yaml  # start-up: as above

    check_names(cfg, workflow)
    print(to_yaml(cfg), end="", flush=True)
    return 0


def print_plan(cfg: Any, plan: Any, checkpoint: Path | None) -> int:
    """`--dry-run`: the resolved configuration as YAML on stdout, then the plan as YAML comments
    (so the output still loads as a `--config` file). Nothing loads, nothing starts."""
    from masdsl.config import to_yaml  # start-up: as above

    lines = ["masdsl run --dry-run: the run would start like this (nothing was loaded or started)"]
    if checkpoint is not None:
        lines.append(f"resuming from {checkpoint}")
    print(to_yaml(cfg), end="", flush=False)
    print("\n".join(f"# {line}" for line in [*lines, *plan.lines()]), flush=True)
    return 0


def multirun(args: argparse.Namespace) -> int:
    """`--multirun` (`-m`), as Hydra users type it: the same sweep as `masdsl sweep FILE OVERRIDES`
    (one seed, 0; `masdsl sweep --seeds` for more), with the run's `--config` files."""
    from masdsl.commands import sweep  # the package imports this module: not at the top

    alone = [flag for flag, given in (("--resume", args.resume), ("--dry-run", args.dry_run),
                                      ("--print-config", args.print_config or args.cfg)) if given]
    if alone:
        raise UserError(f"masdsl run --multirun trains a sweep and cannot take {alone[0]}: "
                        f"run `masdsl run FILE {alone[0]} ...` with one value per key")
    given = {"config": args.config, "json": args.json}  # the run options a sweep shares; its own ones at their defaults
    return sweep.main(argparse.Namespace(file=args.file, overrides=args.overrides,
                                         **{name: given.get(name) for name in sweep.OPTIONS}))


def main(args: argparse.Namespace) -> int:
    import masdsl  # start-up: as above

    err = output.console(stderr=True)
    split_options(args)
    if args.multirun:
        return multirun(args)
    workflow = masdsl.load(args.file)
    cfg, run_dir, ck = resolve(args, workflow)
    if args.print_config or args.cfg:
        return print_config(cfg, workflow)
    from masdsl.runtime.plan import resolve_run  # start-up: as above

    plan = resolve_run(workflow, cfg)
    if args.dry_run:
        return print_plan(cfg, plan, ck)
    from masdsl.learner.trainer import train  # start-up: the trainer's imports (torch), once a run goes ahead
    from masdsl.runtime.rundir import RunDir

    folder = RunDir.open(plan, run_dir)  # fresh, or the resumed run's own folder
    run_dir = folder.path
    if output.quiet():  # no progress bar or start-up lines: the warnings and the final table only
        err = output.console(stderr=True, warnings_only=True)
    err.print(f"run folder {run_dir}", highlight=False, markup=False)
    try:
        result = train(plan, run_dir=folder, resume=ck, console=err)
    except KeyboardInterrupt:  # the trainer has closed its engines and marked the MLflow run KILLED
        print(resume_hint(args, run_dir), file=sys.stderr, flush=True)
        raise
    summary = {
        "workflow": workflow.name, "steps": result.steps, "eval_before": result.eval_before,
        "eval_after": result.eval_after, "checkpoints": [str(p) for p in result.checkpoints],
        "mlflow_run_id": result.mlflow_run_id, "wall_s": round(result.wall_s, 2),
    }
    (Path(run_dir) / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if getattr(args, "json", None):
        print(json.dumps({"run_dir": str(run_dir), **summary}, indent=2), flush=True)
    return 0

