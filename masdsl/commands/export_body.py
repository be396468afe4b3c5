"""The body of `masdsl export` (`masdsl.commands.export` is its light half): write the trained
policies of the checkpoint it planned (`masdsl.training.export.export_checkpoint`).

Imported by the CLI only once the arguments were checked: it imports torch.
"""

from __future__ import annotations

import argparse
import contextlib

from masdsl.commands import output
from masdsl.training.checkpoint_folder import PlannedCheckpoint
from masdsl.training.export import export_checkpoint


def main(args: argparse.Namespace, checkpoint: PlannedCheckpoint) -> int:
    status = contextlib.nullcontext() if output.quiet() else output.console(stderr=True).status("exporting ...")
    with status:
        done = export_checkpoint(checkpoint, args.out, merge=args.merge)
    for name, folder in done.items():
        print(f"policy {name} -> {folder}")
    return 0
