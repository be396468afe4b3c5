"""`masdsl check FILE...`: parse and validate `.mas` files; errors with file:line:col.

Prints one line per valid file (`ok  workflows/x.mas  roles=2 edges=4 max_turns=4`) and every
diagnostic of the others (long rustc-style form, or `--format short`). Exit 0 when every file
is valid, 2 when any has errors. Warnings never change the exit status.
"""

from __future__ import annotations

import sys
from pathlib import Path


def add_arguments(p) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help=".mas files to check")
    p.add_argument("--format", choices=("long", "short"), default="long", help="diagnostic format (default long)")
    p.add_argument("--no-warnings", action="store_true", help="do not print warnings")


def summary(wf) -> str:
    turns = wf.max_turns if wf.max_turns is not None else "-"
    return f"roles={len(wf.roles)} edges={wf.graph.number_of_edges()} max_turns={turns}"


def check_one(path: str, fmt: str = "long", warnings: bool = True, color: bool = False) -> tuple[bool, str, str]:
    """(ok, stdout line, diagnostics text) for one file."""
    from masdsl.lang import analyze  # lazy: `masdsl --help` imports every command module
    from masdsl.lang.errors import render_all  # lazy: as above

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False, f"error  {path}  no such file", ""
    except (OSError, UnicodeDecodeError) as exc:
        return False, f"error  {path}  cannot read: {exc}", ""
    a = analyze(text, path, p.parent)
    shown = a.diagnostics if warnings else a.errors
    diags = render_all(shown, a.sources, color=color, fmt=fmt) if shown else ""
    if a.workflow is None:
        n = len(a.errors)
        return False, f"error  {path}  {n} error{'s' if n != 1 else ''}", diags
    w = len(a.warnings)
    tail = f"  ({w} warning{'s' if w != 1 else ''})" if w and warnings else ""
    return True, f"ok  {path}  {summary(a.workflow)}{tail}", diags


def main(args) -> int:
    color = sys.stderr.isatty()
    status = 0
    for path in args.files:
        ok, line, diags = check_one(path, args.format, not args.no_warnings, color)
        if diags:
            print(diags + ("\n" if args.format == "long" else ""), file=sys.stderr, flush=True)
        print(line, flush=True)
        status = status if ok else 2
    return status
