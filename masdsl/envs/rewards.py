"""Functions `.mas` expressions call: rewards, guards, `team` and `success`.

Code is judged only in the sandbox (`masdsl.sandbox`); math answers are compared with
`math-verify` (sympy only if math-verify itself fails) in a worker process under a wall-clock
limit (`masdsl.sandbox.math_equal`), so no answer can hang a step. Missing values (an empty parse, a
None) score 0 / False rather than raising, so one bad candidate never stops a run.

The functions that run code (`pass_rate`, `passes`, `run_answer`, `math_tool_reward`) take the
sandbox limits as the keyword-only `limits=` (a `Limits`; None: the defaults, `Limits()`). It is
not counted in their arity (the registry counts positional arguments only): whoever evaluates an
expression passes the run's limits, as an env passes its own to the runs it makes.

>>> pass_rate("def f(x):\\n    return 2 * x", ["assert f(2) == 4", "assert f(3) == 5"])
0.5
>>> passes("print(input()[::-1])", [{"input": "abc", "output": "cba"}])
True
>>> correct("\\\\frac{1}{2}", "0.5"), agree("2", "3")
(1.0, False)
"""

from __future__ import annotations

import builtins
import math
import re
from typing import Sequence

from masdsl.envs.mutants import killed_mutants, wrong_solution
from masdsl.envs.parsers import asserts
from masdsl.envs.registry import function
from masdsl.errors import UserError
from masdsl.sandbox import Limits, equal, run_python, run_tests, run_tests_many


def _tests(tests: object) -> list | None:
    """`tests` as a non-empty list of assert strings or io pairs, else None."""
    if isinstance(tests, str):
        tests = asserts(tests)
    if not isinstance(tests, (list, tuple)) or not tests:
        return None
    return list(tests)


def test_report(code: object, tests: object, *, limits: Limits | None = None):
    """The sandbox's `TestReport` of `code` on `tests` under `limits`, or None when either is
    missing/invalid."""
    tests = _tests(tests)
    if not isinstance(code, str) or not code.strip() or tests is None:
        return None
    try:
        return run_tests(code, tests, limits=limits)
    except UserError:  # a malformed test list: nothing to run
        return None


test_report.__test__ = False  # a function named test_*: not a pytest test


@function("pass_rate", returns="number")
def pass_rate(code: object, tests: object, *, limits: Limits | None = None) -> float:
    """Fraction of `tests` (assert strings or {input, output} pairs) that `code` passes; 0.0
    when the code or the tests are empty (a tester with no tests earns nothing).

    >>> pass_rate("", ["assert True"]), pass_rate("x = 1", []), pass_rate(None, None)
    (0.0, 0.0, 0.0)
    """
    report = test_report(code, tests, limits=limits)
    return float(report.pass_rate) if report is not None else 0.0


@function("passes", returns="bool")
def passes(code: object, tests: object, *, limits: Limits | None = None) -> bool:
    """True when there is at least one test and `code` passes all of them.

    >>> passes("x = 1", ["assert x == 1"]), passes("x = 1", [])
    (True, False)
    """
    report = test_report(code, tests, limits=limits)
    return report is not None and all(report.passed)


@function("catches", returns="number")
def catches(tests: object, solution: object, reference_tests: object, *, limits: Limits | None = None) -> float:
    """The share of `tests` (a tester's asserts) that hold for `solution` and fail for a wrong
    one: the first mutant of `solution` that `reference_tests` (the task's hidden tests) reject
    (`masdsl.envs.mutants`). A test that fails on the right solution catches nothing. 0.0 when
    there are no tests, or no mutant of the solution fails the hidden tests.

    >>> right = "def inc(x):\\n    return x + 1"
    >>> catches(["assert inc(1) == 2", "assert inc(0) == 0", "assert inc(2) > 0"], right, ["assert inc(1) == 2"])
    0.3333333333333333
    >>> catches([], right, ["assert inc(1) == 2"]), catches(["assert inc(1) == 2"], None, [])
    (0.0, 0.0)
    """
    mine, hidden = _tests(tests), _tests(reference_tests)
    if mine is None or hidden is None or not isinstance(solution, str) or not solution.strip():
        return 0.0
    wrong = wrong_solution(solution, [str(t) for t in hidden], limits=limits)
    if wrong is None:
        return 0.0
    right_report, wrong_report = test_report(solution, mine, limits=limits), test_report(wrong, mine, limits=limits)
    if right_report is None or wrong_report is None:
        return 0.0
    caught = [r and not w for r, w in zip(right_report.passed, wrong_report.passed)]
    return sum(caught) / len(caught) if caught else 0.0


@function("kills", returns="number")
def kills(tests: object, solution: object, reference_tests: object, *, limits: Limits | None = None) -> float:
    """A tester's mutation score: the share of the reference's wrong twins (`killed_mutants`: its
    first `KILL_MUTANTS` one-edit mutants that the hidden `reference_tests` reject) that `tests`
    reject, counting only the asserts that hold for `solution` (one that fails on the right
    solution would reject every solution). Where `catches` is a share of the asserts, and so rises
    when a tester writes fewer of them, this is a share of the bugs: more good asserts never lower
    it. 0.0 when there are no tests, no assert holds for `solution`, or no mutant is killed.

    >>> right = "def inc(x):\\n    return x + 1"
    >>> kills(["assert inc(1) == 2"], right, ["assert inc(1) == 2"])  # rejects x - 1, x + 2, return None
    1.0
    >>> kills(["assert inc(0) > 0", "assert inc(1) == 3"], right, ["assert inc(1) == 2"])  # x + 2 still passes
    0.6666666666666666
    >>> kills(["assert inc(1) == 3"], right, ["assert inc(1) == 2"])  # holds for no right solution
    0.0
    """
    mine, hidden = _tests(tests), _tests(reference_tests)
    if mine is None or hidden is None or not isinstance(solution, str) or not solution.strip():
        return 0.0
    wrong = killed_mutants(solution, [str(t) for t in hidden], limits=limits)
    right_report = test_report(solution, mine, limits=limits)
    if not wrong or right_report is None or not any(right_report.passed):
        return 0.0
    # every assert against every twin, as `catches` runs them (the first twin's run is its cached one)
    reports = run_tests_many([(w, mine) for w in wrong], limits=limits)
    rejected = [any(r and not w for r, w in zip(right_report.passed, report.passed)) for report in reports]
    return sum(rejected) / len(wrong)


def _clean(value: object) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    text = str(value).strip().strip("$").strip()
    return text or None


def equivalent(answer: object, reference: object) -> bool:
    """Whether two final answers are mathematically equal (both non-empty).

    >>> equivalent("2\\\\sqrt{2}", "\\\\sqrt{8}"), equivalent("10,000", 10000), equivalent("", "")
    (True, True, False)
    """
    a, b = _clean(answer), _clean(reference)
    if a is None or b is None:
        return False
    if a == b:
        return True
    return equal(a, b)  # out of process, under a wall-clock limit (see masdsl/sandbox/math_equal.py)


_NUMBER = r"\d+(?:,\d{3})*(?:\.\d+)?"  # thousands commas, not a list's
_OPERATOR = r"(?:\*\*|\*|//|\+|-|%|×|÷|·|\\times|\\cdot|\\div)"
# two numbers joined by an operator, the second not the base of a power or a coefficient (`3 \times 10^5`, `1+2\sqrt{3}`)
_BINARY_OPERATION = re.compile(rf"{_NUMBER}\s*\)?\s*{_OPERATOR}\s*\(?\s*{_NUMBER}(?![\d.]|\s*\^|\s*\\[a-zA-Z]|[a-zA-Z])")
_FRACTION = re.compile(r"\\[dt]?frac\{\s*(\d+)\s*\}\{\s*(\d+)\s*\}|(?<![\d.])(\d+)\s*/\s*(\d+)(?![\d.])")


def unevaluated_arithmetic(answer: object) -> bool:
    """Whether `answer` still holds arithmetic to do: two numbers joined by an operator, in any
    notation ("27 * 74 + 18 * 58", "\\(21 \\times 88 - 1511\\) bottles"), or a fraction whose value
    is a whole number ("874/2"). math-verify would evaluate it, doing the task's arithmetic itself.
    One number, a fraction in lowest terms, a power of ten and a surd are answers.

    >>> [unevaluated_arithmetic(a) for a in ("27 * 74 + 18 * 58", "3199 // 10 - 196", "(3+4)", "2*5", "874/2",
    ...     "The warehouse has \\\\(21 \\\\times 88 - 1511\\\\) bottles", "\\\\frac{1022}{2}", "3 \\\\cdot 4")]
    [True, True, True, True, True, True, True, True]
    >>> [unevaluated_arithmetic(a) for a in ("-42", "3/4", "1,234.5", "2+\\\\sqrt{3}", "1+2\\\\sqrt{3}", "x = 3", "1e-3",
    ...     "3 \\\\times 10^5", "\\\\frac{3}{4}", "\\\\boxed{874}", "(1,-2)", None)]
    [False, False, False, False, False, False, False, False, False, False, False, False]
    """
    text = _clean(answer)
    if text is None:
        return False
    if _BINARY_OPERATION.search(text):
        return True
    for m in _FRACTION.finditer(text):
        top, bottom = (int(g) for g in (m.groups()[:2] if m.group(1) else m.groups()[2:]))
        if bottom > 1 and top % bottom == 0:
            return True
    return False


@function("correct", returns="number")
def correct(answer: object, reference: object) -> float:
    """1.0 when `answer` equals `reference` mathematically (math-verify), else 0.0. An answer that
    is still arithmetic to do (`unevaluated_arithmetic`) earns 0.0: the grader is not the solver.

    >>> correct("x = 3", "3"), correct("0.75", "\\\\frac{3}{4}"), correct("4", "3"), correct(None, "3")
    (1.0, 1.0, 0.0, 0.0)
    >>> correct("27 * 74 + 18 * 58", "3042"), correct("3042", "3042")
    (0.0, 1.0)
    """
    if unevaluated_arithmetic(answer):
        return 0.0
    return 1.0 if equivalent(answer, reference) else 0.0


@function("agree", returns="bool")
def agree(a: object, b: object) -> bool:
    """True when two agents' answers are equivalent (neither empty).

    >>> agree("1/2", "0.5"), agree("", "")
    (True, False)
    """
    return equivalent(a, b)


@function("is_number", returns="bool")
def is_number(text: object) -> bool:
    """Whether `text` is one number, as a program's answer line or a boxed answer may print it
    (thousands commas, a leading `$` and surrounding spaces allowed): a tool's "valid answer".

    >>> is_number("1,234"), is_number(" -3.5 "), is_number("$12"), is_number(7)
    (True, True, True, True)
    >>> is_number("x = 3"), is_number(""), is_number(None), is_number("nan")
    (False, False, False, False)
    """
    if isinstance(text, bool) or text is None:
        return False
    s = str(text).strip().lstrip("$").replace(",", "").strip()
    try:
        return math.isfinite(float(s))
    except ValueError:
        return False


@function("run_answer", returns="str")
def run_answer(code: object, *, limits: Limits | None = None) -> str:
    """Run `code` in the sandbox; its last non-empty stdout line ("" if it failed or printed nothing).

    >>> run_answer("print('work')\\nprint(6 * 7)"), run_answer("1/0")
    ('42', '')
    """
    if not isinstance(code, str) or not code.strip():
        return ""
    result = run_python(code, limits=limits)
    if not result.ok:
        return ""
    lines = [ln.strip() for ln in result.stdout.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


@function("math_tool_reward", returns="number")
def math_tool_reward(code: object, reference: object, *, limits: Limits | None = None) -> float:
    """The math tool agent's reward, as the paper's reference scores it: -1 when there is no
    program or it fails to run (an exception, a non-zero exit, a timeout, a memory or output
    limit), else `correct` of its last printed line (1 or 0).

    >>> math_tool_reward("print(6 * 7)", "42"), math_tool_reward("print(41)", "42")
    (1.0, 0.0)
    >>> math_tool_reward("1/0", "42"), math_tool_reward("", "42"), math_tool_reward(None, "42")
    (-1.0, -1.0, -1.0)
    """
    if not isinstance(code, str) or not code.strip():
        return -1.0
    result = run_python(code, limits=limits)
    if not result.ok:
        return -1.0
    lines = [ln.strip() for ln in result.stdout.splitlines() if ln.strip()]
    return correct(lines[-1] if lines else "", reference)


@function("len", returns="number")
def length(x: object) -> int:
    """Length of a list or string; 0 for None (an empty parse).

    >>> length([1, 2]), length(None), length("abc")
    (2, 0, 3)
    """
    if x is None:
        return 0
    try:
        return builtins.len(x)
    except TypeError:
        return 0


@function("min", returns="number")
def minimum(a: float, b: float) -> float:
    """The smaller of two values.

    >>> minimum(0.5, 1)
    0.5
    """
    return builtins.min(a, b)


@function("max", returns="number")
def maximum(a: float, b: float) -> float:
    """The larger of two values.

    >>> maximum(0.5, 1)
    1
    """
    return builtins.max(a, b)


@function("abs", returns="number")
def absolute(x: float) -> float:
    """Absolute value.

    >>> absolute(-2.5)
    2.5
    """
    return builtins.abs(x)


def tester_reward(solution: object, tests: Sequence[object] | None, *, limits: Limits | None = None) -> float:
    """The tester's reward in `coder_tester`: the reference solution's pass rate on the tests it
    wrote (`pass_rate(task.solution, tests)`); wrong tests fail a correct solution.

    >>> tester_reward("def f(x):\\n    return x", ["assert f(1) == 1", "assert f(1) == 2"])
    0.5
    """
    return pass_rate(solution, tests, limits=limits)


tester_reward.__test__ = False  # named test*: not a pytest test
