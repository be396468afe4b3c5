"""`masdsl` command line: check | graph | run | eval | trace.

Each subcommand lives in `masdsl/commands/<name>.py` with `add_arguments(parser)` and
`main(args) -> int`, imported only when used so `masdsl check` never pays for torch.
Exit status: 0 ok, 2 user error, 3 internal error (a bug in masdsl).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from masdsl.errors import UserError

COMMANDS = {
    "check": "parse and validate .mas files; errors with file:line:col",
    "graph": "show the turn graph and the AT-GRPO groups it forms",
    "run": "train a workflow with AT-GRPO (rollout -> group -> update -> sync)",
    "eval": "roll out a workflow on its eval split and report metrics by role and turn",
    "trace": "print readable transcripts of a run's episodes",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="masdsl", description="Multi-agent LLM workflows trained with AT-GRPO.")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks for internal errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        try:
            module = importlib.import_module(f"masdsl.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"masdsl.commands.{name}":
                raise
            continue
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    if not hasattr(args, "_module"):
        print(f"masdsl: `{args.command}` is not available in this build", file=sys.stderr)
        return 3
    try:
        return int(args._module.main(args) or 0)
    except UserError as exc:
        print(exc.render(color=sys.stderr.isatty()), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("masdsl: interrupted", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001 - the last line of defence: never a raw traceback
        if getattr(args, "debug", False):
            traceback.print_exc()
        else:
            exc = sys.exc_info()[1]
            print(f"internal error: {type(exc).__name__}: {exc}\nthis is a bug in masdsl; rerun with --debug for the traceback", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
