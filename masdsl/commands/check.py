"""`masdsl check FILE... [overrides...] [--config YAML]`: parse and validate `.mas` files; errors
with file:line:col, then what `masdsl run` would refuse.

Prints one line per valid file (`ok  workflows/x.mas  roles=2 edges=4 max_turns=4`) and every
diagnostic of the others (long rustc-style form, or `--format short`). A file without errors is
then planned as `masdsl run` plans it (`masdsl.plan.run_plan.resolve_run`), with its `train { }`
block, the `--config` files and the dotted overrides (a word with `=`, or `~key`): what the run
would refuse is printed as `FILE: MESSAGE`, the message exactly as `masdsl run` gives it. Exit 0
when every file is valid, 2 when any has errors. Warnings never change the exit status. A file
that cannot be read is reported on stderr. No model loads and nothing starts; the local data files
the workflow names are read line by line (the first malformed row is `bad-data-file`).

`--json` prints one JSON document on stdout instead: `{"ok": bool, "files": [{"file", "ok",
"error" (null, or why the file could not be read), "summary" ({"roles", "edges", "max_turns"}
or null), "diagnostics": [{"severity", "code", "message", "file", "line", "col", "end":
{"line", "col"}, "label", "notes", "hint"}], "config_errors": [what `masdsl run` would refuse,
one message each]}]}`; lines and columns are 1-based, `end` is where the primary span ends.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from masdsl.commands.output import use_color
from masdsl.config import resolve_config
from masdsl.errors import UserError
from masdsl.lang import analyze
from masdsl.lang.errors import render_all
from masdsl.plan.run_plan import resolve_run


def add_arguments(p) -> None:
    p.add_argument("files", nargs="+", metavar="FILE",
                   help=".mas files to check, and dotted overrides for the run's configuration (e.g. train.lr=1e-5)")
    p.add_argument("--format", choices=("long", "short"), default="long", help="diagnostic format (default long)")
    p.add_argument("--no-warnings", action="store_true", help="do not print warnings")
    p.add_argument("--json", action="store_true", help="print the results and diagnostics as one JSON document")
    p.add_argument("--config", metavar="YAML", action="append", default=None,
                   help="a YAML config file the run would use, layered under the overrides (again for more: later wins)")


def is_override(word: str) -> bool:
    """A dotted override (`key=value`, `+key=value`, `~key`) rather than a file.

    >>> [is_override(w) for w in ("train.lr=1e-5", "~train.lr", "workflows/x.mas")]
    [True, True, False]
    """
    return "=" in word or word.startswith("~")


def run_refusal(workflow: Any, config: list[str] | None, overrides: list[str]) -> UserError | None:
    """What `masdsl run` would refuse for this workflow and configuration (None: it would start)."""
    try:
        resolve_run(workflow, resolve_config(workflow.train, config, overrides))
    except UserError as exc:
        return exc
    return None


def refusal_count(exc: UserError) -> int:
    return len(getattr(exc, "problems", ())) or 1  # a RunPlanError lists its problems

def summary(s: dict[str, Any]) -> str:
    """`roles=2 edges=4 max_turns=3` of `Analysis.summary`."""
    turns = s["max_turns"] if s["max_turns"] is not None else "-"
    return f"roles={s['roles']} edges={s['edges']} max_turns={turns}"


def diagnostic_json(d) -> dict[str, Any]:
    """One diagnostic as plain data (`--json`)."""
    s = d.span
    return {"severity": d.severity, "code": d.code, "message": d.message, "file": s.file, "line": s.line,
            "col": s.col, "end": {"line": s.end_line, "col": s.end_col}, "label": d.label or None,
            "notes": list(d.notes), "hint": d.help}


def check_json(path: str, warnings: bool = True, config: list[str] | None = None,
               overrides: list[str] = ()) -> dict[str, Any]:
    """The `--json` entry of one file."""
    entry: dict[str, Any] = {"file": path, "ok": False, "error": None, "summary": None, "diagnostics": [],
                             "config_errors": []}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        entry["error"] = "no such file"
        return entry
    except (OSError, UnicodeDecodeError) as exc:
        entry["error"] = f"cannot read: {exc}"
        return entry
    a = analyze(text, path, Path(path).parent)
    entry["ok"], entry["summary"] = a.ok, a.summary
    entry["diagnostics"] = [diagnostic_json(d) for d in (a.diagnostics if warnings else a.errors)]
    refused = run_refusal(a.workflow, config, list(overrides)) if a.ok else None
    if refused is not None:
        entry["ok"], entry["config_errors"] = False, list(getattr(refused, "problems", ())) or [str(refused)]
    return entry


def check_one(path: str, fmt: str = "long", warnings: bool = True, color: bool = False,
              config: list[str] | None = None, overrides: list[str] = ()) -> tuple[bool, str, str]:
    """(ok, stdout line, diagnostics text) for one file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False, f"error  {path}  no such file", ""
    except (OSError, UnicodeDecodeError) as exc:
        return False, f"error  {path}  cannot read: {exc}", ""
    a = analyze(text, path, p.parent)  # the `Workflow` too: the run is planned from it
    shown = a.diagnostics if warnings else a.errors
    diags = render_all(shown, a.sources, color=color, fmt=fmt) if shown else ""
    if not a.ok:
        n = len(a.errors)
        return False, f"error  {path}  {n} error{'s' if n != 1 else ''}", diags
    refused = run_refusal(a.workflow, config, list(overrides))
    if refused is not None:
        n = refusal_count(refused)
        diags = (diags + "\n" if diags else "") + f"{path}: {refused.render(color=color)}"
        return False, f"error  {path}  {n} configuration error{'s' if n != 1 else ''} (`masdsl run` would refuse it)", diags
    w = len(a.warnings)
    tail = f"  ({w} warning{'s' if w != 1 else ''})" if w and warnings else ""
    return True, f"ok  {path}  {summary(a.summary)}{tail}", diags


def main(args) -> int:
    words = args.files
    args.files = [w for w in words if not is_override(w)]
    overrides = [w for w in words if is_override(w)]
    if not args.files:
        raise UserError("masdsl check: no .mas file given, only overrides (see `masdsl check --help`)")
    config = getattr(args, "config", None)
    if getattr(args, "json", False):
        files = [check_json(path, not args.no_warnings, config, overrides) for path in args.files]
        ok = all(f["ok"] for f in files)
        print(json.dumps({"ok": ok, "files": files}, indent=2), flush=True)
        return 0 if ok else 2
    color = use_color(sys.stderr)
    status = 0
    for path in args.files:
        ok, line, diags = check_one(path, args.format, not args.no_warnings, color, config, overrides)
        if diags:
            print(diags + ("\n" if args.format == "long" else ""), file=sys.stderr, flush=True)
        unreadable = not ok and not diags  # a file with errors always has diagnostics
        print(line, file=sys.stderr if unreadable else sys.stdout, flush=True)
        status = status if ok else 2
    return status
