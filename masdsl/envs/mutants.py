"""Wrong solutions to test a tester with: the mutants of the reference solution that its task's own
tests reject (mutation testing's "killed mutants"); `wrong_solution` is the first of them.

A unit tester is good when its asserts hold for a correct function *and* fail for a wrong one. The
first half is `pass_rate(task.solution, tests)`; the second needs a wrong function that is close
to the right one. HumanEval ships none, so one is made from the reference: one small edit of its
syntax tree (an operator swapped, `<` for `<=`, `and` for `or`, a whole-number constant plus one;
for code with none of these, a `return` that gives None), tried in a fixed order, and the first edit that fails at least one of the task's hidden tests is
taken; an edit that every hidden test still passes is equivalent as far as the task can tell, and
would make a tester look blind for no fault of its own. The edit is deterministic: the same
reference and tests always give the same wrong solution.

>>> [m.splitlines()[-1] for m in mutants("def f(a, b):\\n    return a + b < 3")][:3]
['    return a + b <= 3', '    return a - b < 3', '    return a + b < 4']
"""

from __future__ import annotations

import ast
import functools
import itertools
from typing import Iterator, Sequence

from masdsl.sandbox import Limits, run_tests

# each operator and the one it becomes: the classic first-order mutation operators
_BINARY = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult, ast.Div: ast.Mult,
           ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult}
_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BOOLEAN = {ast.And: ast.Or, ast.Or: ast.And}
MAX_TRIES = 24  # mutants run against the hidden tests before giving up (each is one sandboxed run)
KILL_MUTANTS = 4  # the wrong solutions `killed_mutants` gives by default (a tester's mutation score)


def _sites(tree: ast.AST) -> list[tuple[ast.AST, int]]:
    """(node, operand index) of every place one edit can be made, in source order."""
    sites: list[tuple[ast.AST, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            sites.append((node, 0))
        elif isinstance(node, ast.Compare):
            sites.extend((node, i) for i, op in enumerate(node.ops) if type(op) in _COMPARE)
        elif isinstance(node, ast.BoolOp) and type(node.op) in _BOOLEAN:
            sites.append((node, 0))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            sites.append((node, 0))
    by_position = sorted(sites, key=lambda s: (getattr(s[0], "lineno", 0), getattr(s[0], "col_offset", 0), s[1]))
    # last resort, for code with no operator or number (`return len(s)`): a return that gives None
    returns = [(n, 0) for n in ast.walk(tree) if isinstance(n, ast.Return) and n.value is not None
               and not (isinstance(n.value, ast.Constant) and n.value.value is None)]
    return by_position + sorted(returns, key=lambda s: (s[0].lineno, s[0].col_offset))


def _edit(node: ast.AST, index: int) -> None:
    if isinstance(node, ast.BinOp):
        node.op = _BINARY[type(node.op)]()
    elif isinstance(node, ast.Compare):
        node.ops[index] = _COMPARE[type(node.ops[index])]()
    elif isinstance(node, ast.BoolOp):
        node.op = _BOOLEAN[type(node.op)]()
    elif isinstance(node, ast.Constant):
        node.value = node.value + 1
    elif isinstance(node, ast.Return):
        node.value = ast.Constant(None)


def mutants(source: str) -> Iterator[str]:
    """Every one-edit mutant of `source`, in source order (nothing for code that does not parse).

    >>> list(mutants("x = 1 if a and b else 2"))
    ['x = 2 if a and b else 2', 'x = 1 if a or b else 2', 'x = 1 if a and b else 3']
    >>> list(mutants("def n(s):\\n    return len(s)"))
    ['def n(s):\\n    return None']
    >>> list(mutants("def f(:"))
    []
    """
    try:
        count = len(_sites(ast.parse(source)))
    except SyntaxError:
        return
    for i in range(count):
        tree = ast.parse(source)  # a fresh tree each time: one edit per mutant
        node, index = _sites(tree)[i]
        _edit(node, index)
        yield ast.unparse(tree)


@functools.lru_cache(maxsize=1024)
def _killed(solution: str, tests: tuple[str, ...], limits: Limits | None, n: int) -> tuple[str, ...]:
    found: list[str] = []
    for mutant in itertools.islice(mutants(solution), MAX_TRIES):  # each one sandboxed run: stop at the n-th killed
        report = run_tests(mutant, list(tests), limits=limits)
        if report.results and not all(report.passed):
            found.append(mutant)
            if len(found) == n:
                break
    return tuple(found)


def killed_mutants(solution: str, tests: Sequence[str], *, n: int = KILL_MUTANTS,
                   limits: Limits | None = None) -> tuple[str, ...]:
    """The first `n` mutants of `solution`, in source order, that fail at least one of `tests`
    (the task's hidden tests), among the first `MAX_TRIES`: fewer when fewer are killed. Cached.

    >>> [m.splitlines()[-1] for m in killed_mutants("def inc(x):\\n    return x + 1", ["assert inc(1) == 2"])]
    ['    return x - 1', '    return x + 2', '    return None']
    """
    return _killed(solution, tuple(str(t) for t in tests), limits, n)


def wrong_solution(solution: str, tests: Sequence[str], *, limits: Limits | None = None) -> str | None:
    """The first mutant of `solution` that fails at least one of `tests` (the task's hidden
    tests), or None when none of the first `MAX_TRIES` does. Cached: a task's tester replies all
    share it.

    >>> wrong_solution("def inc(x):\\n    return x + 1", ["assert inc(1) == 2"])
    'def inc(x):\\n    return x - 1'
    >>> wrong_solution("def f():\\n    return None", ["assert f() is None"]) is None
    True
    """
    first = _killed(solution, tuple(str(t) for t in tests), limits, 1)
    return first[0] if first else None
