"""The `.mas` language: text -> AST -> diagnostics -> `Workflow`.

Public API: `load(path)`, `loads(text, name=..., base_dir=None)` (both raise `MasError` with
every error found), `analyze(text, path)` (diagnostics without raising: what `masdsl check`
uses), `Diagnostic`, `MasError`.

Importing any `masdsl.lang` module runs this file first (a worker unpickling a `Workflow`, the
runtime reading one), so the front end (`masdsl.lang.front`: the parser, the checker and the
compiler) is imported when one of its names is first asked for. Heavier libraries load later
still, only when needed: lark for text the fast parser declines (syntax errors), jinja2 for templates beyond
`{{ name.field }}`, OmegaConf for a `train { }` block that is not plainly valid, networkx for
a `Workflow` (`masdsl check` builds none).
"""

from __future__ import annotations

from typing import Any

from masdsl.lang.errors import Diagnostic, MasError
from masdsl.lang.workflow import Workflow

__all__ = ["load", "loads", "analyze", "parse", "check", "compile_workflow", "Analysis", "Diagnostic",
           "MasError", "Workflow"]
_FRONT = ("load", "loads", "analyze", "parse", "check", "compile_workflow", "Analysis")


def __getattr__(name: str) -> Any:
    """The front end's names (`_FRONT`), imported when first asked for."""
    if name in _FRONT:
        from masdsl.lang import front  # start-up: the parser, checker and compiler (~250 ms), not for a `Workflow`

        return getattr(front, name)
    raise AttributeError(f"module 'masdsl.lang' has no attribute {name!r}")
