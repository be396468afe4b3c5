"""`masdsl completion bash|zsh|fish`: print a shell completion script (made by `shtab`).

The script completes the commands, every command's flags and their choices, `.mas` files where
a command takes a workflow, and folders where it takes a run folder. Install it once:

    masdsl completion bash > ~/.local/share/bash-completion/completions/masdsl
    masdsl completion zsh > "${fpath[1]}/_masdsl"         # any folder on $fpath
    masdsl completion fish > ~/.config/fish/completions/masdsl.fish

The parser it reads is the CLI's own (`masdsl.cli.build_parser`, with every command's
arguments: the CLI hands it over as `args._root_parser`), so the script never falls behind.
"""

from __future__ import annotations

import argparse
from typing import Any

from masdsl.errors import UserError

SHELLS = ("bash", "zsh", "fish")
WORKFLOW_ARGS = ("file", "files")  # positionals that name .mas files
FOLDER_ARGS = ("run_dir",)  # positionals that name a run folder


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=SHELLS, help="the shell to complete for")


def _walk(parser: argparse.ArgumentParser):
    """`parser` and every parser under it (the commands' sub-parsers)."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases: one parser, several names
                yield from _walk(sub)


def mark_paths(parser: argparse.ArgumentParser, shtab: Any) -> argparse.ArgumentParser:
    """Tell shtab which positionals are `.mas` files and which are folders."""
    mas, folder = shtab.FILE, shtab.DIRECTORY
    if hasattr(shtab, "glob"):
        mas = shtab.glob("*.mas")  # shtab >= 1.8: complete .mas files (and folders to walk into)
    for p in _walk(parser):
        for action in p._actions:
            if action.option_strings:
                if action.dest in ("config",):
                    action.complete = shtab.FILE
                elif action.dest in ("resume", "checkpoint", "out"):
                    action.complete = folder
                continue
            if action.dest in WORKFLOW_ARGS:
                action.complete = mas
            elif action.dest in FOLDER_ARGS:
                action.complete = folder
    return parser


def main(args: argparse.Namespace) -> int:
    try:
        import shtab  # start-up: only this command needs it
    except ImportError as exc:  # a virtual env made before shtab became a dependency
        raise UserError(f"masdsl completion needs shtab ({exc}): pip install 'shtab==1.13.0'") from exc

    parser = getattr(args, "_root_parser", None)
    if parser is None:  # called without `masdsl.cli.main`
        raise RuntimeError("masdsl completion needs the CLI's parser (args._root_parser)")
    print(shtab.complete(mark_paths(parser, shtab), shell=args.shell))
    return 0
