"""`masdsl fmt [--check] [--diff] FILE|DIR|-...`: rewrite `.mas` files in the one canonical layout.

The layout and its guarantees (comments kept, idempotent, the parse tree unchanged) are
described in `masdsl/lang/format.py`. Each argument is a `.mas` file, a folder (every `*.mas`
file under it, in sorted order, skipping hidden folders such as `.git` and `.venv`) or `-`
(stdin; the formatted text goes to stdout, nothing is written).

- default: every file that changes is rewritten and named (`formatted  x.mas`);
- `--check`: nothing is written, the files that would change are listed (`would reformat  x.mas`)
  and the exit status is 1 if there are any;
- `--diff`: nothing is written, a unified diff of each file that would change goes to stdout
  (exit 0; with `--check` also 1 if any would change).

A file that does not parse is reported on stderr and left alone (exit 2).
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import Iterator

from masdsl.errors import UserError
from masdsl.lang.format import FormatError, format_text

STDIN = "-"


def add_arguments(p) -> None:
    p.add_argument("files", nargs="+", metavar="FILE",
                   help=".mas files to format in place, folders (every *.mas under them), or - (stdin to stdout)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if any file would change")
    p.add_argument("--diff", action="store_true", help="write nothing; print a unified diff of what would change")


def expand(paths: list[str]) -> Iterator[str]:
    """The files to format: each argument, a folder's `*.mas` files (not in hidden folders), `-`."""
    for path in paths:
        p = Path(path)
        if path == STDIN or not p.is_dir():
            yield path
            continue
        found = sorted(f for f in p.rglob("*.mas") if f.is_file()
                       and not any(part.startswith(".") for part in f.relative_to(p).parts[:-1]))
        if not found:
            print(f"note  {path}  no .mas files in this folder", file=sys.stderr)
        yield from (str(f) for f in found)


def unified_diff(before: str, after: str, path: str) -> str:
    """`diff -u` of one file's text before and after formatting.

    >>> print(unified_diff("a\\n", "b\\n", "x.mas"), end="")
    --- x.mas
    +++ x.mas (formatted)
    @@ -1 +1 @@
    -a
    +b
    """
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=path, tofile=f"{path} (formatted)")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _read(path: str) -> str:
    if path == STDIN:
        return sys.stdin.read()
    return Path(path).read_text(encoding="utf-8")


def format_one(path: str, args) -> bool | None:
    """Format one file (or stdin) as the flags say: whether it changes, None if it failed."""
    name = "<stdin>" if path == STDIN else path
    try:
        text = _read(path)
        out = format_text(text)
    except FileNotFoundError:
        print(f"error  {name}  no such file", file=sys.stderr)
        return None
    except (OSError, UnicodeDecodeError) as exc:
        print(f"error  {name}  cannot read: {exc}", file=sys.stderr)
        return None
    except FormatError as exc:
        print(f"error  {name}  {exc}", file=sys.stderr)
        return None
    changed = out != text
    if args.diff:
        if changed:
            sys.stdout.write(unified_diff(text, out, name))
    elif path == STDIN and not args.check:
        sys.stdout.write(out)
    elif changed and args.check:
        print(f"would reformat  {name}")
    elif changed:
        Path(path).write_text(out, encoding="utf-8")
        print(f"formatted  {path}")
    return changed


def main(args) -> int:
    if args.files.count(STDIN) > 1:
        raise UserError("masdsl fmt: `-` (stdin) may be given once")
    results = [format_one(path, args) for path in expand(args.files)]
    if None in results:
        return 2
    changed = sum(1 for r in results if r)
    if args.check and changed:
        print(f"{changed} file{'s' if changed != 1 else ''} would be reformatted; run `masdsl fmt FILE...`",
              file=sys.stderr)
        return 1
    return 0
