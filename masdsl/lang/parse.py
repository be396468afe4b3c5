"""Text -> AST: `parse_text(text, path) -> (Module | None, syntax diagnostics)`.

Two parsers of one grammar (`grammar/mas.lark`): the fast one (`masdsl.lang.fastparse`,
recursive descent, no lark) parses almost every text that is valid; whatever it declines
(text with a syntax error, a few corners of soft keywords) goes to lark's LALR parser
(`masdsl.lang.tree.parse_lark`), which also names and locates syntax errors
(`masdsl.lang.syntax`). Both give the same `Module` for the same text (tests/lang/test_fastparse.py).

>>> module, diags = parse_text('role a { policy p prompt "hi" }', "w.mas")
>>> module.roles[0].name.name, diags
('a', [])
>>> _, diags = parse_text("flow { a => b }", "w.mas")
>>> print(diags[0].message, diags[0].span)
`=>` is not an arrow; flow edges use `->` w.mas:1:10
"""

from __future__ import annotations

from masdsl.lang import ast as A
from masdsl.lang.errors import Diagnostic
from masdsl.lang.fastparse import parse_fast


def parse_text(text: str, path: str = "<string>") -> tuple[A.Module | None, list[Diagnostic]]:
    """Parse `.mas` text into a `Module`, or return its syntax errors (one per broken statement)."""
    module = parse_fast(text, path)
    if module is not None:
        return module, []
    from masdsl.lang.tree import parse_lark  # start-up: lark (~60 ms), only for text the fast parser declines

    return parse_lark(text, path)
