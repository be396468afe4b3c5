"""`masdsl graph FILE [overrides...] [--config YAML]`: the turn graph (ascii | mermaid | dot | svg |
png), the AT-GRPO groups the trainer will form per (role, turn) for `train.samples` (K), and the
placement of `masdsl run` with this configuration: per policy its engine (kind, driver or Ray
actors, replicas, GPUs, tensor parallelism, sleep mode) and its learner (`masdsl.plan.placement`).

The configuration is resolved as `masdsl run` resolves it (defaults < `train { }` < `--config` <
overrides) and planned by the run's own pre-flight (`masdsl.plan.run_plan.resolve_run`), so the
policies table and the placement show the same models and a run's refusal is the same error
here; nothing starts. svg and png go through Graphviz's `dot` program.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path
from masdsl.commands import split_options
from masdsl.config import Config, resolve_config
from masdsl.errors import UserError
from masdsl.lang import graph as G
from masdsl.lang import load
from masdsl.lang.workflow import Workflow
from masdsl.plan.run_plan import resolve_run


class GraphvizMissing(UserError):
    pass


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("ascii", "mermaid", "dot", "svg", "png"), default=None)
    p.add_argument("-o", "--output", metavar="OUT", help="write the graph to OUT instead of stdout")
    p.add_argument("--samples", type=int, default=None, help="K for the groups table (default: train.samples or 4)")
    p.add_argument("--config", metavar="YAML", action="append", default=None,
                   help="a YAML config file layered under the overrides, for the placement (again for more: later wins)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a .mas file")
    _options(p)
    # REMAINDER so options may follow the overrides (`FILE runtime.ray=true --format dot`); split in main
    p.add_argument("overrides", nargs=argparse.REMAINDER,
                   help="dotted config overrides for the placement section, e.g. runtime.engine_replicas=2")


def text_sections(wf: Workflow, cfg: Config, samples: int | None) -> str:
    """The groups table and the placement section, as `masdsl graph` prints them under the graph."""
    plan = resolve_run(wf, cfg)
    table = G.groups_table(wf, cfg.train.samples if samples is None else samples, plan.policies)
    return table + "\nplacement of `masdsl run` (engines and learners per policy):\n" + "\n".join(
        "  " + line for line in plan.placement.lines())


def render_image(dot_text: str, fmt: str) -> bytes:
    """Run Graphviz `dot -T{fmt}`; a clear error when it is not installed."""
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizMissing("Graphviz `dot` is not installed, so svg/png cannot be drawn; install it "
                              "(`apt-get install graphviz`, or run scripts/setup.sh) or use --format dot|mermaid|ascii")
    proc = subprocess.run([exe, f"-T{fmt}"], input=dot_text.encode(), capture_output=True, timeout=60)
    if proc.returncode != 0:
        raise UserError(f"Graphviz `dot` failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def main(args) -> int:
    split_options(args, "masdsl graph", _options, ("format", "output", "samples", "config"))
    args.format = args.format or "ascii"
    wf = load(args.file)
    table = text_sections(wf, resolve_config(wf.train, args.config, args.overrides), args.samples)
    if args.format == "ascii":
        out: str | bytes = G.to_ascii(wf) + "\n\n" + table + "\n"
    elif args.format == "mermaid":
        out = G.to_mermaid(wf) + "".join(f"%% {line}\n" for line in table.splitlines())
    elif args.format == "dot":
        out = G.to_dot(wf) + "".join(f"// {line}\n" for line in table.splitlines())
    else:
        out = render_image(G.to_dot(wf), args.format)
    if args.output:
        path = Path(args.output)
        try:
            if isinstance(out, bytes):
                path.write_bytes(out)
            else:
                path.write_text(out, encoding="utf-8")
        except OSError as exc:
            raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None
        print(f"wrote {path}")
        if args.format in ("svg", "png"):
            print(table)
    elif isinstance(out, bytes) and args.format == "png":
        raise UserError("--format png writes binary data: give a file with -o OUT")
    else:
        sys.stdout.write(out.decode() if isinstance(out, bytes) else out)
    return 0
