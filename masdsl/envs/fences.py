"""Where the parts of a model's reply are: its fenced blocks (```lang ... ```) and its closed
braces. The parsers (`masdsl.envs.parsers`) read code, tests and JSON from the blocks, and a final
answer from the prose around them; this module only finds them, in one pass each.

>>> fences("Here:\\n```python\\nx = 1\\n```\\nand\\n```\\ny")
[('python', 'x = 1'), ('', 'y')]
"""

from __future__ import annotations

import re

FENCE_OPEN = re.compile(r"```[ \t]*([A-Za-z0-9_+#.-]*)[^\n]*+\n")
FENCE_CLOSE = re.compile(r"\n[ \t]*```")


def fence_spans(text: str) -> list[tuple[re.Match[str], int, int]]:
    """(opening fence, end of the body, end of the closing fence) of each fenced block, in order;
    the last may lack its closing fence (both ends are then the end of the text).

    An opening fence is searched for only up to the last newline (one after it could never
    end its line, and trying each backtick of a long last line would take quadratic time).
    """
    out, pos, stop = [], 0, text.rfind("\n") + 1
    while (m := FENCE_OPEN.search(text, pos, stop)) is not None:
        close = FENCE_CLOSE.search(text, m.end())
        pos = close.end() if close else len(text)
        out.append((m, close.start() if close else len(text), pos))
    return out


def fences(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of each fenced block, in order; the last may lack its closing fence."""
    return [(m.group(1).lower(), text[m.end():end]) for m, end, _ in fence_spans(text)]


def without_fences(text: str) -> str:
    """`text` without its fenced blocks: the prose of a reply (a program's `print("Answer:", x)`
    is not the reply's answer).

    >>> without_fences("Answer: 3\\n```python\\nprint('Answer: 4')\\n```\\nok")
    'Answer: 3\\n\\nok'
    """
    out, pos = [], 0
    for m, _, after in fence_spans(text):
        out.append(text[pos:m.start()])
        pos = after
    return "".join(out) + text[pos:]


def closing_braces(text: str) -> dict[int, int]:
    """The offset of each `{` of `text` that is closed -> the offset of its `}` (one pass: looking
    for the end of each of many `\\boxed{` separately would take quadratic time)."""
    close, open_ = {}, []
    for m in re.finditer(r"[{}]", text):
        if m.group() == "{":
            open_.append(m.start())
        elif open_:
            close[open_.pop()] = m.start()
    return close
