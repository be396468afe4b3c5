"""Parsers a role's `parse` lines call: model text in, one structured value out.

Every parser tolerates model noise (prose around the answer, a missing closing fence, several
candidates: the last wins) and returns None when nothing usable is there; it never raises. The
runtime then stores the parser's registered `empty` value and sets the role's `ok` to False.

>>> code_block("Here you go:\\n```python\\ndef f():\\n    return 1\\n```\\nDone.")
'def f():\\n    return 1'
>>> boxed("so the answer is \\\\boxed{\\\\frac{1}{2}}.")
'\\\\frac{1}{2}'
>>> actions('Plan: ["U", "left", "D"]')
['U', 'L', 'D']
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from typing import Any, Callable

from masdsl.envs.fences import closing_braces as _closing_braces
from masdsl.envs.fences import fences as _fences
from masdsl.envs.fences import without_fences as _without_fences
from masdsl.envs.registry import parser

_LANG_ALIASES = {"python": {"python", "py", "python3", "py3"}, "json": {"json"}}


def _safe(fn):
    """Parsers never raise: an `output` that is not text, or any exception on odd input, means
    "no parse" (None). The parser itself may then assume its `output` is a `str`."""

    def wrapped(*args, **kwargs):
        if not isinstance(args[0] if args else kwargs.get("output"), str):
            return None
        try:
            return fn(*args, **kwargs)
        except Exception:  # noqa: BLE001 - by contract a parser returns None, never raises
            return None

    wrapped.__name__, wrapped.__doc__, wrapped.__wrapped__ = fn.__name__, fn.__doc__, fn
    wrapped.__module__, wrapped.__qualname__ = fn.__module__, fn.__qualname__
    return wrapped


def _parse_quietly(text: str) -> ast.Module:
    """`ast.parse` without the SyntaxWarnings that model noise triggers (such as `1st`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        return ast.parse(text)


def _looks_like_python(text: str) -> bool:
    try:
        tree = _parse_quietly(text)
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom, ast.Assign,
                              ast.For, ast.While, ast.If)) for n in tree.body)


@parser("code_block", returns="str", empty="")
@_safe
def code_block(output: str, lang: str = "python") -> str | None:
    """The last fenced block in `lang` (else the last untagged block; else the whole reply if it
    is plainly code). A block cut off by a stop sequence before its closing fence still counts.

    >>> code_block("```py\\nx = 1\\n```\\nand better:\\n```python\\nx = 2\\n```")
    'x = 2'
    >>> code_block("```python\\nprint(1)")
    'print(1)'
    >>> code_block("```json\\n[1]\\n```") is None
    True
    >>> code_block("def f(x):\\n    return x")
    'def f(x):\\n    return x'
    >>> code_block("I cannot do that.") is None
    True
    """
    want = _LANG_ALIASES.get(lang.lower(), {lang.lower()})
    blocks = _fences(output)
    tagged = [body for tag, body in blocks if tag in want]
    untagged = [body for tag, body in blocks if not tag]
    for body in reversed(tagged or untagged):
        if body.strip():
            return body.strip("\n").rstrip()
    if not blocks and lang.lower() in _LANG_ALIASES["python"] and _looks_like_python(output.strip()):
        return output.strip("\n").rstrip()
    return None


def _json_values(text: str) -> list[Any]:
    """JSON values found in `text`: fenced blocks, the whole text, then bracketed spans; last first."""
    candidates = [body for _, body in reversed(_fences(text))] + [text]
    candidates += [m.group(0) for m in reversed(list(re.finditer(r"\[[^\[\]]*(?:\[[^\[\]]*\][^\[\]]*)*\]", text, re.S)))]
    values = []
    for cand in candidates:
        try:
            values.append(json.loads(cand.strip()))
        except ValueError:
            continue
    return values


def _last_json(text: str, keys: tuple[str, str], accept: Callable[[Any], Any]) -> Any:
    """The first JSON value of `text` (in `_json_values` order: the last one written first) that
    `accept` turns into something other than None; an object is read through `keys[0]`, else
    `keys[1]` (`{"moves": [...]}`)."""
    for value in _json_values(text):
        if isinstance(value, dict):
            value = value.get(keys[0], value.get(keys[1]))
        found = accept(value)
        if found is not None:
            return found
    return None


_IO_LABEL = re.compile(  # possessive `*+`: runs of blanks side by side would backtrack polynomially
    r"(?im)^[ \t>*#_-]*+(?:(?:test|example|case|sample)(?:[ \t]*+case)?[ \t]*+#?\d*[ \t]*+[:.-]?[ \t]*+)?"
    r"(?:sample[ \t]++|expected[ \t]++)?(input|output|stdin|stdout)[ \t]*+#?\d*[ \t]*+(?:\*\*|__)?[ \t]*+[:=]?"
    r"[ \t]*+(?:\*\*|__)?[ \t]*+(?=\S|$)"
)
MAX_IO_TESTS = 50  # more is noise (and sandbox time); the first 50 are kept


def _io_pairs(value: Any) -> list[dict[str, str]] | None:
    """Pairs from one JSON value: [{"input", "output"}, ...], [[input, output], ...], or an object
    holding such a list under "tests"/"test_cases"/"cases"/"examples" (or a single pair)."""
    if isinstance(value, dict):
        for key in ("tests", "test_cases", "cases", "examples"):
            if isinstance(value.get(key), list):
                value = value[key]
                break
        else:
            value = [value]
    if not isinstance(value, list) or not value:
        return None
    pairs = []
    for t in value:
        if isinstance(t, dict) and "input" in t and ("output" in t or "expected_output" in t):
            pairs.append((t["input"], t.get("output", t.get("expected_output"))))
        elif isinstance(t, list) and len(t) == 2 and all(isinstance(x, (str, int, float, list)) for x in t):
            pairs.append((t[0], t[1]))
        else:
            return None
    return [{"input": _as_text(i), "output": _as_text(o)} for i, o in pairs[:MAX_IO_TESTS]]


@parser("io_tests", returns="list", empty=[])
@_safe
def io_tests(output: str) -> list[dict[str, str]] | None:
    """stdin/stdout test pairs: a JSON list of {"input", "output"} objects (or of [input, output]
    pairs, or an object with a "tests" list), else labelled blocks ("Input:" / "Sample Input 1" /
    "**Input:**" / "stdin:" then a fenced block or the following lines, then "Output:" /
    "Expected output:" / "stdout:" likewise). At most 50 pairs.

    >>> io_tests('[{"input": "1 2\\\\n", "output": "3"}]')
    [{'input': '1 2\\n', 'output': '3'}]
    >>> io_tests("Input:\\n```\\n2\\n```\\nOutput:\\n```\\n4\\n```\\nInput: 3\\nOutput: 6")
    [{'input': '2\\n', 'output': '4\\n'}, {'input': '3\\n', 'output': '6\\n'}]
    >>> io_tests("**Sample Input 1:**\\n5 6\\n**Expected Output:**\\n11")
    [{'input': '5 6\\n', 'output': '11\\n'}]
    >>> io_tests("no tests here") is None
    True
    """
    for value in _json_values(output):
        pairs = _io_pairs(value)
        if pairs:
            return pairs
    pairs, pending = [], None
    labels = list(_IO_LABEL.finditer(output))
    for n, m in enumerate(labels):
        end = labels[n + 1].start() if n + 1 < len(labels) else len(output)
        body = _label_body(output[m.end():end])
        if m.group(1).lower() in ("input", "stdin"):
            pending = body
        elif pending is not None:
            pairs.append({"input": pending, "output": body})
            pending = None
    return pairs[:MAX_IO_TESTS] or None


def _as_text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(map(str, value)) + "\n"
    return value if isinstance(value, str) else json.dumps(value)


def _label_body(chunk: str) -> str:
    fences = _fences(chunk)
    text = fences[0][1] if fences else chunk
    lines = [ln.rstrip() for ln in text.strip("\n").splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n" if lines else ""


def _statement_at(lines: list[str], start: int) -> tuple[str, int] | None:
    """The shortest run of lines from `start` that parses as one assert (continued lines)."""
    for stop in range(start + 1, min(start + 12, len(lines)) + 1):
        chunk = "\n".join(line.strip() if i == start else line for i, line in enumerate(lines[start:stop], start))
        try:
            tree = _parse_quietly(chunk)
        except (SyntaxError, ValueError):
            continue
        if len(tree.body) == 1 and isinstance(tree.body[0], ast.Assert):
            return chunk, stop
        return None
    return None


@parser("asserts", returns="list", empty=[])
@_safe
def asserts(output: str) -> list[str] | None:
    """Assert statements, one string each (an assert spread over lines stays whole). Top-level
    asserts anywhere in the reply count, fenced or not; duplicates are dropped.

    >>> asserts("Tests:\\n```python\\nassert f(1) == 2\\nassert f(\\n    2) == 3\\n```")
    ['assert f(1) == 2', 'assert f(\\n    2) == 3']
    >>> asserts("def test():\\n    assert f(0) == 1\\n") 
    ['assert f(0) == 1']
    >>> asserts("assert f(1) ==") is None
    True
    """
    lines = output.replace("\r\n", "\n").split("\n")
    found: list[str] = []
    i = 0
    while i < len(lines):
        at = re.search(r"(?:^|[\s:>`])assert\b", lines[i])
        if at is not None:
            lines[i] = lines[i][at.end() - len("assert"):]  # drop a prose lead-in ("Also: assert ...")
            hit = _statement_at(lines, i)
            if hit is not None:
                stmt, i = hit
                if stmt not in found:
                    found.append(stmt)
                continue
        i += 1
    return found or None


_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
# "Answer: X" / "the answer is X": never `answer = X` (a line of code assigns; it does not answer)
_ANSWER_LINE = re.compile(r"(?i)(?:final answer|answer)\W{0,3}\s*(?:is\s*:?|:)\s*(.+)")
# what such a line may hold: one number (sign, thousands commas, decimals, or a fraction `3/4`,
# `\frac{3}{4}`), words after it read as its unit; an expression (`27 * 74 + 18 * 58`) is not one
_BARE_NUMBER = re.compile(r"(-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?|-?\\[dt]?frac\{\d+\}\{\d+\})"
                          r"\s*\\?%?(?:\s+[^\W\d_]+)*")


@parser("boxed", returns="str", empty="")
@_safe
def boxed(output: str) -> str | None:
    """The final answer: the last `\\boxed{...}` (nested braces kept), else the number of the last
    "answer: X" / "the answer is X" line outside code blocks, without `$` and a trailing period.
    That fallback takes one number (its unit dropped), never a line of code: an assignment
    (`answer = 27 * 74`) or an expression (`Answer: 27 * 74 + 18 * 58`) is no answer.

    >>> boxed("first \\\\boxed{1}, finally \\\\boxed{\\\\sqrt{x^{2}}}")
    '\\\\sqrt{x^{2}}'
    >>> boxed("Work...\\nAnswer: $42$.")
    '42'
    >>> boxed("The final answer is 7 apples")
    '7'
    >>> boxed("I am not sure.") is None, boxed("answer = 27 * 74 + 18 * 58") is None
    (True, True)
    """
    close = _closing_braces(output) if "\\" in output else {}
    for m in reversed(list(_BOXED.finditer(output))):
        end = close.get(m.end() - 1)
        if end is not None and output[m.end():end].strip():
            return output[m.end():end].strip()
    lines = [ln for ln in _without_fences(output).splitlines() if _ANSWER_LINE.search(ln)]
    if not lines:
        return None
    answer = _ANSWER_LINE.search(lines[-1]).group(1).strip()
    answer = answer.strip("*").strip()
    answer = answer.rstrip(".").strip().strip("$").strip()
    number = _BARE_NUMBER.fullmatch(answer)
    return number.group(1) if number else None


_MOVE_WORDS = {"U": "U", "UP": "U", "D": "D", "DOWN": "D", "L": "L", "LEFT": "L", "R": "R", "RIGHT": "R"}
_MOVE_TOKEN = re.compile(r"\b(?:up|down|left|right|U|D|L|R)\b", re.I)


def _moves(items: list[Any]) -> list[str] | None:
    out = []
    for item in items:
        if not isinstance(item, str) or item.strip().upper() not in _MOVE_WORDS:
            return None
        out.append(_MOVE_WORDS[item.strip().upper()])
    return out


@parser("actions", returns="list", empty=[])
@_safe
def actions(output: str) -> list[str] | None:
    """Moves as letters U/D/L/R: the last JSON list of moves, else the moves after the last
    "actions:"/"moves:"/"answer:" label, else a reply made of move words only.

    >>> actions("I think\\n```json\\n[\\"up\\", \\"Right\\"]\\n```")
    ['U', 'R']
    >>> actions("Moves: up, up, left")
    ['U', 'U', 'L']
    >>> actions("R R D")
    ['R', 'R', 'D']
    >>> actions("That is right, I cannot move.") is None
    True
    """
    moves = _last_json(output, ("actions", "moves"), lambda v: _moves(v) if isinstance(v, list) and v else None)
    if moves is not None:
        return moves
    labelled = re.findall(r"(?im)(?:actions?|moves?|answer|plan)\s*[:=]\s*(.+)$", output)
    for text in reversed(labelled):
        tokens = re.findall(r"[A-Za-z]+", text)
        if tokens and all(t.upper() in _MOVE_WORDS for t in tokens):
            return [_MOVE_WORDS[t.upper()] for t in tokens]
    tokens = re.findall(r"[A-Za-z]+", output)
    if tokens and all(t.upper() in _MOVE_WORDS for t in tokens) and _MOVE_TOKEN.search(output):
        return [_MOVE_WORDS[t.upper()] for t in tokens]
    return None


_ROW = re.compile(r"^[\s|+\-]*(?:[0-9.][\s,|]*)+$")


def _rectangular(rows: list[list[int]]) -> bool:
    return len(rows) >= 2 and all(len(r) == len(rows[0]) for r in rows) and len(rows[0]) >= 2


def _int_grid(value: Any) -> bool:
    """Whether a JSON value is a rectangular list of lists of integers (at least 2 x 2)."""
    return (isinstance(value, list) and all(isinstance(r, list) for r in value) and bool(value)
            and all(isinstance(x, int) and not isinstance(x, bool) for r in value for x in r)
            and _rectangular(value))


@parser("grid", returns="list", empty=[])
@_safe
def grid(output: str) -> list[list[int]] | None:
    """A rectangular grid of integers: the last JSON list of lists, else the last block of
    consecutive digit rows (separators `,`, `|` and spaces; `.` reads as 0).

    >>> grid("[[1, 2], [3, 4]]")
    [[1, 2], [3, 4]]
    >>> grid("Solved:\\n1 2 | 3 4\\n3 4 | 1 2\\n------\\n2 1 | 4 3\\n4 3 | 2 1\\n")
    [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]
    >>> grid("12\\n34")
    [[1, 2], [3, 4]]
    >>> grid("no grid") is None
    True
    """
    found = _last_json(output, ("grid", "board"), lambda v: v if _int_grid(v) else None)
    if found is not None:
        return found
    blocks: list[list[list[int]]] = [[]]
    for line in output.splitlines():
        if line.strip() and _ROW.match(line) and re.search(r"[0-9.]", line):
            cells = re.findall(r"[0-9.]", line) if not re.search(r"\d\d", line) or "," not in line else None
            if cells is None:  # comma-separated numbers may have several digits
                cells = re.findall(r"\d+|\.", line)
            blocks[-1].append([0 if c == "." else int(c) for c in cells])
        elif re.fullmatch(r"[\s\-+|=]*", line) and line.strip():
            continue  # a separator line inside a grid
        elif blocks[-1]:
            blocks.append([])
    for rows in reversed(blocks):
        if _rectangular(rows):
            return rows
    return None
