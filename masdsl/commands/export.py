"""`masdsl export RUN_DIR [--step N] [--out DIR] [--merge] [--workflow FILE]`: trained policies out of a run.

Per trained policy of the run's newest checkpoint (or of step N), a Hugging Face folder:
full weights as `save_pretrained` safetensors with the tokenizer, chat template and generation
config; a LoRA policy as a PEFT adapter folder, or with `--merge` its base with the adapter
merged in; each with a README.md model card (workflow, roles, steps, eval before/after).
Default out: `RUN_DIR/export/step_N/<policy>/`. The workflow is the one the run folder keeps:
its copies of the source and of every file it reads, checked against their sha256
(`masdsl.runtime.run_files`), so an export works after the originals moved or changed;
`--workflow FILE` names another (a run folder of an earlier version kept only `workflow.mas`).
See `masdsl.training.export`.

This module is the light half (the arguments, the workflow, the checkpoint and its plan, once:
its saved configuration, on the CPU, its trained policies; no torch); `masdsl.commands.export_body`
exports what it planned.
"""

from __future__ import annotations

import argparse

from masdsl.lang import load
from masdsl.plan.run_plan import resolve_rollout
from masdsl.training.checkpoint_folder import (PlannedCheckpoint, checkpoint_config, checkpoint_of, find_checkpoint,
                                               run_workflow, trained_of)

BODY = "masdsl.commands.export_body"  # the export (torch): imported by the CLI after `prepare`


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (runs/<workflow>/<timestamp>) or one checkpoint folder")
    p.add_argument("--step", type=int, metavar="N", default=None, help="the checkpoint of step N (default: the newest)")
    p.add_argument("--out", metavar="DIR", default=None, help="write DIR/<policy>/ (default: RUN_DIR/export/step_N/)")
    p.add_argument("--merge", action="store_true", help="LoRA policies: merge the adapter into full weights")
    p.add_argument("--workflow", metavar="FILE", default=None,
                   help="the .mas file the run trained (default: the run folder's own copy, files.json)")


def prepare(args: argparse.Namespace) -> PlannedCheckpoint:
    """The checkpoint (the newest, or `--step N`'s) and its plan, from the workflow `--workflow FILE`
    names or else the run folder's own copy; every refusal before torch."""
    workflow = load(args.workflow) if args.workflow else run_workflow(find_checkpoint(args.run_dir, args.step).parent.parent)
    path = checkpoint_of(workflow, args.run_dir, args.step)  # weights of a workflow that meant something else: refused
    return PlannedCheckpoint(path, resolve_rollout(workflow, checkpoint_config(path)).with_policies(trained_of(workflow, path)))
