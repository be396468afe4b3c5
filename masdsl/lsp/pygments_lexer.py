"""A Pygments lexer for `.mas` files (registered as the `mas` lexer through the
`pygments.lexers` entry point in pyproject.toml), so ```mas blocks in the docs are highlighted.

>>> from pygments.token import Error
>>> [t for t, _ in MasLexer().get_tokens("role a { prompt '{{ task.x }}' }") if t is Error]
[]
"""

from __future__ import annotations

from pygments.lexer import RegexLexer, bygroups, include, words
from pygments.token import Comment, Keyword, Name, Number, Operator, Punctuation, String, Text, Whitespace

from masdsl.lang.vocabulary import STATEMENTS

ITEMS = ("system", "prompt", "file", "sample", "parse", "reward", "advantage", "metric", "max_turns", "when")


class MasLexer(RegexLexer):
    name = "mas"
    aliases = ["mas", "masdsl"]
    filenames = ["*.mas"]
    mimetypes = ["text/x-mas"]

    tokens = {
        "root": [
            (r"\s+", Whitespace),
            (r"#.*?$", Comment.Single),
            (r'"""', String.Doc, "long"),
            (r'"(?:[^"\\\n]|\\.)*"', String.Double),
            (r"'(?:[^'\\\n]|\\.)*'", String.Single),
            (r"\b(role|policy)(\s+)([A-Za-z_]\w*)", bygroups(Keyword.Declaration, Whitespace, Name.Class)),
            (words(STATEMENTS, suffix=r"\b"), Keyword.Declaration),
            (words(ITEMS, suffix=r"\b"), Keyword),
            (words(("start", "end"), suffix=r"\b"), Name.Builtin),
            (words(("and", "or", "not"), suffix=r"\b"), Operator.Word),
            (words(("true", "false"), suffix=r"\b"), Keyword.Constant),
            (words(("task", "env", "turn", "output"), suffix=r"\b"), Name.Builtin.Pseudo),
            (r"judge(?=\s*\()", Name.Builtin),  # the language's own call (masdsl.lang.judge), not a registered one
            (r"[A-Za-z_]\w*(?=\s*\()", Name.Function),
            (r"[A-Za-z_]\w*(?=\s*:)", Name.Attribute),
            (r"[A-Za-z_]\w*", Name),
            (r"(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", Number),
            (r"->|==|!=|<=|>=|[<>&=+\-*/%]", Operator),
            (r"[{}()\[\],;.:]", Punctuation),
        ],
        "long": [
            (r'"""', String.Doc, "#pop"),
            include("template"),
            (r'[^"{]+|"|\{', String.Doc),
        ],
        "template": [
            (r"(\{\{|\{%)(.*?)(\}\}|%\})", bygroups(String.Interpol, Text, String.Interpol)),
        ],
    }
