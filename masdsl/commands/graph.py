"""`masdsl graph FILE`: the turn graph (ascii | mermaid | dot | svg | png) and the AT-GRPO
groups the trainer will form per (role, turn) for the file's `train.samples` (K).

svg and png go through Graphviz's `dot` program.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from masdsl.errors import UserError


class GraphvizMissing(UserError):
    pass


def add_arguments(p) -> None:
    p.add_argument("file", metavar="FILE", help="a .mas file")
    p.add_argument("--format", choices=("ascii", "mermaid", "dot", "svg", "png"), default="ascii")
    p.add_argument("-o", "--output", metavar="OUT", help="write the graph to OUT instead of stdout")
    p.add_argument("--samples", type=int, default=None, help="K for the groups table (default: train.samples or 4)")


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
    from masdsl.lang import load  # lazy: `masdsl --help` imports every command module
    from masdsl.lang import graph as G  # lazy: as above

    wf = load(args.file)
    table = G.groups_table(wf, args.samples)
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
