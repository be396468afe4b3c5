"""`masdsl export RUN_DIR [--step N] [--out DIR] [--merge] [--workflow FILE]`: trained policies out of a run.

Per trained policy of the run's newest checkpoint (or of step N), a Hugging Face folder:
full weights as `save_pretrained` safetensors with the tokenizer, chat template and generation
config; a LoRA policy as a PEFT adapter folder, or with `--merge` its base with the adapter
merged in; each with a README.md model card (workflow, roles, steps, eval before/after).
Default out: `RUN_DIR/export/step_N/<policy>/`. The workflow is the one the run folder keeps:
its copies of the source and of every file it reads, checked against their sha256
(`masdsl.runtime.run_files`), so an export works after the originals moved or changed;
`--workflow FILE` names another (a run folder of an earlier version kept only `workflow.mas`).
See `masdsl.learner.export`.
"""

from __future__ import annotations

import argparse
import contextlib

from masdsl.commands import output


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (runs/<workflow>/<timestamp>) or one checkpoint folder")
    p.add_argument("--step", type=int, metavar="N", default=None, help="the checkpoint of step N (default: the newest)")
    p.add_argument("--out", metavar="DIR", default=None, help="write DIR/<policy>/ (default: RUN_DIR/export/step_N/)")
    p.add_argument("--merge", action="store_true", help="LoRA policies: merge the adapter into full weights")
    p.add_argument("--workflow", metavar="FILE", default=None,
                   help="the .mas file the run trained (default: the run folder's own copy, files.json)")


def main(args: argparse.Namespace) -> int:
    import masdsl  # start-up: the commands import what they use when they run
    from masdsl.learner.export import export_run

    workflow = masdsl.load(args.workflow) if args.workflow else None
    status = contextlib.nullcontext() if output.quiet() else output.console(stderr=True).status("exporting ...")
    with status:
        done = export_run(args.run_dir, workflow=workflow, step=args.step, out=args.out, merge=args.merge)
    for name, folder in done.items():
        print(f"policy {name} -> {folder}")
    return 0
