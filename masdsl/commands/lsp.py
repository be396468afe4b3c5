"""`masdsl lsp`: the language server for `.mas` files, on stdin/stdout (see docs/editors.md).

Diagnostics as you type, hover, go to definition, completion, document symbols and rename of
roles and policies. Needs the `lsp` extra: `pip install 'masdsl[lsp]'` (pygls).
"""

from __future__ import annotations

import logging

from masdsl.errors import UserError


def add_arguments(p) -> None:
    p.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (the default and only transport)")
    p.add_argument("--log-file", metavar="PATH", help="write the server's log (timings of each check) to PATH")


def main(args) -> int:
    if args.log_file:
        logging.basicConfig(filename=args.log_file, level=logging.DEBUG)
    try:
        from masdsl.lsp.server import main as serve  # lazy: pygls is an optional extra (see below)
    except ModuleNotFoundError as exc:
        if exc.name not in ("pygls", "lsprotocol"):
            raise
        raise _MissingExtra("`masdsl lsp` needs pygls: pip install 'masdsl[lsp]'") from None
    serve()
    return 0


class _MissingExtra(UserError):
    """The `lsp` extra is not installed."""
