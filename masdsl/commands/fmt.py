"""`masdsl fmt [--check] FILE...`: rewrite `.mas` files in the one canonical layout.

The layout and its guarantees (comments kept, idempotent, the parse tree unchanged) are
described in `masdsl/lang/format.py`. Without `--check` every file that changes is rewritten
and named (`formatted  x.mas`); with `--check` nothing is written, the files that would change
are listed (`would reformat  x.mas`) and the exit status is 1 if there are any. A file that
does not parse is reported and left alone (exit 2).
"""

from __future__ import annotations

import sys
from pathlib import Path


def add_arguments(p) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help=".mas files to format in place")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if any file would change")


def main(args) -> int:
    from masdsl.lang.format import FormatError, format_text  # lazy: `masdsl --help` imports every command

    changed, failed = [], False
    for path in args.files:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
            out = format_text(text)
        except (OSError, UnicodeDecodeError) as exc:
            print(f"error  {path}  cannot read: {exc}", file=sys.stderr)
            failed = True
            continue
        except FormatError as exc:
            print(f"error  {path}  {exc}", file=sys.stderr)
            failed = True
            continue
        if out == text:
            continue
        changed.append(path)
        if args.check:
            print(f"would reformat  {path}")
        else:
            p.write_text(out, encoding="utf-8")
            print(f"formatted  {path}")
    if failed:
        return 2
    if args.check and changed:
        print(f"{len(changed)} file{'s' if len(changed) != 1 else ''} would be reformatted; run `masdsl fmt FILE...`",
              file=sys.stderr)
        return 1
    return 0
