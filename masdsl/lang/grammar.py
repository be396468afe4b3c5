"""The `.mas` grammar, loaded once: the LALR parser both `parse` (text -> AST) and `syntax`
(naming and recovering from syntax errors) run.

The grammar is `grammar/mas.lark`, shipped inside the package as `masdsl/lang/mas.lark` and
loaded with `Lark.open_from_package` (LALR, contextual lexer, positions kept).

>>> parser().parse("flow { a -> b }").data
Token('RULE', 'start')
"""

from __future__ import annotations

import functools

from lark import Lark


@functools.lru_cache(maxsize=1)
def parser() -> Lark:
    """The LALR parser for `.mas` text, built once (lark caches the tables on disk)."""
    return Lark.open_from_package(
        "masdsl.lang", "mas.lark", parser="lalr", lexer="contextual",
        propagate_positions=True, maybe_placeholders=True, cache=True,
    )
