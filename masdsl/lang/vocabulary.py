"""The words of the `.mas` language, defined once.

The fast lexer and parser (`lexer.py`, `fastparse.py`), lark's syntax-error naming
(`syntax.py`), the LSP's completion and the Pygments lexer all read these;
`tests/lang/test_vocabulary.py` checks them against the grammar (`lang/mas.lark`).

>>> STATEMENTS[0], "max_turns" in KEYWORDS, "max_turns" in STATEMENTS, ROLE_ITEMS[-1]
('workflow', True, False, 'metric')
"""

from __future__ import annotations

# The statements that may start a top-level line, in the order the docs list them.
STATEMENTS = ("workflow", "env", "data", "policy", "role", "flow", "team", "alpha", "success", "train", "sandbox",
              "import")
# The lines a `role { }` may hold, in the order the docs list them.
ROLE_ITEMS = ("policy", "system", "prompt", "sample", "parse", "reward", "advantage", "metric")
# Every word the grammar spells out. All are soft: a name wherever no keyword is expected.
KEYWORDS = frozenset(STATEMENTS + ROLE_ITEMS + ("file", "max_turns", "when", "or", "and", "not", "true", "false"))
