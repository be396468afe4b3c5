"""The body of `masdsl run` (`masdsl.commands.run` is its light half): train the plan the light
half accepted, in a fresh run folder or the resumed run's own (the trainer writes `summary.json` there).

Imported by the CLI only once the run goes ahead: it imports the trainer, hence torch.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from masdsl.commands import output
from masdsl.commands.run import Accepted
from masdsl.runtime.rundir import RunDir
from masdsl.training import checkpoint
from masdsl.training.trainer import train


def resume_hint(args: argparse.Namespace, run_dir: str | Path) -> str:
    """What Ctrl-C prints: the exact command that continues the run from its newest complete
    checkpoint (the overrides given now again: the checkpoint may predate them), or that none was
    saved yet."""
    given = " ".join(shlex.quote(o) for o in args.overrides)
    last = checkpoint.latest(run_dir)
    if last is None:  # nothing to resume: the same command again (with its --config files)
        configs = "".join(f" --config {shlex.quote(c)}" for c in args.config or ())
        return (f"masdsl: interrupted before the first checkpoint of {run_dir} (train.checkpoint_every); "
                f"start again with: masdsl run {shlex.quote(args.file)}{configs}" + (f" {given}" if given else ""))
    return (f"masdsl: interrupted; {last.name} is saved; continue with: masdsl run {shlex.quote(args.file)} "
            f"--resume {shlex.quote(str(run_dir))}" + (f" {given}" if given else ""))


def main(args: argparse.Namespace, accepted: Accepted) -> int:
    plan, ck = accepted.plan, accepted.checkpoint
    folder = RunDir.open(plan, ck.parent.parent if ck is not None else None)  # fresh, or the resumed run's own
    run_dir = folder.path
    err = output.console(stderr=True, warnings_only=output.quiet())  # -q: the warnings and the final table only
    err.print(f"run folder {run_dir}", highlight=False, markup=False)
    try:
        result = train(plan, folder, resume=ck, console=err)
    except KeyboardInterrupt:  # the trainer has closed its engines and marked the MLflow run KILLED
        print(resume_hint(args, run_dir), file=sys.stderr, flush=True)
        raise
    if getattr(args, "json", None):
        print(json.dumps({"run_dir": str(run_dir), **result.summary()}, indent=2), flush=True)
    return 0
