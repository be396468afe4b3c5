"""The body of `masdsl export` (`masdsl.commands.export` is its light half): write the run's
trained policies (`masdsl.training.export.export_run`).

Imported by the CLI only once the arguments were checked: it imports torch.
"""

from __future__ import annotations

import argparse
import contextlib

from masdsl.commands import output
from masdsl.lang.workflow import Workflow
from masdsl.training.export import export_run


def main(args: argparse.Namespace, workflow: Workflow | None) -> int:
    status = contextlib.nullcontext() if output.quiet() else output.console(stderr=True).status("exporting ...")
    with status:
        done = export_run(args.run_dir, workflow=workflow, step=args.step, out=args.out, merge=args.merge)
    for name, folder in done.items():
        print(f"policy {name} -> {folder}")
    return 0
