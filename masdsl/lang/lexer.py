"""The tokens of `.mas` text for the fast parser (`masdsl.lang.fastparse`), and the decoding of
literals both parsers share (`unescape`, `number`).

The patterns are those of `grammar/mas.lark` (NAME, NUMBER, STRING, LONG_STRING, comments and
white space). Keywords are not told apart from names here: a `.mas` keyword is soft, so the
parser decides from where the word stands.

>>> [(k, v) for k, v, _, _ in tokens('role a { x: -1.5 } # c')]
[('N', 'role'), ('N', 'a'), ('{', '{'), ('N', 'x'), (':', ':'), ('-', '-'), ('D', '1.5'), ('}', '}'), ('$', '')]
>>> tokens("a ? b") is None
True
"""

from __future__ import annotations

import re

_TOKEN = re.compile(
    r'(?:[ \t\f\r\n]|#[^\n]*+)*+(?:(?P<L>"""[\s\S]*?""")|(?P<S>"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\')'
    r"|(?P<N>[A-Za-z_][A-Za-z0-9_]*)|(?P<D>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<P>->|==|!=|<=|>=|[<>{}()\[\],:;=.&+\-*/%])|(?P<E>\Z))"
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)")


def unescape(body: str) -> str:
    r"""Decode the escapes of a one-line string literal.

    >>> unescape(r'a\nb\"c\u00e9\q')
    'a\nb"cé\\q'
    """
    if "\\" not in body:
        return body

    def repl(m: re.Match) -> str:
        s = m.group(1)
        if s[0] == "u" and len(s) == 5:
            return chr(int(s[1:], 16))
        return _ESCAPES.get(s, "\\" + s)

    return _ESCAPE.sub(repl, body)


def number(text: str) -> int | float:
    """The value of a NUMBER token: a float when it has a point or an exponent."""
    return float(text) if any(c in text for c in ".eE") else int(text)


def tokens(text: str, start: int = 0, end: int | None = None) -> list[tuple[str, str, int, int]] | None:
    """(kind, text, start, end) of every token of `text[start:end]`, kind `N` name, `D` number,
    `S`/`L` string, else the punctuation itself; an end token last. None at a character no token
    starts with. Offsets are into `text`."""
    end = len(text) if end is None else end
    out, pos, match = [], start, _TOKEN.match
    while (m := match(text, pos, end)) is not None:  # match, not finditer: no search past a bad character
        kind = m.lastgroup
        if kind == "E":
            out.append(("$", "", end, end))
            return out
        s, pos = m.span(kind)
        val = text[s:pos]
        out.append((val if kind == "P" else kind, val, s, pos))
    return None
