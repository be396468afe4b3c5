"""`masdsl new NAME [--env ENV] [--roles a,b]`: start a workflow that checks clean and trains.

Writes `NAME.mas` and `NAME_env.py` (the text: `masdsl/lang/scaffold.py`) next to each other;
NAME may carry a folder (`masdsl new exp/quiz`). Existing files are never overwritten. Prints
the files written and the next commands to run. Exit 0, or 2 for a bad name or an existing file.
"""

from __future__ import annotations

from pathlib import Path

from masdsl.errors import UserError
from masdsl.lang.scaffold import scaffold


def add_arguments(p) -> None:
    p.add_argument("name", metavar="NAME", help="the workflow's name (and file stem); may include a folder")
    p.add_argument("--env", default=None, help="a new env name (default: NAME, a stub in NAME_env.py), "
                                             "or a bundled one: code, math")
    p.add_argument("--roles", default="solver,checker", help="comma-separated role names, acting in this order "
                                                           "(default solver,checker)")


def main(args) -> int:
    target = Path(args.name)
    roles = tuple(r.strip() for r in args.roles.split(",") if r.strip())
    files = scaffold(target.name, args.env, roles)
    folder = target.parent
    existing = [str(folder / n) for n in files if (folder / n).exists()]
    if existing:
        raise UserError(f"{', '.join(existing)} already exist{'s' if len(existing) == 1 else ''}; "
                        "pick another NAME or move the file away")
    folder.mkdir(parents=True, exist_ok=True)
    for n, text in files.items():
        (folder / n).write_text(text, encoding="utf-8")
        print(f"wrote  {folder / n}")
    mas = folder / f"{target.name}.mas"
    print(f"next:  masdsl check {mas}\n       masdsl run {mas}")
    return 0
