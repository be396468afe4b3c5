"""`SourceFile`: a `.mas` text with its line table; converts offsets to (line, col) and back.

Lines and columns are 1-based and counted in characters, like lark's tokens. `Span` (the
position type every AST node, diagnostic and graph attribute carries) lives in
`masdsl.lang.workflow` and is re-exported here.

>>> src = SourceFile("w.mas", "ab\\ncd\\n")
>>> src.line_col(3)
(2, 1)
>>> src.offset(2, 2)
4
>>> str(src.span(3, 5))
'w.mas:2:1'
>>> src.line_text(2)
'cd'
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from masdsl.lang.workflow import Span

__all__ = ["SourceFile", "Span", "span_between"]


@dataclass
class SourceFile:
    path: str  # as the user gave it, shown in messages
    text: str
    line_starts: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        text, starts = self.text, [0]
        i = text.find("\n")
        while i >= 0:  # str.find, not a loop over characters: a long line costs nothing
            starts.append(i + 1)
            i = text.find("\n", i + 1)
        self.line_starts = starts

    @property
    def n_lines(self) -> int:
        return len(self.line_starts)

    def line_col(self, offset: int) -> tuple[int, int]:
        """1-based (line, col) of a character offset (clamped to the text)."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1

    def offset(self, line: int, col: int) -> int:
        """Character offset of a 1-based (line, col)."""
        line = max(1, min(line, self.n_lines))
        return min(self.line_starts[line - 1] + col - 1, len(self.text))

    def line_text(self, line: int) -> str:
        """The text of a 1-based line, without its newline."""
        if not 1 <= line <= self.n_lines:
            return ""
        start = self.line_starts[line - 1]
        end = self.text.find("\n", start)
        return self.text[start : end if end >= 0 else len(self.text)]

    def span(self, start: int, end: int) -> Span:
        """The span of the characters `text[start:end]`."""
        line, col = self.line_col(start)
        end_line, end_col = self.line_col(max(start, end))
        return Span(self.path, line, col, end_line, end_col, start, max(start, end))

    def point(self, offset: int) -> Span:
        """A one-character span; at end of file it points at the last character."""
        if offset >= len(self.text) and self.text:
            offset = len(self.text) - 1
            while offset > 0 and self.text[offset] in " \t\r\n":
                offset -= 1
        return self.span(offset, offset + 1)


def span_between(first: Span, last: Span) -> Span:
    """The span from the start of `first` to the end of `last`."""
    return Span(first.file, first.line, first.col, last.end_line, last.end_col, first.start, last.end)
