"""`masdsl sweep FILE key=a,b other=x,y [--seeds 0,1,2] [--config YAML] [--name NAME]`: train every arm, compare.

The overrides use Hydra's basic-sweeper grammar: `key=a,b` takes each value in turn, other
overrides apply to every arm; the arms are the cartesian product, each trained on every seed
(`--seeds`, default 0). Each trial is an ordinary training run, run as a Ray task (one after
another on one machine, side by side on a cluster with room: `--trial-cpus`, `--trial-gpus`),
kept in `runs/<workflow>/sweeps/<name>/trials/`, and recorded in MLflow as a child of the
sweep's parent run, tagged with its overrides. At the end it prints the comparison (final and
best eval success, eval reward, non-flat share, wall time; mean over seeds with a 95 % interval)
and writes one curves image per metric, both also kept on the parent run. Run the same command
again to resume: finished trials are skipped (`masdsl.sweep.runner`).
"""

from __future__ import annotations

import argparse
import json

from masdsl.commands import output, split_options
from masdsl.sweep.grid import parse_seeds
from masdsl.sweep.runner import run_sweep


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", metavar="LIST", default=None, help="the seeds of every arm: 0,1,2 or 0-2 (default 0)")
    p.add_argument("--config", metavar="YAML", action="append", default=None,
                   help="a YAML config file under the overrides (may be given more than once)")
    p.add_argument("--name", metavar="NAME", default=None,
                   help="the sweep's name (default: a hash of the command, so the same command resumes)")
    p.add_argument("--out", metavar="DIR", default=None, help="the sweep folder (default runs/<workflow>/sweeps/<name>)")
    p.add_argument("--trial-cpus", type=float, metavar="N", default=None,
                   help="CPUs each trial asks Ray for (default: all of this machine's, so one at a time)")
    p.add_argument("--trial-gpus", type=float, metavar="N", default=None, help="GPUs each trial asks Ray for (default 0)")
    p.add_argument("--json", action="store_const", const=True, default=None,
                   help="print the comparison (one object per arm) as JSON on stdout instead of the table")


OPTIONS = ("seeds", "config", "name", "out", "trial_cpus", "trial_gpus", "json")  # the attributes `_options` sets


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="the .mas workflow")
    _options(p)
    p.add_argument("overrides", nargs=argparse.REMAINDER, help="dotted overrides; key=a,b sweeps over a and b")


def main(args: argparse.Namespace) -> int:
    split_options(args, "masdsl sweep", _options, OPTIONS)
    err = output.console(stderr=True, warnings_only=output.quiet())
    result = run_sweep(args.file, args.overrides, parse_seeds(args.seeds or "0"), configs=args.config or (),
                       name=args.name, out=args.out, trial_cpus=args.trial_cpus, trial_gpus=args.trial_gpus or 0.0,
                       say=lambda line: err.print(line, highlight=False, markup=False))
    if args.json:
        print(json.dumps(result.lines, indent=1))
    else:
        print(result.table, end="")
    err.print(f"comparison {result.folder / 'comparison.md'}, curves {result.folder / 'curves'}"
              + (f", MLflow parent run {result.parent_run_id}" if result.parent_run_id else ""),
              highlight=False, markup=False)
    return 0
