"""Subcommands of the `masdsl` CLI; shared argument handling lives here.

Each command is `masdsl/commands/<name>.py` with `add_arguments(parser)` and `main(args)`,
importing what it uses at its top. A command that needs torch is split (docs/architecture.md,
"Light and body modules"): its light module names `BODY` and has `prepare(args)` (the arguments,
the plan and every refusal that needs no torch: an exit status, or what the body needs), and the
body module's `main(args, prepared)` does the rest; `masdsl.cli.run_command` imports the body only
when the command goes ahead.
"""

from __future__ import annotations

import argparse
from typing import Callable, Sequence

from masdsl.errors import UserError


def split_options(args: argparse.Namespace, prog: str, add_options: Callable[[argparse.ArgumentParser], None],
                  names: Sequence[str]) -> argparse.Namespace:
    """Move options written among the dotted overrides into `args`; any other dash-led word is an error.

    >>> def opts(p): p.add_argument("--tasks", type=int)
    >>> ns = argparse.Namespace(tasks=None, overrides=["a=1", "--tasks", "2", "b=2"])
    >>> split_options(ns, "masdsl eval", opts, ["tasks"]).tasks, ns.overrides
    (2, ['a=1', 'b=2'])
    """
    extra = argparse.ArgumentParser(prog=prog, add_help=False)
    add_options(extra)
    known, rest = extra.parse_known_args(args.overrides)
    for name in names:
        value, before = getattr(known, name), getattr(args, name, None)
        if value is not None:  # a repeatable option (`--config A FILE --config B`) keeps both
            setattr(args, name, before + value if isinstance(value, list) and isinstance(before, list) else value)
    unknown = [r for r in rest if r.startswith("-")]
    if unknown:
        raise UserError(f"{prog}: unknown option `{unknown[0]}` (see `{prog} --help`)")
    args.overrides = rest
    return args
